"""A budget's best split with every candidate measured, most of them by one simulation.

Capacity is the highest steady rate at which the SLA holds. Where the best split's search first
failed (the top of its answer's bracket, rate r), a split that also fails at r has a capacity below
r, so it cannot beat the best by more than the search's resolution: one simulation at r settles
it. The search: full capacity searches of the two candidates the analytic bound ranks highest
(split_bounds.py), then every other candidate checked at the best's r; of those that hold there,
the bound's top two are searched in full (from r, their check the search's first probe, never
simulated again) and may become the best, and the rest are checked again at the new r. It ends
when no candidate holds where the best first failed.

Nothing is pruned by assumption (no bound, no unimodality): every candidate is simulated at the
rate that decides it. On a verdict monotone in the rate the best is the exhaustive search's; a tie
within the resolution keeps the split searched first. About one simulation per candidate instead
of a search's ~10: the paper's 8-chip splits of one budget in ~3 searches and ~12 checks instead
of ~12 searches."""

from __future__ import annotations

from typing import Callable

from pddbench.schema.scenario import Scenario
from pddbench.sweep.executors import Executor, results_in_order
from pddbench.sweep.optimize import (MAX_CANDIDATES, _brief, _result, candidate_splits, chips_used, label,
                                     measure, with_split)
from pddbench.sweep.payload import make_payload, ship_scenario

FIRST = 2  # splits searched in full before any check (the bound's top two: both workers of -j 2 busy)


def top_rate(cap: dict) -> float | None:
    """The rate scale where a capacity search first failed above its answer (its bracket's top);
    None where nothing held or nothing failed (then a check cannot decide)."""
    if not cap.get("rate_scale") or cap.get("resolution_rate_scale") is None:
        return None
    return round(cap["rate_scale"] + cap["resolution_rate_scale"], 6)


def holds(scenarios: list[Scenario], executor: Executor) -> list[dict]:
    """One steady-state simulation of each scenario (at its own rate scale): {holds, offered_rps,
    summary} (the summary: for a capacity search of the scenario that then needs that probe)."""
    cache: dict = {}
    payloads = []
    for sc in scenarios:
        data, blobs = ship_scenario(sc, cache)
        payloads.append(make_payload({"kind": "simulate", "scenario": data}, blobs))
    out = results_in_order(executor, payloads, "summary", lambda _i: "a candidate's check")
    return [{"holds": s["steady"]["holds"], "offered_rps": s["offered_rps"], "summary": s} for s in out]


def optimize_checked(sc: Scenario, budget: dict[str, int], sizes: list[int], executor: Executor,
                     iterations: int = 7, requests: int | None = None,
                     on_stage: Callable[[str], None] | None = None, max_splits: int = MAX_CANDIDATES) -> dict:
    """optimize.json's content (pddbench/sweep/optimize.py's format): searched rows carry `full`,
    checked rows `check` (the rate scale, its offered rate, and that it failed there)."""
    from pddbench.sweep import split_bounds as sb

    say = on_stage or (lambda _m: None)
    splits = candidate_splits(sc, budget, sorted(set(sizes)), max_splits)
    prof = sb.profile(sc)
    rank = sorted(range(len(splits)), key=lambda i: (-sb.bound(sc, splits[i], prof)["bound_rps"], i))
    rows = [{"label": label(s), "split": s, "chips": chips_used(sc, s), "coarse": None, "full": None, "check": None,
             "status": None} for s in splits]
    caps: dict[int, dict] = {}
    below: dict[int, float] = {}  # candidate -> the rate scale at which it failed a check
    probes = checks = 0

    def search(batch: list[int], near: float | None, checked: dict[int, dict] | None = None) -> None:
        """Full searches; `checked`: a candidate's check summary at `near`, its search's first probe."""
        nonlocal probes
        if not batch:
            return
        say(f"{len(batch)} capacity searches")
        known = [{near: checked[i]} if checked and i in checked else None for i in batch]
        for i, cap in zip(batch, measure([with_split(sc, splits[i]) for i in batch], executor, iterations,
                                         [near] * len(batch), known=known)):
            caps[i] = cap
            rows[i]["full"], rows[i]["status"] = _brief(cap), "searched"
            probes += len(cap.get("probes", ())) - cap.get("reused_probes", 0)  # a reused check is no new simulation

    def best() -> int:
        return max(caps, key=lambda i: (caps[i]["throughput_within_sla_rps"], -rank.index(i)))

    search(rank[:FIRST], None)
    while True:
        b = best()
        top = top_rate(caps[b])
        todo = [i for i in rank if i not in caps and not (top is not None and below.get(i, float("inf")) <= top)]
        if top is None:  # nothing held (or nothing failed): only full searches can rank them
            search(todo, None)
            if best() == b:
                break
            continue
        if not todo:
            break
        say(f"{len(todo)} checks at the best's first failing rate (best so far {rows[b]['label']}, "
            f"{caps[b]['throughput_within_sla_rps']:.3g} req/s)")
        trial = []
        for i in todo:
            t = with_split(sc, splits[i])
            t.workload.rate_scale = top
            trial.append(t)
        verdicts = holds(trial, executor)
        checks += len(todo)
        for i, v in zip(todo, verdicts):
            rows[i]["check"] = {"rate_scale": top, "offered_rps": v["offered_rps"], "holds": v["holds"]}
            if not v["holds"]:
                below[i] = top
                rows[i]["status"] = (f"not better: failed at {v['offered_rps']:.4g} req/s, where the best's search "
                                     "first failed")
        # of those that held (each at least as good as the best), the bound's top FIRST are searched
        # from the rate they held at (their check its first probe); the others are checked again at
        # the new best's rate, where most then fail
        held = {i: v["summary"] for i, v in zip(todo, verdicts) if v["holds"]}
        search(list(held)[:FIRST], top, held)
    b = best()
    searched = sorted(caps)
    result = _result(sc, budget, sizes, iterations, rows, b, {
        "splits": "maximal; the bound's top two searched in full, every other checked at the rate where the best's "
                  "search first failed and searched in full only where it held there (pddbench/sweep/checked_search.py)",
        "candidates": len(rows), "requests": requests, "coarse_requests": None, "refined": len(searched),
        "refine_top": None, "checked": checks, "searched": len(searched), "simulations": probes + checks})
    return result
