"""Executors run tasks (JSON text + file bytes, see payload.py) and yield (index, result JSON) as
they finish: in this process (-j 1), in a local process pool (-j N) or on Ray (--ray [ADDRESS]).
Results do not depend on which: every backend calls the same tasks.execute."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import threading
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Iterator, Sequence

from pddbench.core.ray_cluster import connect_ray, disconnect_ray
from pddbench.sweep.payload import Payload
from pddbench.sweep.tasks import execute


def _failed(error: str) -> str:
    return json.dumps({"status": "failed", "error": error, "wall_s": None}, sort_keys=True)


class Executor:
    name = "inline"
    workers = 1

    def run(self, payloads: Sequence[Payload]) -> Iterator[tuple[int, str]]:
        raise NotImplementedError

    def close(self, cancel: bool = False) -> None:
        pass

    def describe(self) -> dict:
        return {"executor": self.name, "workers": self.workers}

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, exc_type, *_) -> None:
        self.close(cancel=exc_type is not None)


class InlineExecutor(Executor):
    """In this process, one task at a time (Ctrl-C reaches the simulation directly)."""

    def run(self, payloads):
        for i, p in enumerate(payloads):
            yield i, execute(p.task, *p.blobs)


def _quiet_worker(idle_only: bool = False) -> None:
    # Ctrl-C is the parent's to handle: it keeps what finished and ends the workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if idle_only:
        idle_priority()


def idle_priority() -> None:
    """This process runs only on cores nothing else wants (Linux SCHED_IDLE; elsewhere the lowest
    nice value): a nice of 10 still took ~10 % of a core from the foreground's workers."""
    if hasattr(os, "SCHED_IDLE"):
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            return
        except OSError:
            pass
    os.nice(19 - os.nice(0))


class PoolExecutor(Executor):
    """A local process pool (forkserver where available, else spawn: no fork of a threaded
    parent). Workers start on first use and are reused across run() calls.

    For work run in a background thread beside another pool: `idle_only` workers take the cores
    only while the foreground's leave them idle (idle_priority(); the results do not depend on
    it); `stop`, once set, makes run() raise KeyboardInterrupt, the Ctrl-C a background thread
    never receives itself."""
    name = "process-pool"
    STOP_POLL_S = 0.2

    def __init__(self, workers: int, idle_only: bool = False, stop: threading.Event | None = None):
        self.workers, self._stop = workers, stop
        method = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
        ctx = mp.get_context(method)
        if method == "forkserver":
            ctx.set_forkserver_preload(["pddbench.sweep.tasks", "pddbench.measure.runner"])
        self._pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_quiet_worker, initargs=(idle_only,))

    def run(self, payloads):
        futures = {self._pool.submit(execute, p.task, *p.blobs): i for i, p in enumerate(payloads)}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=self.STOP_POLL_S if self._stop else None,
                                 return_when=FIRST_COMPLETED)
            if self._stop is not None and self._stop.is_set():
                raise KeyboardInterrupt
            for f in sorted(done, key=futures.get):
                try:
                    yield futures[f], f.result()
                except Exception as exc:  # a worker died (BrokenProcessPool, out of memory): record it
                    yield futures[f], _failed(f"{type(exc).__name__}: {exc}")

    def close(self, cancel: bool = False) -> None:
        procs = list((getattr(self._pool, "_processes", None) or {}).values())
        self._pool.shutdown(wait=not cancel, cancel_futures=True)
        if cancel:  # do not wait for running tasks after Ctrl-C: end them
            for p in procs:
                if p.is_alive():
                    p.terminate()
            for p in procs:
                p.join(5)


class RayExecutor(Executor):
    """Ray: a local runtime (address None, `workers` CPUs) or an existing cluster. Each distinct
    data file is put in the object store once; tasks get its reference, a JSON string and nothing
    else of ours. The connection, and what is checked before it: pddbench/core/ray_cluster.py."""
    name = "ray"

    def __init__(self, address: str | None, workers: int | None, log_path: Path | None = None):
        self._ray, self.address, self.log_path = connect_ray(address, workers, log_path)
        ray = self._ray
        self.workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self._remote = ray.remote(num_cpus=1, max_retries=1)(execute)
        self._refs: dict[bytes, object] = {}  # blob -> object ref, so each file is sent once
        self._pending: list = []

    def describe(self) -> dict:
        return {"executor": self.name, "workers": self.workers, "address": self.address,
                "ray": self._ray.__version__}

    def _ref(self, blob: bytes):
        if blob not in self._refs:
            self._refs[blob] = self._ray.put(blob)
        return self._refs[blob]

    def run(self, payloads):
        ray = self._ray
        index = {}
        for i, p in enumerate(payloads):
            index[self._remote.remote(p.task, *[self._ref(b) for b in p.blobs])] = i
        self._pending = list(index)
        while self._pending:
            done, self._pending = ray.wait(self._pending, num_returns=1)
            for ref in done:
                try:
                    yield index[ref], ray.get(ref)
                except Exception as exc:  # the worker or node died: record it with the point
                    yield index[ref], _failed(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")

    def close(self, cancel: bool = False) -> None:
        if cancel:
            for ref in self._pending:
                try:
                    self._ray.cancel(ref, force=True)
                except Exception:  # noqa: BLE001 - already finished or gone
                    pass
        disconnect_ray(self._ray, self.log_path)


def results_in_order(executor: Executor, payloads: Sequence[Payload], field: str, what) -> list:
    """Each task's `field`, in the order of `payloads` whatever order they finish in; the first
    failed task raises, named by `what(i)`."""
    out: list = [None] * len(payloads)
    for i, text in executor.run(payloads):
        res = json.loads(text)
        if res["status"] != "ok":
            raise RuntimeError(f"{what(i)} failed: {res['error']}")
        out[i] = res[field]
    return out


def default_jobs() -> int:
    return os.cpu_count() or 1


def make_executor(jobs: int | None, ray: str | None = None, tasks: int | None = None) -> Executor:
    """-j N (0 or None: all cores) -> inline for 1, a process pool otherwise (no more workers
    than tasks); `ray` ("" or "local" for a local runtime, else a cluster address) -> Ray."""
    jobs = jobs or default_jobs()
    if ray is not None:
        return RayExecutor(None if ray in ("", "local") else ray, jobs if ray in ("", "local") else None)
    if tasks is not None:
        jobs = max(1, min(jobs, tasks))
    return InlineExecutor() if jobs == 1 else PoolExecutor(jobs)
