"""Cross-design comparison (`pddbench designs SPEC`): several serving designs on one trace and one
chip budget, each at its best split, side by side, and a paper's figures judged against them.

A spec (scenarios/designs/*.yaml) names the designs (a scenario each, with its own budget where it
uses other chips, e.g. a homogeneous baseline), the chip budget, the instance sizes, the trace
length, the seeds and a reference design. For each design, `pddbench optimize` finds the best
split on seed 0 (every maximal split of the sizes measured on the steady trace); that split is
then measured on every seed: its capacity (throughput within SLA, BCR, cost per 1,000 requests)
and a run at one common load (load_fraction x the smallest mean capacity of the designs, so every
design is below its capacity there): TTFT, TPOT, WAN KV bytes per request and the line's egress
rate. Figures are means over seeds with a 95 % Student-t interval.

Every design must use the same workload and SLA (one trace, one bar): the spec is refused, naming
the design that differs. Claims (a paper's figures) are relative changes of a metric between two
designs, one value per seed, judged by the ledger's rules (pddbench/reproduce/ledger.py)."""

from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import Annotated, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pddbench.core.errors import InputError, UserError
from pddbench.reproduce.claim_rows import change
from pddbench.reproduce.ledger import Claim, Row

METRICS = {  # claim metric -> where its per-seed value comes from
    "throughput_within_sla_rps": "capacity", "bcr": "capacity", "cost_per_1k_requests_usd": "capacity",
    "cost_per_mtok_usd": "capacity and common load",
    "ttft_mean_ms": "common load", "ttft_p90_ms": "common load", "tpot_p90_ms": "common load",
    "wan_kv_bytes_per_request": "common load", "wan_egress_gbps": "common load",
}
MAX_DESIGNS = 8
MAX_BUDGET_CHIPS = 1_000_000  # chips of one kind in a budget: far past any cluster, within what splits count
MAX_CHIPS_PER_INSTANCE = 4096  # the scenario's own bound on deployment.<pool>.chips_per_instance (as optimize's)
Chips = Annotated[int, Field(ge=1, le=MAX_BUDGET_CHIPS)]
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086)  # Student t, 97.5 %, 1..20 degrees of freedom


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class DesignEntry(_Strict):
    scenario: str = Field(description="scenario YAML, relative to the spec file (or a shipped name)")
    budget: dict[str, Chips] | None = Field(None, description="chips per kind for this design (default: the spec's)")


class ClaimEntry(_Strict):
    id: str = Field(pattern=r"^[a-z0-9_]+$")
    figure: str
    # a relative change of a non-negative metric: -100 % (to nothing) .. +1e6 % (10,000 x)
    article: float = Field(ge=-100, le=1e6, description="the paper's figure: a finite % change")
    tolerance: float = Field(10.0, ge=0, le=1000, description="percentage points either side of article")
    metric: Literal[tuple(METRICS)]  # type: ignore[valid-type]
    design: str
    against: str


