"""Throughput within SLA: the highest offered rate at which the scenario's SLA still holds.

The trace's arrival rate is scaled (workload.rate_scale) and the scenario re-simulated on the
identical request stream: first doubling/halving to bracket the boundary, then bisection.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from pddbench.runner import simulate_summary
from pddbench.scenario import Scenario
from pddbench.workload.source import workload_requests


def search_capacity(sc: Scenario, iterations: int = 7, on_step: Callable[[dict], None] | None = None) -> dict:
    reqs = workload_requests(sc)
    base_scale = sc.workload.rate_scale
    probes: list[dict] = []

    def probe(scale: float) -> bool:
        trial = sc.model_copy(deep=True)
        trial.workload.rate_scale = base_scale * scale
        _, s = simulate_summary(trial, reqs=reqs)
        row = {"rate_scale": round(base_scale * scale, 6), "offered_rps": s["offered_rps"],
               "sla_holds": s["sla_holds"], "slo_attainment": s["slo_attainment"],
               "ttft_p90_ms": s["ttft_ms"]["p90"], "tpot_p90_ms": s["tpot_ms"]["p90"],
               "goodput_rps": s["goodput_rps"], "cost_per_hour": s["cost_per_hour"]}
        probes.append(row)
        if on_step:
            on_step(row)
        return s["sla_holds"]

    lo, hi = None, None
    scale = 1.0
    if probe(scale):
        lo = scale
        while hi is None and scale < 256:
            scale *= 2
            if probe(scale):
                lo = scale
            else:
                hi = scale
    else:
        hi = scale
        while lo is None and scale > 1 / 256:
            scale /= 2
            if probe(scale):
                lo = scale
            else:
                hi = scale
    if lo is not None and hi is not None:
        for _ in range(iterations):
            mid = (lo + hi) / 2
            if probe(mid):
                lo = mid
            else:
                hi = mid
    best = max((p for p in probes if p["sla_holds"]), key=lambda p: p["offered_rps"] or 0, default=None)
    thr = best["offered_rps"] if best else 0.0
    cost = probes[0]["cost_per_hour"]
    return {
        "scenario": sc.name,
        "throughput_within_sla_rps": thr,
        "rate_scale": best["rate_scale"] if best else None,
        "cost_per_hour": cost,
        "bcr": round(thr / cost, 9) if cost else None,
        "sla": sc.sla.model_dump(),
        "bracketed": lo is not None and hi is not None,
        "probes": sorted(probes, key=lambda p: p["rate_scale"]),
    }


def run_capacity(scenario: Path | str, overrides: list[str], iterations: int, out: Path | None, results: Path,
                 on_step: Callable[[dict], None] | None = None) -> tuple[dict, Path]:
    """`pddbench capacity`: search the scenario's capacity and write capacity.json and capacity.png
    into `out`, or a new RESULTS/<name>-capacity/<run-id>/; returns the result and the folder."""
    from pddbench.io import new_run_dir, write_json
    from pddbench.report.capacity_figure import capacity_figure
    from pddbench.scenario import load_scenario

    sc = load_scenario(scenario, overrides)
    result = search_capacity(sc, iterations, on_step=on_step)
    folder = out or new_run_dir(results, f"{sc.name}-capacity")
    write_json(folder / "capacity.json", result)
    capacity_figure(result, folder / "capacity.png")
    return result, folder
