"""`pddbench capacity`: the search (pddbench.capacity) with its probes on an executor when asked
(-j N, --ray): k rates per round, each probe a task like a sweep point's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from pddbench.capacity import MIN_REQUESTS, ProbeMany, search_capacity
from pddbench.scenario import Scenario
from pddbench.sweep.executors import Executor, make_executor, results_in_order
from pddbench.sweep.payload import make_payload, ship_scenario


def executor_prober(sc: Scenario, executor: Executor) -> ProbeMany:
    """Probe rates as `simulate` tasks: the scenario travels as JSON (rate scale set per probe)."""
    data, blobs = ship_scenario(sc)

    def probe_many(scales: list[float]) -> list[dict]:
        payloads = []
        for scale in scales:
            trial = json.loads(json.dumps(data))
            trial["workload"]["rate_scale"] = scale
            payloads.append(make_payload({"kind": "simulate", "scenario": trial}, blobs))
        return results_in_order(executor, payloads, "summary", lambda i: f"capacity probe at rate_scale {scales[i]:g}")
    return probe_many


def parallel_search(sc: Scenario, executor: Executor, iterations: int = 7, probes_per_round: int | None = None,
                    on_step: Callable[[dict], None] | None = None, min_requests: int = MIN_REQUESTS) -> dict:
    """k-section with k = probes_per_round (default: the executor's workers)."""
    return search_capacity(sc, iterations, on_step, executor_prober(sc, executor),
                           probes_per_round or executor.workers, min_requests)


def run_capacity(scenario: Path | str, overrides: list[str], iterations: int, out: Path | None, results: Path,
                 on_step: Callable[[dict], None] | None = None, jobs: int = 1, ray: str | None = None,
                 probes_per_round: int | None = None, min_requests: int = MIN_REQUESTS) -> tuple[dict, Path]:
    """Search the scenario's capacity and write capacity.json and capacity.png into `out`, or a new
    RESULTS/<name>-capacity/<run-id>/; returns the result and the folder. -j 1 without Ray is the
    bisection in this process, as before."""
    from pddbench.capacity import check_capacity_workload
    from pddbench.io import check_out_options, run_folder, write_json
    from pddbench.report.capacity_figure import capacity_figure
    from pddbench.scenario import load_scenario

    check_out_options(out, results)
    sc = load_scenario(scenario, overrides)
    check_capacity_workload(sc, str(scenario))
    with run_folder(out, results, f"{sc.name}-capacity") as folder:  # Ctrl-C or an error: nothing kept
        if jobs == 1 and ray is None and (probes_per_round or 1) == 1:
            result = search_capacity(sc, iterations, on_step=on_step, min_requests=min_requests)
        else:
            with make_executor(jobs or None, ray) as ex:
                result = parallel_search(sc, ex, iterations, probes_per_round, on_step, min_requests)
        write_json(folder.path / "capacity.json", result)
        capacity_figure(result, folder.path / "capacity.png")
    return result, folder.path