class DesignsSpec(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    budget: dict[str, Chips]
    sizes: list[Annotated[int, Field(ge=1, le=MAX_CHIPS_PER_INSTANCE)]] = Field([8], min_length=1, max_length=16)
    requests: int = Field(12_000, ge=50, le=1_000_000)
    seeds: int = Field(3, ge=1, le=20)
    iterations: int = Field(7, ge=1, le=20)
    load_fraction: float = Field(0.5, ge=0.001, lt=1)  # of the smallest capacity: below 0.1 % nothing queues
    reference: str
    designs: dict[str, DesignEntry] = Field(min_length=2, max_length=MAX_DESIGNS)
    claims: list[ClaimEntry] = []


def load_spec(path: Path, overrides: dict | None = None) -> tuple[DesignsSpec, dict]:
    """The spec (with `overrides` of its fields, e.g. reproduce's requests and seeds) and each
    design's seed-0 scenario; refused in one line (file, line, field)."""
    from pddbench.core.loading import load_yaml, read_text
    from pddbench.schema.ranges import with_range
    from pddbench.schema.scenario import clean_loc, clean_msg, yaml_line

    text = read_text(path, "designs spec")
    raw = load_yaml(text, str(path))

    def error(loc: tuple, msg: str) -> InputError:
        return InputError(str(path), msg, line=yaml_line(text, loc)[0], field=".".join(map(str, loc)))

    if not isinstance(raw, dict):
        raise InputError(str(path), "a designs spec is a YAML mapping (name, budget, designs, ...)")
    try:
        spec = DesignsSpec.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = clean_loc(err["loc"])
        raise error(loc, with_range(DesignsSpec, loc, clean_msg(err["msg"]))) from None
    if overrides:  # reproduce's own settings (its tiny test runs go below the spec's 50 requests)
        spec = spec.model_copy(update=overrides)
    for chip, n in spec.budget.items():
        if n < 1:
            raise error(("budget", chip), f"a budget is at least 1 chip, not {n}")
    if spec.reference not in spec.designs:
        raise error(("reference",), f"'{spec.reference}' is not among the designs ({', '.join(spec.designs)})")
    for i, c in enumerate(spec.claims):
        for side in ("design", "against"):
            if getattr(c, side) not in spec.designs:
                raise error(("claims", i, side), f"'{getattr(c, side)}' is not among the designs "
                            f"({', '.join(spec.designs)})")
        if c.design == c.against:
            raise error(("claims", i, "against"), f"claim {c.id} compares design '{c.design}' with itself (a change "
                        f"of 0 % by construction); name another design ({', '.join(d for d in spec.designs if d != c.design)})")
    ids = [c.id for c in spec.claims]
    if len(set(ids)) < len(ids):
        raise error(("claims",), f"claim id '{next(i for i in ids if ids.count(i) > 1)}' is given twice")
    scenarios = {}
    for name in spec.designs:
        try:
            scenarios[name] = _scenario(path, spec, name, 0)
        except UserError as exc:
            raise error(("designs", name, "scenario"), str(exc)) from None
    ref = scenarios[spec.reference]
    for name, sc in scenarios.items():
        for what in ("workload", "sla"):
            if getattr(sc, what) != getattr(ref, what):
                raise error(("designs", name, "scenario"), f"its {what} differs from the reference design "
                            f"{spec.reference}'s: every design must see one trace and one SLA")
    return spec, scenarios


def _scenario(spec_path: Path, spec: DesignsSpec, name: str, seed: int):
    from pddbench.core.shipped import resolve_scenario
    from pddbench.schema.scenario import load_scenario

    entry = spec.designs[name]
    file = spec_path.parent / entry.scenario
    file = file if file.is_file() else resolve_scenario(entry.scenario)
    sc = load_scenario(file, seed_overrides(file, seed, spec.requests))
    if sc.runtime != "sim" or sc.deployment is None:
        raise UserError(f"{file}: a design is a simulated scenario with a deployment")
    return sc


def seed_overrides(file: Path, seed: int, requests: int) -> list[str]:
    from pddbench.schema.scenario import load_scenario

    source = load_scenario(file).workload.resolved_source()
    if source == "synth":
        return [f"seed={seed}", f"workload.synth.seed={seed}", f"workload.synth.requests={requests}"]
    if source == "fixed":
        return [f"seed={seed}", f"workload.fixed.seed={seed}", f"workload.fixed.requests={requests}"]
    return [f"seed={seed}", f"workload.max_requests={requests}"]  # a trace file: its first `requests`


def interval(values: list[float]) -> dict:
    """Mean and 95 % Student-t interval over seeds (None where fewer than two values)."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return {"mean": None, "ci95": None, "n": 0}
    mean = sum(vals) / len(vals)
    if len(vals) < 2:
        return {"mean": mean, "ci95": None, "n": len(vals)}
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1))
    t = T975[len(vals) - 2] if len(vals) - 1 <= len(T975) else 1.96
    half = t * sd / math.sqrt(len(vals))
    return {"mean": mean, "ci95": [mean - half, mean + half], "n": len(vals)}


def capacity_values(cap: dict) -> dict:
    rps, cost = cap["throughput_within_sla_rps"], cap.get("cost_per_hour")
    return {"throughput_within_sla_rps": rps, "bcr": cap.get("bcr"),
            "cost_per_1k_requests_usd": cost / (rps * 3.6) if rps and cost is not None else None}


def with_token_cost(v: dict) -> dict:
    """$ per million output tokens at capacity: the hour's cost over the tokens it serves (the
    requests at capacity x the mean output length the common-load run measured)."""
    per_1k, out = v["cost_per_1k_requests_usd"], v.get("output_tokens_per_request")
    return {**v, "cost_per_mtok_usd": per_1k * 1000 / out if per_1k is not None and out else None}


def load_values(s: dict) -> dict:
    n = s["requests_total"] or 0
    span_s = s.get("duration_s") or 0  # first arrival -> last completion: the line's busy span at most
    tokens = s.get("output_tokens_per_s") and s.get("throughput_rps") and s["output_tokens_per_s"] / s["throughput_rps"]
    return {"ttft_mean_ms": s["ttft_ms"]["mean"], "ttft_p90_ms": s["ttft_ms"]["p90"], "tpot_p90_ms": s["tpot_ms"]["p90"],
            "output_tokens_per_request": tokens or None,
            "wan_kv_bytes_per_request": s["wan_kv_bytes"] / n if n else None,
            "wan_egress_gbps": s["wan_kv_bytes"] * 8 / span_s / 1e9 if span_s else None}


def claim_rows(spec: DesignsSpec, per_seed: dict[str, list[dict]], caps: dict[str, list[dict]]) -> list[Row]:
    """Each claim's row: the change of its metric, `design` against `against`, one value per seed;
    inconclusive where it rests on capacities that are not steady-state evidence."""
    from pddbench.reproduce.claim_rows import unsteady_reason

    rows = []
    for c in spec.claims:
        vals = [change(a[c.metric], b[c.metric]) for a, b in zip(per_seed[c.design], per_seed[c.against])]
        claim = Claim(c.id, c.figure, c.article, "%", "change", c.tolerance,
                      f"{c.design} vs {c.against}, each at its best split ({METRICS[c.metric]}: {c.metric})")
        row = Row(claim, [v for v in vals if v is not None])
        if "capacity" in METRICS[c.metric]:
            row.unsteady = unsteady_reason(caps[c.design] + caps[c.against])
        rows.append(row)
    return rows


def rows_from_json(claims: list[dict]) -> list[Row]:
    """designs.json's claims back as ledger rows (for the reproduction report)."""
    fields = ("id", "figure", "article", "unit", "kind", "tolerance", "depends_on")
    return [Row(Claim(*(c[f] for f in fields)), list(c["simulated_values"]), c["note"], c["unsteady"] or "")
            for c in claims]


