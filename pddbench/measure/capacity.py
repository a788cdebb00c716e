"""Throughput within SLA: the highest offered rate at which the scenario's SLA still holds.

The trace's arrival rate is scaled (workload.rate_scale) and the scenario re-simulated on the
identical request stream: first doubling/halving to bracket the boundary, then k-section. With
k = 1 (the default) that is bisection, exactly as before; with k > 1 each round probes k rates at
once (`capacity -j N`: pddbench/sweep/capacity_run.py): a doubling ladder of k rates while bracketing, then k
evenly spaced rates that cut the bracket into k + 1 parts. The number of rounds is chosen so the
final bracket is no wider than bisection's, so the answer agrees within that resolution.

A warm start (`near`: a rate scale expected near the answer, e.g. a neighbouring probe's capacity
in a crossover search) probes near first, then steps away from it (up where it held, down where it
failed) by about near x WARM_STEP, doubling the step until the verdict flips, then bisects only
until the bracket is as narrow as the cold search's would be for that answer (2**e x
2**-iterations for an answer in [2**e, 2**(e+1)) times the scenario's rate). The step is that
final width times a power of two, so the bisection halves it down to that width: the same
resolution in about 5-6 probes instead of about 10 where near is within a few per cent. `stop_if_near_fails`
makes the first probe a check: a search that only matters if the scenario holds at near (a
neighbouring split that must beat the best's rate) ends after that one simulation when it fails
there (result["stopped_at_near"]), so the check is never simulated twice.

A probe passes on the steady-state verdict (summary["steady"]["holds"], pddbench/metrics/steady.py):
the SLA judged after warm-up and no rising latency trend; a probe that is not steady fails. The
result names what bound the capacity (`bound_by`: ttft, tpot or instability, read at the lowest
failing probe above the answer), the steady-state window of the answer's probe, and warns when the
trace is shorter than `min_requests` (short traces overstate capacity in overloaded regimes).
"""

from __future__ import annotations

import math
from typing import Callable

from pddbench.core.limits import section_rounds
from pddbench.measure.runner import simulate_summary
from pddbench.schema.scenario import Scenario
from pddbench.workload.source import workload_requests

ProbeMany = Callable[[list[float]], list[dict]]  # absolute rate scales -> their summaries, in order
LADDER_LIMIT = 8  # bracketing stops at 2**8 and 2**-8 times the scenario's rate
# The analysis behind issue 14: baseline 6:5 measured 21.6 req/s on 4,000 requests, 18.9 on 12,000
# (a 64K/1K workload 12.4 on 600 vs 4.9 on 5,000): shorter traces are flagged.
MIN_REQUESTS = 12_000


def failed_criteria(steady: dict) -> list[str]:
    """What a probe failed on: the SLA bounds missed after warm-up, and instability."""
    return list(steady["sla_failing"]) + (["instability"] if steady["unstable_on"] else [])


def probe_row(scale: float, s: dict) -> dict:
    st = s["steady"]
    return {"rate_scale": round(scale, 6), "offered_rps": s["offered_rps"],
            "sla_holds": st["holds"],  # the verdict the search used: steady-state SLA and stable
            "whole_run_sla_holds": s["sla_holds"], "failed_on": failed_criteria(st),
            "unstable_on": st["unstable_on"], "slo_attainment": s["slo_attainment"],
            "ttft_p90_ms": s["ttft_ms"]["p90"], "tpot_p90_ms": s["tpot_ms"]["p90"],
            "steady_ttft_ok_fraction": st["ttft_ok_fraction"], "steady_tpot_ok_fraction": st["tpot_ok_fraction"],
            "goodput_rps": s["goodput_rps"], "cost_per_hour": s["cost_per_hour"]}


def binding_criterion(probes: list[dict], best: dict | None, summaries: dict[float, dict]) -> tuple[str | None, list[str]]:
    """The criterion that stopped the search: at the lowest failing probe above the answer, the
    SLA bound with the lowest steady attainment, else instability; and every criterion it failed."""
    floor = best["offered_rps"] if best else -1.0
    above = [p for p in probes if not p["sla_holds"] and (p["offered_rps"] or 0) > floor]
    if not above:
        return None, []
    stop = min(above, key=lambda p: p["offered_rps"] or 0)
    st = summaries[stop["rate_scale"]]["steady"]
    if st["sla_failing"]:
        return min(st["sla_failing"], key=lambda c: st[f"{c}_ok_fraction"]), failed_criteria(st)
    return "instability", failed_criteria(st)


def _local_prober(sc: Scenario) -> ProbeMany:
    reqs = workload_requests(sc)

    def probe_many(scales: list[float]) -> list[dict]:
        out = []
        for scale in scales:
            trial = sc.model_copy(deep=True)
            trial.workload.rate_scale = scale
            _, s = simulate_summary(trial, reqs=reqs)
            if s["interrupted"]:  # Ctrl-C inside the simulator: a partial run is no probe
                raise KeyboardInterrupt
            out.append(s)
        return out
    return probe_many


