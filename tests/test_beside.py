"""A stage run beside the main job's others (pddbench/reproduce/beside.py): the same results as in
the foreground, on idle-priority workers of its own pool, and stopped with its workers when the
foreground fails or is interrupted. Real process pools and real simulations."""

from __future__ import annotations

import os
import threading
import time

from pddbench.reproduce.beside import Beside
from pddbench.sweep.checked_search import holds
from pddbench.sweep.executors import InlineExecutor
from pddbench.sweep.points import WALL_CLOCK_KEYS


def _scenarios(n: int, requests: int):
    from pddbench.reproduce.tasks import Settings, _variant

    cfg = Settings.make(requests=requests, seeds=1)
    return [_variant("same-dc-pd", 0, cfg, [f"workload.synth.requests={requests}", f"workload.rate_scale={0.5 + i / 4}"])
            for i in range(n)]


def _measured(verdicts: list[dict]) -> list[dict]:
    """The checks' results without what differs between identical runs (wall time, provenance)."""
    return [{**v, "summary": {k: x for k, x in v["summary"].items() if k not in WALL_CLOCK_KEYS}} for v in verdicts]


def test_a_stage_beside_gives_the_foregrounds_results_on_idle_priority_workers_of_its_own():
    scen = _scenarios(4, 200)
    seen: dict = {}

    def work(ex):
        seen["thread"] = threading.current_thread().name
        out = holds(scen, ex or InlineExecutor())
        if ex is not None:
            seen["policy"] = [os.sched_getscheduler(p.pid) for p in ex._pool._processes.values()]
        return out

    foreground = Beside(work, 1, None)
    assert "thread" not in seen  # -j 1: nothing starts before the result is asked for
    alone = foreground.result()
    assert seen["thread"] == threading.current_thread().name and foreground.wall_s is None
    beside = Beside(work, 2, None).result()
    assert seen["thread"] == "pddbench-beside"
    assert _measured(beside) == _measured(alone) and len(beside) == 4
    assert seen["policy"] and set(seen["policy"]) == {os.SCHED_IDLE}  # they run only where the cores are idle
    assert os.sched_getscheduler(0) != os.SCHED_IDLE  # and nothing else changed


def test_on_ray_the_stage_waits_for_the_foreground():
    calls = []
    stage = Beside(lambda ex: calls.append(ex) or "done", 2, "local")
    assert calls == []
    assert stage.result() == "done" and calls == [None]


def test_cancel_stops_the_stage_and_ends_its_workers():
    scen = _scenarios(40, 6000)  # ~10 s of work on 2 cores: cancel() comes long before its end
    started = threading.Event()
    pool = {}

    def work(ex):
        pool["ex"] = ex
        started.set()
        return holds(scen, ex)

    stage = Beside(work, 2, None)
    assert started.wait(60)
    ex = pool["ex"]
    deadline = time.monotonic() + 60
    while not ex._pool._processes and time.monotonic() < deadline:  # the workers start on first use
        time.sleep(0.05)
    pids = list(ex._pool._processes)
    assert pids
    stage.cancel()
    assert not stage._thread.is_alive()
    assert isinstance(stage._error, KeyboardInterrupt)  # what an interrupted stage sees
    deadline = time.monotonic() + 10
    while any(map(_alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(map(_alive, pids))


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return not f.read().rsplit(") ", 1)[1].startswith("Z")
    except FileNotFoundError:
        return False
