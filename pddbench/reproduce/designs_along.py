"""Where each design wins along one assumption (`pddbench designs SPEC --along PATH=LO..HI`).

The axis is set on every design's scenario alike (a WAN field on the line's profile, e.g.
network.wan.rate_gbps). At each probe value every design's best split is searched again
(`optimize`, seed 0, the spec's sizes and trace), and the winner is the design with the highest
throughput within SLA (and, separately, the lowest cost per 1,000 requests). The search probes a
grid first (both ends and evenly between, geometric on a log axis), then bisects `steps` times each
bracket of two neighbouring probes whose winners differ, as `pddbench crossovers` does for PDD
against same-DC PD: a crossover is the bracket's middle, with the bracket. Seed 0 only: a winner
within the seeds' spread of the runner-up is close, and the probe says by how much."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

from pddbench.core.errors import UserError

CRITERIA = {"throughput": ("throughput_within_sla_rps", max), "cost": ("cost_per_1k_requests_usd", min)}


def parse_along(text: str) -> tuple[str, float, float]:
    """'PATH=LO..HI' -> (path, lo, hi); refused in one line."""
    path, sep, rng = text.partition("=")
    lo_text, dots, hi_text = rng.partition("..")
    try:
        lo, hi = float(lo_text), float(hi_text)
    except ValueError:
        lo = hi = math.nan
    if not sep or not dots or not path.strip() or not (math.isfinite(lo) and math.isfinite(hi)) or lo >= hi:
        why = (f"LO {lo:g} is not below HI {hi:g}; " if sep and dots and path.strip() and math.isfinite(lo)
               and math.isfinite(hi) else "")
        raise UserError(f"--along {text}: {why}give PATH=LO..HI with finite LO < HI, e.g. network.wan.rate_gbps=1..400")
    keys = path.strip().split(".")
    if keys[0] == "deployment" and keys[-1] in SEARCHED:
        raise UserError(f"--along {text}: {path.strip()} is what the best-split search chooses at every probe "
                        f"(each pool's {' and '.join(SEARCHED)}), so it cannot be an assumption to vary; give "
                        "another field, e.g. network.wan.rate_gbps=1..400 or sla.tpot_ms=40..400")
    return path.strip(), lo, hi


SEARCHED = ("instances", "chips_per_instance")  # a pool's fields the best-split search sets (with_split)


def is_log(lo: float, hi: float) -> bool:
    return lo > 0 and hi / lo >= 10


def grid(lo: float, hi: float, points: int) -> list[float]:
    if is_log(lo, hi):
        return [lo * (hi / lo) ** (i / (points - 1)) for i in range(points)]
    return [lo + (hi - lo) * i / (points - 1) for i in range(points)]


def with_value(sc, path: str, value: float):
    """`sc` with `path` set to `value`; a field of the WAN line's profile (network.wan.X) is set on
    the profile the scenario names, made inline. Refused in one line where the path is no number."""
    from pydantic import ValidationError

    from pddbench.schema.scenario import Scenario

    from pddbench.reproduce.crossovers import HIT_MIX_AXIS, hit_mix_hist

    data = sc.model_dump(mode="json")
    if path == HIT_MIX_AXIS:  # 0: the Mooncake-like hit mix .. 1: the PDD-like one
        if not 0 <= value <= 1 or data["workload"].get("synth") is None:
            raise UserError(f"--along {path}: a share from 0 to 1 of a generated (synth) workload's mix")
        data["workload"]["synth"]["target_hist"] = hit_mix_hist(value)
        return Scenario.model_validate(data)
    keys = path.split(".")
    if keys[:2] == ["network", "wan"] and isinstance(data["network"]["wan"], str):
        data["network"]["wan"] = sc.network.wan_profile().model_dump(mode="json")
    node = data
    for k in keys[:-1]:
        if not isinstance(node, dict) or k not in node:
            raise UserError(f"--along {path}: the scenario has no '{k}' there (e.g. network.wan.rate_gbps, "
                            "sla.tpot_ms, model.kv_bytes_per_token, chips.<chip>.price_per_hour, "
                            "workload.synth.max_context_tokens, workload.hit_mix_pdd_share)")
        node = node[k]
    old = node.get(keys[-1], None) if isinstance(node, dict) else None
    if not isinstance(node, dict) or keys[-1] not in node or isinstance(old, bool) or not isinstance(old, (int, float, type(None))):
        raise UserError(f"--along {path}: not a number of the scenario")
    node[keys[-1]] = int(round(value)) if isinstance(old, int) else value
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise UserError(f"--along {path}={value:g}: {exc.errors()[0]['msg']}") from None


def search_along(spec, scenarios: dict, budgets: dict, path: str, lo: float, hi: float, points: int, steps: int,
                 ex, say: Callable[[str], None], capacity_values: Callable[[dict], dict]) -> dict:
    """The probes and crossovers along `path` for each criterion; `capacity_values` turns a
    capacity result into the compared figures (designs.py's)."""
    from pddbench.sweep.optimize import optimize

    for v in (lo, hi):  # a bad path or value is refused before any search
        for sc in scenarios.values():
            with_value(sc, path, v)
    log = is_log(lo, hi)
    probes: dict[float, dict] = {}

    def probe(values: list[float]) -> None:
        for v in values:
            if v in probes:
                continue
            row = {}
            for name, sc in scenarios.items():
                res = optimize(with_value(sc, path, v), budgets[name], spec.sizes, ex, spec.iterations, spec.requests,
                               None, 3)
                row[name] = {"split": res["best"]["label"], **capacity_values(res["best"])}
            probes[v] = row
            say(f"{path} = {v:.4g}: " + ", ".join(f"{n} {r['split']} {r['throughput_within_sla_rps']:.3g} req/s"
                                                  for n, r in row.items()))

    def winner(v: float, criterion: str) -> str | None:
        key, pick = CRITERIA[criterion]
        vals = {n: r[key] for n, r in probes[v].items() if r[key] is not None and r[key] > 0}
        return pick(vals, key=vals.get) if vals else None

    probe(grid(lo, hi, points))
    crossings = []
    base = grid(lo, hi, points)
    for criterion in CRITERIA:
        for a, b in zip(base, base[1:]):
            wa, wb = winner(a, criterion), winner(b, criterion)
            if wa == wb or wa is None or wb is None:
                continue
            x, y = a, b
            for _ in range(steps):
                m = math.sqrt(x * y) if log else (x + y) / 2
                probe([m])
                if winner(m, criterion) == wa:
                    x = m
                else:
                    y = m
            mid = math.sqrt(x * y) if log else (x + y) / 2
            crossings.append({"criterion": criterion, "below": wa, "above": winner(y, criterion),
                              "value": mid, "bracket": [x, y]})
    winners = {c: {f"{v:.6g}": winner(v, c) for v in sorted(probes)} for c in CRITERIA}
    return {"axis": path, "range": [lo, hi], "log": log, "points": points, "steps": steps,
            "probes": [{"value": v, "designs": probes[v]} for v in sorted(probes)], "winners": winners,
            "crossovers": crossings, "words": along_words(path, lo, hi, crossings, winners)}


def along_words(path: str, lo: float, hi: float, crossings: list[dict], winners: dict) -> list[str]:
    out = []
    for criterion, what in (("throughput", "highest throughput within SLA"), ("cost", "lowest cost per request")):
        mine = [c for c in crossings if c["criterion"] == criterion]
        if not mine:
            ws = {w for w in winners[criterion].values() if w}
            who = ", ".join(sorted(ws)) or "no design (every capacity 0)"
            out.append(f"Along {path} ({lo:g} .. {hi:g}), the {what}: {who} across the whole range.")
            continue
        parts = [f"{c['below']} below {c['value']:.4g} (bracket {c['bracket'][0]:.4g} .. {c['bracket'][1]:.4g}), "
                 f"{c['above']} above" for c in mine]
        out.append(f"Along {path} ({lo:g} .. {hi:g}), the {what}: " + "; then ".join(parts) + ".")
    return out


def estimated_searches(splits: dict[str, int], points: int, steps: int) -> int:
    """An upper bound: every design's splits at every grid point and at `steps` probes in each of the
    grid's brackets, for both criteria."""
    return sum(splits.values()) * (points + 2 * steps * (points - 1))


def along_figure(along: dict, title: str, path: Path) -> Path:
    from pddbench.core.io import save_figure
    from pddbench.report.plotting import pyplot

    plt = pyplot()
    fig, axs = plt.subplots(1, 2, figsize=(12, 4.2))
    names = list(along["probes"][0]["designs"])
    xs = [p["value"] for p in along["probes"]]
    for ax, (criterion, (key, _)) in zip(axs, CRITERIA.items()):
        for n in names:
            ax.plot(xs, [p["designs"][n][key] for p in along["probes"]], marker="o", label=n)
        for c in along["crossovers"]:
            if c["criterion"] == criterion:
                ax.axvspan(*c["bracket"], color="grey", alpha=0.25)
                ax.axvline(c["value"], color="grey", ls="--", lw=1)
        if along["log"]:
            ax.set_xscale("log")
        ax.set_xlabel(along["axis"])
        ax.set_ylabel("throughput within SLA (req/s)" if criterion == "throughput" else "$ per 1,000 requests")
        ax.legend(fontsize="x-small")
    fig.suptitle(title, fontsize="medium")
    save_figure(fig, path)
    return path