def words(spec: DesignsSpec, table: dict[str, dict], load_rps: float) -> list[str]:
    """The answer in a few generated lines: who carries the most within the SLA, at what cost,
    what a user sees at the common load, and what crosses the line."""
    def m(name: str, key: str):
        return table[name][key]["mean"]
    thr = sorted(spec.designs, key=lambda n: -(m(n, "throughput_within_sla_rps") or 0))
    ref = spec.reference
    out = [f"Throughput within SLA at each design's best split: " + ", ".join(
        f"{n} {m(n, 'throughput_within_sla_rps'):.3g} req/s" + _vs(m(n, 'throughput_within_sla_rps'),
                                                                    m(ref, 'throughput_within_sla_rps'), n, ref)
        for n in thr) + "."]
    cheap = sorted((n for n in spec.designs if m(n, "cost_per_1k_requests_usd")), key=lambda n: m(n, "cost_per_1k_requests_usd"))
    if cheap:
        out.append("Cost per 1,000 requests at capacity: " + ", ".join(
            f"{n} ${m(n, 'cost_per_1k_requests_usd'):.3g}" for n in cheap) + ".")
    fast = sorted(spec.designs, key=lambda n: m(n, "ttft_p90_ms") if m(n, "ttft_p90_ms") is not None else math.inf)
    out.append(f"At a common load of {load_rps:.3g} req/s, P90 TTFT: " + ", ".join(
        f"{n} {m(n, 'ttft_p90_ms') / 1000:.3g} s" for n in fast if m(n, "ttft_p90_ms") is not None)
        + "; P90 TPOT: " + ", ".join(f"{n} {m(n, 'tpot_p90_ms'):.3g} ms" for n in fast if m(n, "tpot_p90_ms") is not None) + ".")
    wan = [n for n in spec.designs if m(n, "wan_egress_gbps")]
    if wan:
        out.append("WAN egress at that load: " + ", ".join(
            f"{n} {m(n, 'wan_egress_gbps'):.3g} Gbit/s ({m(n, 'wan_kv_bytes_per_request') / 1e6:.3g} MB per request)"
            for n in sorted(wan, key=lambda n: m(n, "wan_egress_gbps"))) + ".")
    return out


