"""Crossovers: along each assumption the article leaves open, where PDD's advantage over same-DC
PD changes sign (issue 27, point 4).

For a claim (a signed advantage, positive where PDD wins the article's way) and one axis, with
every other assumption at its shipped value, the search measures the advantage at both ends of
the axis's range; where the signs differ it bisects (geometric mean on log axes) `steps` times
and reports the final bracket's middle, else `value: null` and on which side PDD stands
throughout. Each probe compares best split against best split: at every axis value, each
deployment's split is found by climbing the candidates of one instance size (8 chips) from the
best of the nearest probe: capacity is unimodal in the prefill:decode ratio, so the climb stops at
the first split whose neighbours are both lower. Capacities come from the steady-state search on
`requests` (12,000 by default: the length at which reproduce's capacities converge), seed 0.

What is derived, not simulated: chip B's price changes no capacity, so its crossover for BCR and
cost per token is solved exactly from the shipped-value capacities (cost is linear in the
price); throughput never changes sign along it. The offered load changes no best split: the TTFT
claim's load crossover runs both best splits (at the shipped values) at loads between 5 % and
95 % of the smaller capacity and bisects the mean-TTFT change.

Claims: throughput within SLA (best vs best), BCR (cost per token changes sign at the same place:
cost per token is cost / throughput, BCR its inverse), mean TTFT at a common load."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from pddbench.workload.synth import MOONCAKE_LIKE_HIST, PDD_LIKE_HIST

CLAIMS = {"throughput_change_best": "throughput within SLA (best vs best)",
          "bcr_change": "BCR and cost per token (best vs best)",
          "ttft_change_common": "mean TTFT at a common load (best splits)"}
DEPLOYMENTS = ("same-dc-pd", "pdd")
SIZE = 8  # chips per instance of every climbed split (the light split search's size)


@dataclass(frozen=True)
class Axis:
    """An assumption to search: its range, whether to bisect on a log scale, which deployments
    it changes (same-DC PD has no WAN and no chip B), and how a value becomes scenario overrides."""
    name: str
    label: str
    lo: float
    hi: float
    log: bool
    pdd_only: bool
    shipped: float

    def overrides(self, value: float) -> list[str]:
        if self.name == "network.wan.rate_gbps":
            # the shipped line's profile (cross-city-10g) with another rate
            return [f"network.wan={{delay_ms: 15, jitter: {{distribution: normal, sd_ms: 1.0}}, rate_gbps: {value:.9g}}}"]
        if self.name == HIT_MIX_AXIS:
            return [f"workload.synth.target_hist=[{', '.join(f'{h:.9g}' for h in hit_mix_hist(value))}]"]
        if self.name == "workload.synth.output_median_tokens":
            return [f"{self.name}={round(value)}"]
        return [f"{self.name}={value:.9g}"]


HIT_MIX_AXIS = "workload.hit_mix_pdd_share"  # not a scenario field: a blend of two hit-rate histograms


def hit_mix_hist(share: float) -> list[float]:
    """The generated trace's hit-rate histogram `share` of the way from the Mooncake-like mix
    (0) to the PDD-like one (1)."""
    return [round(share * p + (1 - share) * m, 9) for p, m in zip(PDD_LIKE_HIST, MOONCAKE_LIKE_HIST)]


# The simulated axes (throughput and BCR), each with its shipped value inside the range.
AXES = {a.name: a for a in (
    Axis("sla.tpot_ms", "TPOT SLA (ms)", 40, 400, True, False, 100),
    Axis("sla.ttft_ms", "TTFT SLA (ms)", 1000, 30000, True, False, 5000),
    Axis("network.wan.rate_gbps", "WAN line rate (Gbit/s)", 1, 400, True, True, 10),
    Axis("model.kv_bytes_per_token", "KV bytes/token", 2000, 100000, True, False, 47606),
    Axis("chips.B.memory_bw_tbps", "chip B memory BW (TB/s)", 1.6, 12, True, True, 4.8),
    Axis("workload.hit_mix_pdd_share", "hit mix (share of the PDD-like mix)", 0.0, 1.0, False, False, 1.0),
    Axis("workload.synth.output_median_tokens", "output median (tokens)", 50, 2000, True, False, 250),
)}
MODEL_AXIS = "model"  # categorical: each shipped model in turn (pddbench/models/shipped/)
MODEL_LOAD_FRACTION = 0.5  # the model axis's common load for the TTFT claim: half the smaller capacity
RATE_AXIS = "network.wan.rate_gbps"


@dataclass(frozen=True)
class ModelChoice:
    """The model axis's value holder for a frontier-style search: `--set model=NAME` on both
    deployments (the model changes both)."""
    name: str = MODEL_AXIS
    pdd_only: bool = False

    def overrides(self, value: str) -> list[str]:
        return [f"model={value}"]


def axis_models() -> list[str]:
    """The models the model axis visits: every shipped model given by its architecture, and the
    article's two KV variants of the assumed model."""
    from pddbench.models.shipped import model_names, shipped_model

    return [n for n in model_names() if "arch" in shipped_model(n) or n.startswith("assumed-")]