def capacity_search(sc: Scenario, iterations: int = 7, on_step: Callable[[dict], None] | None = None,
                    probe_many: ProbeMany | None = None, k: int = 1,
                    min_requests: int = MIN_REQUESTS, near: float | None = None,
                    stop_if_near_fails: bool = False,
                    known: dict[float, dict] | None = None) -> tuple[dict, dict[float, dict]]:
    """The search; returns (result, every probe's summary by rate scale). `near`: a warm start
    (an absolute rate scale expected near the answer; bisection only, k = 1). `known`: summaries
    already simulated at absolute rate scales (e.g. a split search's check of this scenario): a
    probe there reuses it instead of simulating it again."""
    probe_many = probe_many or _local_prober(sc)
    base = sc.workload.rate_scale
    probes: list[dict] = []
    summaries: dict[float, dict] = {}
    reused = 0  # probes that took a known summary instead of a simulation

    def known_at(rate: float) -> dict | None:
        # the same rate up to float rounding (a rate scale handed over vs base x (rate / base))
        return next((v for r, v in (known or {}).items() if math.isclose(r, rate, rel_tol=1e-9)), None)

    def run(scales: list[float]) -> list[bool]:
        nonlocal reused
        have = [known_at(base * s) for s in scales]
        got = iter(probe_many([base * s for s, h in zip(scales, have) if h is None]) if None in have else [])
        res = [h if h is not None else next(got) for h in have]
        reused += sum(h is not None for h in have)
        for scale, s in zip(scales, res):
            row = probe_row(base * scale, s)
            probes.append(row)
            summaries[row["rate_scale"]] = s
            if on_step:
                on_step(row)
        return [s["steady"]["holds"] for s in res]

    def split(scales: list[float], holds: list[bool], lo: float | None, hi: float | None):
        """Narrow (lo, hi) by probes in ascending order: hi = the lowest that broke the SLA, lo = the
        highest below it that held (bisection's rule, k at a time)."""
        for s, ok in zip(scales, holds):
            if not ok:
                hi = s
                break
            lo = s
        return lo, hi

    def done(lo: float | None, hi: float | None, **extra) -> tuple[dict, dict[float, dict]]:
        # the reuse count only where summaries were handed in (capacity.json unchanged otherwise)
        counted = {"reused_probes": reused} if known else {}
        return {**_result(sc, probes, summaries, lo, hi, base, k, min_requests), **extra, **counted}, summaries

    if near is not None and near > 0 and k == 1:
        lo, hi = _warm_bracket(near / base, iterations, run, stop_if_near_fails)
        if stop_if_near_fails and lo is None:
            return done(lo, hi, warm_start_rate_scale=near, stopped_at_near=True)
        if lo is not None and hi is not None:
            while hi - lo > _final_width(lo, iterations) + 1e-12:
                mid = (lo + hi) / 2
                lo, hi = split([mid], run([mid]), lo, hi)
        return done(lo, hi, warm_start_rate_scale=near)
    lo: float | None = None
    hi: float | None = None
    first = [2.0 ** e for e in range(0, min(k, LADDER_LIMIT + 1))]  # 1, 2, 4, ... (k of them)
    lo, hi = split(first, run(first), lo, hi)
    if lo is None:  # the scenario's own rate breaks the SLA: halve down to a rate that holds
        e = 0
        while lo is None and e > -LADDER_LIMIT:
            ladder = [2.0 ** x for x in range(e - 1, max(e - 1 - k, -LADDER_LIMIT - 1), -1)]  # descending
            holds = run(ladder)
            for s, ok in zip(ladder, holds):
                if ok:
                    lo = s
                    break
                hi = s
            e -= len(ladder)
    else:
        e = round(math.log2(first[-1]))
        while hi is None and e < LADDER_LIMIT:
            ladder = [2.0 ** x for x in range(e + 1, min(e + 1 + k, LADDER_LIMIT + 1))]
            lo, hi = split(ladder, run(ladder), lo, hi)
            e += len(ladder)
    if lo is not None and hi is not None:
        for _ in range(section_rounds(iterations, k)):
            mids = [(lo * (k + 1 - j) + hi * j) / (k + 1) for j in range(1, k + 1)]
            lo, hi = split(mids, run(mids), lo, hi)
    return done(lo, hi)


WARM_STEP = 1 / 16  # a warm start's first step away from near, as a share of near (rounded, below)


def _final_width(lo: float, iterations: int) -> float:
    """The cold search's final bracket width for an answer in [2**e, 2**(e+1)): 2**e x 2**-iterations."""
    return 2.0 ** (math.floor(math.log2(lo)) - iterations)