def _vs(value, ref_value, name: str, ref: str) -> str:
    ch = change(value, ref_value)
    return "" if name == ref or ch is None else f" ({ch:+.0f} % vs {ref})"


def run_designs(spec_path: Path, jobs: int | None, ray: str | None, out: Path | None, results: Path,
                on_stage: Callable[[str], None] | None = None, along: str | None = None, points: int = 3,
                steps: int = 3, max_searches: int = 2000, overrides: dict | None = None,
                max_hours: float = math.inf, executor=None, draw: bool = True) -> tuple[dict, Path]:
    """`pddbench designs`: the spec checked and its size estimated first, then into `out` or a new
    RESULTS/designs/<run-id>/: designs.json, designs.md, designs.png; with `along` ("PATH=LO..HI")
    where each design wins along that assumption (designs_along.py): designs_along.png.
    `executor`: the caller's (used, not closed), else one from `jobs` and `ray`; `draw` False: no
    designs.png (a caller in a background thread draws it in the foreground: pyplot is not
    thread-safe)."""
    from pddbench.reproduce import designs_along as da
    from pddbench.core.io import check_out_options, run_folder, write_json, write_text
    from pddbench.core.limits import SIM_S_PER_REQUEST, capacity_probes, check_size, check_work, duration
    from pddbench.core.provenance import provenance
    from pddbench.core.ray_cluster import check_ray_option
    from pddbench.reproduce.designs_figure import designs_figure
    from pddbench.reproduce.ledger import markdown_table
    from pddbench.sweep.executors import make_executor
    from pddbench.sweep.optimize import check_split_count

    check_out_options(out, results)
    axis = da.parse_along(along) if along else None
    spec, scenarios = load_spec(spec_path, overrides)
    budgets = {n: spec.designs[n].budget or spec.budget for n in spec.designs}
    names = {"sizes": f"{spec_path}: sizes", "raise": "give --max-searches N (or fewer sizes, a smaller budget in "
             "the spec)"}
    splits = {n: check_split_count(sc, _budget_for(sc, budgets[n], spec_path, n), spec.sizes, max_searches,
                                   names={**names, "budget": f"{spec_path}: designs.{n}.budget"
                                          if spec.designs[n].budget else f"{spec_path}: budget"})
              for n, sc in scenarios.items()}
    per_search = capacity_probes(spec.iterations) * spec.requests * SIM_S_PER_REQUEST
    searches = sum(splits.values()) + len(spec.designs) * spec.seeds
    if axis:
        for sc in scenarios.values():  # a bad path or value is refused before the folder
            da.with_value(sc, axis[0], axis[1]), da.with_value(sc, axis[0], axis[2])
        searches += da.estimated_searches(splits, points, steps)

    check_size(f"{len(spec.designs)} designs ({sum(splits.values())} candidate splits), {spec.seeds} seeds"
               + (f", --along with --points {points} --steps {steps}," if axis else "") + " need at most",
               searches, max_searches, per_search, "give --max-searches N (or fewer designs, sizes, --points, --steps)",
               f"a capacity search of ~{capacity_probes(spec.iterations)} probes on {spec.requests:,} requests",
               unit=" capacity searches")
    check_work(f"{len(spec.designs)} designs, {searches:,} capacity searches of ~{capacity_probes(spec.iterations)} "
               f"probes on {spec.requests:,} requests, {spec.seeds} seeds", searches * per_search, max_hours,
               " (or fewer requests, seeds, designs or sizes)")
    check_ray_option(ray)
    say = on_stage or (lambda _m: None)
    say(f"{len(spec.designs)} designs, {sum(splits.values())} candidate splits, {spec.seeds} seeds: about "
        f"{duration(searches * per_search)} of simulation on one core")
    runner = contextlib.nullcontext(executor) if executor is not None else make_executor(jobs, ray)
    with run_folder(out, results, "designs") as folder, runner as ex:
        best = _best_splits(spec, scenarios, budgets, ex, say, splits)
        # Ctrl-C from here keeps the best splits found (the long part on large budgets)
        write_json(folder.path / "designs.json", {"name": spec.name, "complete": False, "interrupted": True,
                                                   "best_splits": {n: b["best"] for n, b in best.items()}})
        folder.interrupted(f"designs.json (the best splits of {len(best)} designs)")
        caps = _capacities(spec_path, spec, best, ex, say)
        load_rps = spec.load_fraction * min(interval([c["throughput_within_sla_rps"] for c in cs])["mean"] or 0
                                            for cs in caps.values())
        runs = _common_load(spec_path, spec, best, load_rps, ex, say)
        per_seed = {n: [with_token_cost({**capacity_values(c), **load_values(s)}) for c, s in zip(caps[n], runs[n])]
                    for n in spec.designs}
        table = {n: {k: interval([v[k] for v in per_seed[n]]) for k in METRICS} for n in spec.designs}
        rows = claim_rows(spec, per_seed, caps)
        result = {"name": spec.name, "description": spec.description, "spec": spec.model_dump(mode="json"),
                  "reference": spec.reference, "common_load_rps": load_rps,
                  "designs": {n: {"scenario": spec.designs[n].scenario, "budget": budgets[n],
                                  "best": {k: best[n]["best"][k] for k in ("label", "split", "chips", "cost_per_hour")},
                                  "candidates": len(best[n]["candidates"]), "metrics": table[n],
                                  "per_seed": per_seed[n],
                                  "capacity_bound_by": [c.get("bound_by") for c in caps[n]],
                                  "capacity_warnings": sorted({w for c in caps[n] for w in c.get("warnings") or []})}
                              for n in spec.designs},
                  "claims": [r.to_json() for r in rows], "words": words(spec, table, load_rps),
                  "complete": True, "interrupted": False,
                  "provenance": provenance()}
        if axis:
            write_json(folder.path / "designs.json", {**result, "complete": False, "interrupted": True})
            folder.interrupted("designs.json (the comparison at the spec's assumptions; not the --along search)")
            result["along"] = da.search_along(spec, scenarios, budgets, *axis, points, steps, ex, say, capacity_values)
            result["words"] += result["along"]["words"]
            result.update(complete=True, interrupted=False)
            da.along_figure(result["along"], f"{spec.name}: where each design wins along {axis[0]} (seed 0, "
                            f"{spec.requests:,} requests, best splits at every probe)", folder.path / "designs_along.png")
        write_json(folder.path / "designs.json", result)
        if draw:
            designs_figure(result, folder.path / "designs.png")
        write_text(folder.path / "designs.md", _markdown(result, rows, markdown_table))
    return result, folder.path