PRICE_AXIS = "chips.B.price_per_hour"
LOAD_AXIS = "offered_load_fraction"
LOAD_RANGE = (0.05, 0.95)
MAX_STEPS = 10


def midpoint(lo: float, hi: float, log: bool) -> float:
    return math.sqrt(lo * hi) if log and lo > 0 else (lo + hi) / 2


def sign(x: float | None) -> int | None:
    return None if x is None or math.isnan(x) else (1 if x > 0 else -1 if x < 0 else 0)


def bisect_steps(lo: float, hi: float, steps: int, log: bool):
    """Where an advantage changes sign in [lo, hi], as a generator: it yields the axis values to
    evaluate (both ends first, then one midpoint per step), is sent their advantages, and returns
    value (the final bracket's middle, None without a sign change), bracket, direction and every
    probe (value, advantage). A generator, so that many searches can run side by side."""
    ends = yield [lo, hi]
    probes = [(lo, ends[0]), (hi, ends[1])]
    s_lo, s_hi = sign(ends[0]), sign(ends[1])
    if s_lo is None or s_hi is None:
        return {"value": None, "bracket": None, "direction": "not measurable (a capacity was 0)", "probes": probes}
    if s_lo == s_hi or 0 in (s_lo, s_hi):
        if s_lo == s_hi == 1:
            direction = "PDD wins across the whole range"
        elif s_lo == s_hi == -1:
            direction = "PDD loses across the whole range"
        else:
            direction = "PDD ties at an end of the range"
        return {"value": None, "bracket": None, "direction": direction, "probes": probes}
    a, b = lo, hi
    for _ in range(steps):
        m = midpoint(a, b, log)
        (f,) = yield [m]
        probes.append((m, f))
        if sign(f) is None:
            break
        if sign(f) == s_lo:
            a = m
        else:
            b = m
    return {"value": midpoint(a, b, log), "bracket": [a, b],
            "direction": f"PDD wins {'above' if s_hi > 0 else 'below'} it", "probes": sorted(probes)}


def bisect(advantage: Callable[[list[float]], list[float | None]], lo: float, hi: float, steps: int,
           log: bool) -> dict:
    """bisect_steps with `advantage` evaluating a list of axis values at a time."""
    gen = bisect_steps(lo, hi, steps, log)
    values = next(gen)
    while True:
        try:
            values = gen.send(advantage(values))
        except StopIteration as done:
            return done.value


def entry(claim: str, axis: str, found: dict, rng: tuple[float, float], fixed: str, how: str) -> dict:
    """One `crossovers` item of reproduce.json."""
    return {"claim": claim, "axis": axis, "value": found["value"], "range": list(rng), "direction": found["direction"],
            "fixed": fixed, "bracket": found.get("bracket"), "how": how,
            "probes": [{"value": v, "advantage_pct": a} for v, a in found.get("probes", [])]}


# ---------------------------------------------------------------- analytic: chip B's price


def price_crossover(pdd: dict, same: dict, pdd_chips_b: int, price_now: float, rng: tuple[float, float]) -> dict:
    """The chip B price at which PDD's BCR equals same-DC PD's (and so its cost per token): the
    capacities do not depend on the price, PDD's cost per hour is linear in it."""
    thr_p, thr_s = pdd["throughput_within_sla_rps"], same["throughput_within_sla_rps"]
    if not thr_p or not thr_s:
        return {"value": None, "bracket": None, "direction": "not measurable (a capacity was 0)", "probes": []}
    fixed_part = pdd["cost_per_hour"] - pdd_chips_b * price_now
    bcr = lambda price: (thr_p / (fixed_part + pdd_chips_b * price)) / (thr_s / same["cost_per_hour"]) * 100 - 100
    probes = [(p, bcr(p)) for p in rng]
    # BCR equal: fixed + chips_b * price = thr_p * cost_s / thr_s
    price = (thr_p * same["cost_per_hour"] / thr_s - fixed_part) / pdd_chips_b if pdd_chips_b else None
    if price is None or not rng[0] <= price <= rng[1]:
        found = bisect(lambda xs: [bcr(x) for x in xs], rng[0], rng[1], 0, False)
        return {**found, "probes": probes}
    return {"value": price, "bracket": [price, price], "direction": "PDD wins below it", "probes": probes}


# ---------------------------------------------------------------- words and the command's checks


def axis_label(axis: str) -> str:
    if axis in AXES:
        return AXES[axis].label
    return {PRICE_AXIS: "chip B price ($/h)", LOAD_AXIS: "offered load (fraction of the smaller capacity)",
            MODEL_AXIS: "model"}.get(axis, axis)


def words(items: list[dict]) -> list[str]:
    """One sentence per crossover, generated from the search."""
    out = []
    for it in items:
        if it["axis"] == MODEL_AXIS:
            out.append(model_words(it))
            continue
        what, axis = CLAIMS[it["claim"]], axis_label(it["axis"])
        lo, hi = it["range"]
        if it["value"] is None:
            out.append(f"{what} along {axis} ({lo:g} .. {hi:g}): no sign change; {it['direction']}.")
        else:
            a, b = it["bracket"]
            where = f"{it['value']:.3g}" if a == b else f"{it['value']:.3g} (between {a:.3g} and {b:.3g})"
            out.append(f"{what} changes sign at {axis} = {where}: {it['direction']}.")
    return out