def _warm_bracket(near: float, iterations: int, run: Callable[[list[float]], list[bool]],
                  stop_if_near_fails: bool = False) -> tuple[float | None, float | None]:
    """(lo, hi) from `near` (relative rate scale): lo held, hi the lowest probe above it that
    failed. Near first, then steps away from it (up from a hold, down from a failure), doubling
    while the verdict stays, within the cold ladder's limits (2**-LADDER_LIMIT .. 2**LADDER_LIMIT).
    The first step is the final width times the power of two nearest near x WARM_STEP, so the
    bisection halves it down to that width without a partial last step. A None end: no rate in
    the limits did."""
    top, bottom = 2.0 ** LADDER_LIMIT, 2.0 ** -LADDER_LIMIT
    near = min(max(near, bottom), top)
    width = _final_width(near, iterations)
    step = width * 2.0 ** max(0, round(math.log2(near * WARM_STEP / width)))
    if run([near])[0]:
        lo, hi = near, None
        while hi is None and lo < top:  # held: climb
            x = min(lo + step, top)
            if run([x])[0]:
                lo, step = x, step * 2
            else:
                hi = x
        return lo, hi
    lo, hi = None, near
    if stop_if_near_fails:
        return lo, hi
    while lo is None and hi > bottom:  # failed: descend
        x = max(hi - step, hi / 2, bottom)  # never below half of the last failure: the ladder's pace at most
        if run([x])[0]:
            lo = x
        else:
            hi, step = x, step * 2
    return lo, hi


def _result(sc: Scenario, probes: list[dict], summaries: dict[float, dict], lo: float | None, hi: float | None,
            base: float, k: int, min_requests: int) -> dict:
    """capacity.json: the highest steady rate that held, what bound it, and how exact it is."""
    # the answer is below every rate that failed: on a short or noisy trace the verdict need not be
    # monotone in the rate, and a rate that held above one that failed is no capacity
    lowest_fail = min((p["offered_rps"] or 0 for p in probes if not p["sla_holds"]), default=math.inf)
    best = max((p for p in probes if p["sla_holds"] and (p["offered_rps"] or 0) < lowest_fail),
               key=lambda p: p["offered_rps"] or 0, default=None)
    thr = best["offered_rps"] if best else 0.0
    cost = probes[0]["cost_per_hour"]
    bound_by, failed_on = binding_criterion(probes, best, summaries)
    first = summaries[probes[0]["rate_scale"]]
    n = first["requests_total"]
    warnings = [f"the trace has {n} requests, fewer than min_requests {min_requests}: a short trace can end before "
                "an overloaded queue breaks the SLA, so this capacity may be overstated"] if n < min_requests else []
    window = summaries[best["rate_scale"]]["steady"]["window"] if best else None
    result = {
        "scenario": sc.name,
        "throughput_within_sla_rps": thr,
        "rate_scale": best["rate_scale"] if best else None,
        "cost_per_hour": cost,
        "bcr": round(thr / cost, 9) if cost else None,
        "sla": sc.sla.model_dump(),
        "bracketed": lo is not None and hi is not None,
        "probes_per_round": k,
        "bound_by": bound_by,
        "bound_by_all": failed_on,
        "criterion": "steady",
        "warmup_fraction": first["steady"]["warmup_fraction"],
        "steady_window": window,
        "requests": n,
        "min_requests": min_requests,
        "warnings": warnings,
        # the final bracket's width in rate scale: how exact the answer is
        "resolution_rate_scale": round((hi - lo) * base, 6) if lo is not None and hi is not None else None,
        "probes": sorted(probes, key=lambda p: p["rate_scale"]),
    }
    return result


def search_capacity(sc: Scenario, iterations: int = 7, on_step: Callable[[dict], None] | None = None,
                    probe_many: ProbeMany | None = None, probes_per_round: int = 1,
                    min_requests: int = MIN_REQUESTS, near: float | None = None,
                    stop_if_near_fails: bool = False, known: dict[float, dict] | None = None) -> dict:
    """Bisection in this process by default; `probe_many` probes k = probes_per_round rates at a
    time elsewhere (pddbench.sweep.capacity_run puts them on an executor); `near`: a warm start."""
    return capacity_search(sc, iterations, on_step, probe_many, probes_per_round, min_requests, near,
                           stop_if_near_fails, known)[0]


def check_capacity_workload(sc: Scenario, where: str) -> None:
    """Capacity scales the arrivals: refuse a workload whose arrivals span no time, or would span
    more than can be simulated at the slowest rate probed (2**-8 of the scenario's)."""
    from pddbench.core.errors import UserError
    from pddbench.measure.runner import simulable_requests

    reqs = simulable_requests(sc, where, slowest_scale=2.0 ** -8)
    if reqs[-1].timestamp_ms == reqs[0].timestamp_ms:
        raise UserError(f"{where}: all {len(reqs)} requests arrive at the same moment (the workload spans zero "
                        "time), so scaling the arrival rate changes nothing; capacity needs arrivals spread in time")


def rate_scale_for(load_rps: float, offered_rps: float, rate_scale: float = 1.0) -> float:
    """The rate scale at which a trace offered `offered_rps` at `rate_scale` is offered `load_rps`
    (the rate scale only divides arrival times, so offered rate / rate scale is the trace's own)."""
    return load_rps * rate_scale / offered_rps