def _budget_for(sc, budget: dict[str, int], spec_path: Path, name: str) -> dict[str, int]:
    used = {p.chip for p in sc.deployment.pools().values()}
    if set(budget) != used:
        raise InputError(str(spec_path), f"design {name} uses chips {sorted(used)} but its budget names "
                         f"{sorted(budget)}: give it a budget of its own (designs.{name}.budget)",
                         field=f"designs.{name}.budget")
    return budget


def _best_splits(spec: DesignsSpec, scenarios: dict, budgets: dict, ex, say,
                 max_splits: dict[str, int]) -> dict[str, dict]:
    from pddbench.sweep.checked_search import optimize_checked

    out = {}
    for name, sc in scenarios.items():
        say(f"{name}: best split of {', '.join(f'{k}={v}' for k, v in budgets[name].items())} "
            f"(seed 0, {spec.requests:,} requests)")
        # every candidate measured: the best by a capacity search, the others by a check where it first failed
        out[name] = optimize_checked(sc, budgets[name], spec.sizes, ex, spec.iterations, spec.requests,
                                     max_splits=max_splits[name])
        say(f"{name}: best {out[name]['best']['label']} "
            f"{out[name]['best']['throughput_within_sla_rps']:.3g} req/s")
    return out


def _seeded(spec_path: Path, spec: DesignsSpec, best: dict, name: str, seed: int):
    from pddbench.sweep.optimize import with_split

    return with_split(_scenario(spec_path, spec, name, seed), best[name]["best"]["split"])


def _capacities(spec_path: Path, spec: DesignsSpec, best: dict, ex, say) -> dict[str, list[dict]]:
    """Each best split's capacity on every seed (seed 0's is optimize's own)."""
    from pddbench.sweep.optimize import measure

    jobs = [(n, s) for n in spec.designs for s in range(1, spec.seeds)]
    say(f"capacities of the best splits on seeds 1..{spec.seeds - 1}" if jobs else "one seed")
    near = [best[n]["best"].get("rate_scale") for n, _ in jobs]  # warm starts: seed 0's answer
    got = dict(zip(jobs, measure([_seeded(spec_path, spec, best, n, s) for n, s in jobs], ex, spec.iterations, near)))
    return {n: [_seed0(best[n])] + [got[(n, s)] for s in range(1, spec.seeds)] for n in spec.designs}


