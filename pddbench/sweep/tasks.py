"""What a worker runs: one JSON task in, one JSON result out. The same function runs in this
process (-j 1), in a local process pool and on Ray, so every backend gives the same results.

Kinds: `simulate` (one summary: a capacity probe), `point` (a sweep point: its summary, and with
measure capacity the search and the summary at the capacity found), `capacity` (a whole search)
and `run_folder` (a `pddbench run` folder's files, for `reproduce`). A failing task returns
status "failed" and its error instead of raising, so one bad point does not stop a sweep."""

from __future__ import annotations

import base64
import json
import tempfile
import time
from collections import OrderedDict
from pathlib import Path

from pddbench.core.errors import is_interrupt
from pddbench.sweep.payload import receive_scenario

_requests_cache: OrderedDict[str, list] = OrderedDict()  # the most recently used last
CACHED_REQUESTS = 100_000  # a worker keeps up to this many generated requests (~15 MB per 12,000)


def _requests(sc):
    """The workload's requests, generated once per worker and kept for its later tasks (the rate
    scale only divides timestamps, so it is not part of the key; data files are keyed by
    content). Several workloads are kept, least recently used dropped first: a crossover search
    interleaves the tasks of several axis values, each with its own workload."""
    from pddbench.workload.source import workload_requests

    key = sc.workload.model_copy(update={"rate_scale": 1.0}).model_dump_json()
    if key in _requests_cache:
        _requests_cache.move_to_end(key)
        return _requests_cache[key]
    reqs = workload_requests(sc)
    _requests_cache[key] = reqs
    while len(_requests_cache) > 1 and sum(map(len, _requests_cache.values())) > CACHED_REQUESTS:
        _requests_cache.popitem(last=False)
    return reqs


def _summary(sc) -> dict:
    from pddbench.measure.runner import simulate_summary

    _, s = simulate_summary(sc, reqs=_requests(sc))
    if s["interrupted"]:  # Ctrl-C inside an in-process simulation: a partial run is no result
        raise KeyboardInterrupt
    return s


def _simulate(task: dict, files: dict) -> dict:
    return {"summary": _summary(receive_scenario(task["scenario"], files))}


def _capacity(task: dict, files: dict) -> dict:
    from pddbench.measure.capacity import capacity_search

    sc = receive_scenario(task["scenario"], files)
    reqs = _requests(sc)

    def probe_many(scales):
        out = []
        for scale in scales:
            trial = sc.model_copy(deep=True)
            trial.workload.rate_scale = scale
            out.append(_summary(trial))
        return out
    assert reqs is not None
    result, summaries = capacity_search(sc, task.get("iterations", 7), probe_many=probe_many, near=task.get("near"),
                                       stop_if_near_fails=bool(task.get("stop_if_near_fails")),
                                       known={float(k): v for k, v in task.get("known", [])})
    return {"capacity": result, "summary": summaries.get(result["rate_scale"]) if result["rate_scale"] else None}


def _point(task: dict, files: dict) -> dict:
    if task["measure"] == "capacity":
        return _capacity(task, files)
    return _simulate(task, files)


def _run_folder(task: dict, files: dict) -> dict:
    """A `pddbench run` folder made in a private temp folder (the same writer as `run`); its files
    come back as bytes for the caller to write where it wants."""
    from pddbench.core.io import write_text
    from pddbench.measure.runner import write_sim_run, simulate_summary

    sc = receive_scenario(task["scenario"], files)
    records, summary = simulate_summary(sc, reqs=_requests(sc))
    if summary["interrupted"]:
        raise KeyboardInterrupt
    with tempfile.TemporaryDirectory(prefix="pddbench-run-") as tmp:
        folder = Path(tmp)
        write_text(folder / "scenario.yaml", task["scenario_yaml"])
        write_sim_run(folder, records, summary, list(task["log"]))
        return {"files": {p.name: base64.b64encode(p.read_bytes()).decode("ascii")
                          for p in sorted(folder.iterdir()) if p.is_file()}}


KINDS = {"simulate": _simulate, "point": _point, "capacity": _capacity, "run_folder": _run_folder}


def _plain(obj):
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def execute(task_json: str, *blobs: bytes) -> str:
    """Run one task; `blobs` are the contents of the files listed in task["files"]."""
    started = time.perf_counter()
    try:
        task = json.loads(task_json)
        out = {"status": "ok", **KINDS[task["kind"]](task, dict(zip(task["files"], blobs)))}
    except Exception as exc:  # noqa: BLE001 - recorded with the point; KeyboardInterrupt still stops
        if is_interrupt(exc):  # a Ctrl-C a library wrapped (in-process, -j 1): it stops too
            raise
        out = {"status": "failed", "error": f"{type(exc).__name__}: {exc}".strip()}
    out["wall_s"] = round(time.perf_counter() - started, 4)  # reported in timings.json, never in the table
    return json.dumps(out, default=_plain, sort_keys=True)
