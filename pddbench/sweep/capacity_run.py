"""`pddbench capacity`: the search (pddbench.measure.capacity) with its probes on an executor when asked
(-j N, --ray): k rates per round, each probe a task like a sweep point's."""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path
from typing import Callable

from pddbench.measure.capacity import MIN_REQUESTS, ProbeMany, search_capacity
from pddbench.core.errors import UserError
from pddbench.core.limits import (DEFAULT_REQUESTS, MAX_CAPACITY_ITERATIONS, MAX_PROBES_PER_ROUND, SIM_S_PER_REQUEST,
                             capacity_probes, duration, nominal_requests)
from pddbench.schema.scenario import Scenario
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
    """k-section with k = probes_per_round (default: the executor's workers, at most
    MAX_PROBES_PER_ROUND: more rates per round only add probes)."""
    return search_capacity(sc, iterations, on_step, executor_prober(sc, executor),
                           probes_per_round or min(executor.workers, MAX_PROBES_PER_ROUND), min_requests)


def run_capacity(scenario: Path | str, overrides: list[str], iterations: int, out: Path | None, results: Path,
                 on_step: Callable[[dict], None] | None = None, jobs: int = 1, ray: str | None = None,
                 probes_per_round: int | None = None, min_requests: int = MIN_REQUESTS) -> tuple[dict, Path]:
    """Search the scenario's capacity and write capacity.json and capacity.png into `out`, or a new
    RESULTS/<name>-capacity/<run-id>/; returns the result and the folder. -j 1 without Ray is the
    bisection in this process, as before."""
    from pddbench.measure.capacity import check_capacity_workload
    from pddbench.core.io import check_out_options, run_folder, write_json
    from pddbench.report.capacity_figure import capacity_figure
    from pddbench.schema.scenario import load_scenario

    check_out_options(out, results)
    sc = load_scenario(scenario, overrides)
    check_search_size(sc, iterations, probes_per_round)
    check_capacity_workload(sc, str(scenario))
    inline = jobs == 1 and ray is None and (probes_per_round or 1) == 1
    # the executor first: a Ray head that does not answer is refused before any folder is claimed
    with contextlib.nullcontext() if inline else make_executor(jobs or None, ray) as ex:
        with run_folder(out, results, f"{sc.name}-capacity") as folder:  # Ctrl-C or an error: nothing kept
            if getattr(ex, "log_path", None) is not None:  # Ray's output while connecting, kept with the run
                shutil.move(str(ex.log_path), str(folder.path / "ray.log"))
                ex.log_path = folder.path / "ray.log"
            if inline:
                result = search_capacity(sc, iterations, on_step=on_step, min_requests=min_requests)
            else:
                result = parallel_search(sc, ex, iterations, probes_per_round, on_step, min_requests)
            write_json(folder.path / "capacity.json", result)
            capacity_figure(result, folder.path / "capacity.png")
    return result, folder.path


def check_search_size(sc: Scenario, iterations: int, probes_per_round: int | None) -> None:
    """--iterations and --probes-per-round against their stated limits, before any request is
    generated; the refusal states the search's simulated work."""
    k = probes_per_round or 1
    n = nominal_requests(sc.workload.model_dump(mode="json")) or DEFAULT_REQUESTS
    probes = capacity_probes(iterations, k)
    work = (f"that search is ~{probes:,} probes on ~{n:,} requests = ~{probes * n:,} simulated requests, "
            f"{duration(probes * n * SIM_S_PER_REQUEST)} of simulation")
    if iterations > MAX_CAPACITY_ITERATIONS:
        raise UserError(f"--iterations {iterations:,} is more than the limit of {MAX_CAPACITY_ITERATIONS} ({work}); "
                        f"the limit is fixed: {MAX_CAPACITY_ITERATIONS} steps already narrow the bracket to "
                        f"2**-{MAX_CAPACITY_ITERATIONS} of its width")
    if k > MAX_PROBES_PER_ROUND:
        raise UserError(f"--probes-per-round {k:,} is more than the limit of {MAX_PROBES_PER_ROUND} ({work}); give "
                        f"--probes-per-round {MAX_PROBES_PER_ROUND} or fewer")