def model_words(it: dict) -> str:
    """One sentence for one model of the model axis."""
    thr, ttft, rate = it.get("throughput_change_pct"), it.get("ttft_change_pct"), it.get("rate")
    held = lambda v, good: "not measurable" if v is None else f"{v:+.1f} % ({'holds' if good(v) else 'does not hold'})"
    text = (f"model {it['model']}: at the shipped line and SLA PDD's throughput within SLA {held(thr, lambda v: v > 0)}, "
            f"its mean TTFT at half the smaller capacity {held(ttft, lambda v: v < 0)}")
    for what, found in (("throughput gain", rate), ("TTFT gain", it.get("ttft_rate"))):
        if found:
            text += (f"; the {what} changes sign at a WAN line of {found['value']:.3g} Gbit/s ({found['direction']})"
                     if found["value"] is not None else f"; the {what} along the WAN line rate ({found['range'][0]:g} "
                     f".. {found['range'][1]:g} Gbit/s): no sign change, {found['direction']}")
    return text + "."


def frontier_values(name: str, points: int) -> list[float]:
    """`points` values spread over an axis's range (geometric on a log axis), ends included."""
    a = AXES[name]
    if points == 1:
        return [a.shipped]
    if a.log:
        return [a.lo * (a.hi / a.lo) ** (i / (points - 1)) for i in range(points)]
    return [a.lo + (a.hi - a.lo) * i / (points - 1) for i in range(points)]


def parse_frontier(text: str) -> tuple[str, str]:
    """`--frontier X,Y`: two different simulated axes."""
    names = [t.strip() for t in text.split(",")]
    if len(names) != 2 or names[0] == names[1] or any(n not in AXES for n in names):
        from pddbench.core.errors import UserError

        raise UserError(f"--frontier '{text}': give two different simulated axes X,Y from {', '.join(AXES)}")
    return names[0], names[1]


def frontier_words(front: dict) -> str:
    """The frontier in one sentence per row, generated."""
    x, y = axis_label(front["x"]), axis_label(front["y"])
    parts = [f"at {y} = {r['y']:.3g}: " + (f"{x} = {r['value']:.3g} ({r['direction']})" if r["value"] is not None
                                            else r["direction"].replace("across the whole range", "throughout"))
             for r in front["rows"]]
    return f"Frontier of the throughput gain along {x}: " + "; ".join(parts) + "."


def parse_axes(text: str) -> list[str]:
    """The comma-separated axis names of `--axes` ('all': every one), each checked."""
    known = [*AXES, PRICE_AXIS, LOAD_AXIS, MODEL_AXIS]
    if text.strip() == "all":
        return known
    names = [t.strip() for t in text.split(",") if t.strip()]
    bad = [n for n in names if n not in known]
    if bad or not names:
        from pddbench.core.errors import UserError

        if not names:
            raise UserError(f"--axes '{text}': names no axis; give one or more, comma-separated, from "
                            f"{', '.join(known)} (or 'all')")
        raise UserError(f"--axes '{text}': {', '.join(bad)} {'is not an axis' if len(bad) == 1 else 'are not axes'}; "
                        f"choose from {', '.join(known)} (or 'all')")
    return list(dict.fromkeys(names))


def estimated_ttft_simulations(axes: list[str], steps: int) -> int:
    """The simulations of both best splits at one load that the TTFT claims add (no capacity
    search): the load axis's bisection, and per model its TTFT at the shipped line and at each
    probe of its line-rate TTFT bisection (crossover_search._ttft_changes)."""
    n = 2 * (2 + steps) if LOAD_AXIS in axes else 0
    if MODEL_AXIS in axes:
        n += len(axis_models()) * 2 * (1 + 2 + steps)
    return n


CHECKS_PER_SEARCH = 1  # a climb's neighbour checks that fail (one simulation each) per capacity search, typical
# (make run: 151 checks for 125 searches; a check that holds is the first probe of its search)


def estimated_searches(axes: list[str], steps: int, frontier: tuple[str, str] | None = None, points: int = 0) -> int:
    """Capacity searches a crossover run typically needs (crossover_search.Climber): at every
    probe value one search of each changed deployment's best split (its neighbours are checked
    with one simulation each, CHECKS_PER_SEARCH) plus a few where the best split moves (two per
    axis); the shipped values' two. A scenario already searched (e.g. `model=` the shipped model)
    is not searched again, which this leaves out: an upper estimate."""
    n = 2
    for a in axes:
        if a in AXES:
            n += (2 + 2 * steps) * (1 if AXES[a].pdd_only else 2) + 2
        elif a == MODEL_AXIS:  # per model: both best splits, then the two line-rate bisections (PDD only)
            n += len(axis_models()) * (2 + 2 * (2 + steps) + 2)
    if frontier:
        n += points * ((2 + steps) * (1 if all(AXES[a].pdd_only for a in frontier) else 2) + 2)
    return n