def _seed0(res: dict) -> dict:
    row = next(c for c in res["candidates"] if c["label"] == res["best"]["label"])
    return row["full"]


def _common_load(spec_path: Path, spec: DesignsSpec, best: dict, load_rps: float, ex, say) -> dict[str, list[dict]]:
    """Every best split on every seed at `load_rps` (the same request stream per seed)."""
    from pddbench.measure.capacity import rate_scale_for
    from pddbench.sweep.executors import results_in_order
    from pddbench.sweep.payload import make_payload, ship_scenario
    from pddbench.workload.source import workload_requests

    say(f"every best split at the common load {load_rps:.3g} req/s on {spec.seeds} seed(s)")
    jobs, payloads = [], []
    for n in spec.designs:
        for s in range(spec.seeds):
            sc = _seeded(spec_path, spec, best, n, s)
            ts = [r.timestamp_ms for r in workload_requests(sc)]
            offered = (len(ts) - 1) / ((max(ts) - min(ts)) / 1000 / sc.workload.rate_scale)
            sc.workload.rate_scale = rate_scale_for(load_rps, offered, sc.workload.rate_scale)
            data, blobs = ship_scenario(sc)
            jobs.append((n, s))
            payloads.append(make_payload({"kind": "simulate", "scenario": data}, blobs))
    got = dict(zip(jobs, results_in_order(ex, payloads, "summary", lambda i: f"{jobs[i][0]} at the common load")))
    return {n: [got[(n, s)] for s in range(spec.seeds)] for n in spec.designs}


def _cell(iv: dict, fmt: str, scale: float = 1.0) -> str:
    if iv["mean"] is None:
        return "-"
    text = format(iv["mean"] * scale, fmt)
    if iv["ci95"]:
        text += f" ({format(iv['ci95'][0] * scale, fmt)} .. {format(iv['ci95'][1] * scale, fmt)})"
    return text


def _markdown(result: dict, rows: list[Row], markdown_table) -> str:
    cols = [("throughput within SLA (req/s)", "throughput_within_sla_rps", ".3g", 1.0),
            ("BCR (req/s per $/h)", "bcr", ".3g", 1.0), ("$ per 1k requests", "cost_per_1k_requests_usd", ".3g", 1.0),
            ("$ per M output tokens", "cost_per_mtok_usd", ".3g", 1.0),
            ("P90 TTFT (s)", "ttft_p90_ms", ".3g", 1e-3), ("P90 TPOT (ms)", "tpot_p90_ms", ".3g", 1.0),
            ("WAN egress (Gbit/s)", "wan_egress_gbps", ".3g", 1.0)]
    head = "| design | best split | " + " | ".join(c[0] for c in cols) + " |\n|" + " --- |" * (len(cols) + 2) + "\n"
    body = "".join(f"| {n} | {d['best']['label']} | " + " | ".join(_cell(d["metrics"][k], f, sc) for _, k, f, sc in cols)
                   + " |\n" for n, d in result["designs"].items())
    spec = result["spec"]
    text = (f"# Designs: {result['name']}\n\n{result['description']}\n\n" + "\n".join(f"- {w}" for w in result["words"])
            + f"\n\n![designs](designs.png)\n\n## Each design at its best split\n\nMeans over {spec['seeds']} seeds "
            f"(95 % Student-t interval); capacities from {spec['requests']:,}-request traces; the common load is "
            f"{spec['load_fraction']:g} x the smallest capacity = {result['common_load_rps']:.3g} req/s.\n\n" + head + body)
    warned = {n: d["capacity_warnings"] for n, d in result["designs"].items() if d["capacity_warnings"]}
    if warned:
        text += "\nCapacity warnings: " + "; ".join(f"{n}: {', '.join(w)}" for n, w in warned.items()) + "\n"
    if rows:
        text += "\n## The paper's figures\n\n" + markdown_table(rows)
    if "along" in result:
        al = result["along"]
        text += (f"\n## Where each design wins along {al['axis']}\n\n" + "\n".join(f"- {w}" for w in al["words"])
                 + "\n\n![where each design wins](designs_along.png)\n")
    return text
