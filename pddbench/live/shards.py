"""Sharded replay: one trace sent by several worker processes on this host, on one schedule,
merged into one set of records (`pddbench replay --workers N`).

Sessions, not requests, are split: every turn of a session is sent by one worker, in the
trace's order, so a turn's prefix follows the path the trace gives it. The split balances request
counts (largest session first, to the least-loaded worker; ties by session), so the same trace
always gives the same workers the same sessions.

One schedule: each worker opens and warms its connections, then the parent measures the
worker's clock offset (ping-pong over the worker's pipe, the sample with the shortest round trip)
and sends it one common start instant in the worker's own clock. On one host CLOCK_MONOTONIC is
shared, so the offset measured is the measurement's own error; it is kept per worker.

Teardown: workers start with SIGINT ignored (a terminal's Ctrl-C reaches the whole process group:
the parent decides) and stop on SIGTERM, keeping what they measured. The parent stops every
worker on Ctrl-C or error, kills one that has not stopped within STOP_S, and never returns with a
worker alive. A worker that dies is reported (state 'lost'); the requests it owned become failed
records with failure_reason 'worker_lost', and the other workers' records are kept."""

from __future__ import annotations

import heapq
import math
import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Callable

import pandas as pd

from pddbench.live.client import LiveRequest, Outcome, outcome_record

MAX_WORKERS = 64     # processes on one host; more only adds spawn time and contention
READY_S = 120.0      # spawn, imports and connection warm-up of every worker, on a loaded host
STOP_S = 20.0        # a stopped worker writes what it measured within this, or is killed
LEAD_S = 0.25        # the common start instant, this long after the last worker is synced
SYNC_PINGS = 7
LOST = "worker_lost"
_HOST = socket.gethostname()

Progress = Callable[[bool, float | None], None]  # (failed, ttft_ms) per finished request


def session_key(req: LiveRequest) -> tuple[int, int]:
    """A request without a session is a session of its own."""
    return (0, req.session_id) if req.session_id >= 0 else (1, req.request_id)


def assign_sessions(reqs: list[LiveRequest], workers: int) -> list[int]:
    """The worker of each request: whole sessions, balanced by request count, deterministic."""
    sizes: dict[tuple[int, int], int] = {}
    for r in reqs:
        sizes[session_key(r)] = sizes.get(session_key(r), 0) + 1
    heap = [(0, w) for w in range(workers)]  # (requests so far, worker): the least loaded first
    owner = {}
    for key in sorted(sizes, key=lambda k: (-sizes[k], k)):
        load, w = heapq.heappop(heap)
        owner[key] = w
        heapq.heappush(heap, (load + sizes[key], w))
    return [owner[session_key(r)] for r in reqs]


def replay_sharded(endpoint: str, model: str, reqs: list[LiveRequest], workers: int, shard_dir: Path, *,
                   concurrency: int | None, timeout_s: float, pipeline: str, on_progress: Progress,
                   cpus: list[set[int]] | None = None,
                   server_ttft_ms: dict[int, float] | None = None) -> tuple[pd.DataFrame, list[dict], bool]:
    """Send `reqs` from `workers` processes; returns (records of every request, one account per
    worker, interrupted). Ctrl-C stops the workers, keeps what they measured and returns
    interrupted=True; the caller writes the summary and re-raises. `cpus` pins worker k to
    cpus[k % len(cpus)]; `server_ttft_ms`, when given, is filled with the TTFT each request's
    server reported of itself (`server_timing`, the fixed-latency endpoint's), by request id."""
    import multiprocessing as mp

    owner = assign_sessions(reqs, workers)
    parts = [(k, [r for r, w in zip(reqs, owner) if w == k]) for k in range(workers)]
    parts = [(k, part) for k, part in parts if part]  # fewer sessions than workers: no idle process
    shares = concurrency_shares(concurrency, len(parts))
    shard_dir.mkdir(parents=True, exist_ok=True)
    ctx = mp.get_context("spawn")  # a fresh interpreter: no inherited event loop or threads
    pool = _Pool()
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # inherited through exec: see the docstring
        try:
            for (k, part), share in zip(parts, shares):
                here, there = ctx.Pipe()
                proc = ctx.Process(target=_worker, name=f"pddbench-replay-{k}", daemon=True,
                                   args=(k, endpoint, model, timeout_s, part, share, pipeline, there, str(shard_dir),
                                         cpus[k % len(cpus)] if cpus else None, os.getpid()))
                proc.start()
                there.close()
                pool.add(k, proc, here, part)
        finally:
            signal.signal(signal.SIGINT, previous)
        interrupted = False
        with CtrlC() as ctrl_c:
            try:
                pool.until(lambda w: w["state"] != "starting", READY_S, on_progress, ctrl_c)
                pool.start_together(ctrl_c)
                pool.until(lambda w: w["state"] in ("done", "lost"), math.inf, on_progress, ctrl_c)
            except KeyboardInterrupt:
                interrupted = True
                pool.stop(on_progress)  # a second Ctrl-C meanwhile only sets the flag again
    finally:
        pool.close()
    if server_ttft_ms is not None:
        for w in pool.workers:
            server_ttft_ms.update(w["server_ttft_ms"])
    return _merge(pool, shard_dir, pipeline, interrupted), pool.accounts(), interrupted


class CtrlC:
    """Ctrl-C as a flag that the parent checks where stopping is safe (`check`), not an exception
    raised wherever the main thread happens to be: between a pipe read and the state it sets, a
    KeyboardInterrupt would lose a finished worker's message. Outside the main thread, or where
    SIGINT is ignored, nothing changes."""

    def __init__(self) -> None:
        self.pressed = False
        self._previous = None

    def __enter__(self) -> "CtrlC":
        if threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
            self._previous = signal.signal(signal.SIGINT, self._press)
        return self

    def _press(self, _sig, _frame) -> None:
        self.pressed = True

    def __exit__(self, *_exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)

    def check(self) -> None:
        if self.pressed:
            raise KeyboardInterrupt


def concurrency_shares(concurrency: int | None, workers: int) -> list[int | None]:
    if concurrency is None:
        return [None] * workers
    return [concurrency // workers + (k < concurrency % workers) for k in range(workers)]


class _Pool:
    """The parent's side: each worker's process, pipe, requests and account."""

    def __init__(self) -> None:
        self.workers: list[dict] = []

    def add(self, index: int, proc, conn, reqs: list[LiveRequest]) -> None:
        self.workers.append({"worker": index, "proc": proc, "conn": conn, "reqs": reqs, "state": "starting",
                             "interrupted": False, "clock_offset_ms": None, "clock_rtt_ms": None, "why": "",
                             "server_ttft_ms": {}})

    def until(self, settled: Callable[[dict], bool], timeout_s: float, on_progress: Progress,
              ctrl_c: CtrlC | None = None) -> None:
        """Handle the workers' messages until every worker is settled; past timeout_s the
        unsettled ones are stopped and counted lost. A Ctrl-C (`ctrl_c`) raises KeyboardInterrupt
        here, between messages, never inside one."""
        from multiprocessing.connection import wait

        deadline = time.monotonic() + timeout_s
        while True:
            if ctrl_c is not None:
                ctrl_c.check()
            waiting = [w for w in self.workers if not settled(w) and w["state"] != "lost"]
            if not waiting:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                for w in waiting:
                    self._lose(w, f"no answer within {timeout_s:g} s")
                return
            ready = wait([w["conn"] for w in waiting] + [w["proc"].sentinel for w in waiting], min(left, 0.25))
            for w in waiting:
                if w["conn"] in ready or w["proc"].sentinel in ready:
                    self._read(w, on_progress)

    def _read(self, w: dict, on_progress: Progress) -> None:
        try:
            while w["conn"].poll():
                msg = w["conn"].recv()
                if msg[0] == "progress":
                    on_progress(msg[1], msg[2])
                elif msg[0] == "ready":
                    w["state"] = "ready"
                elif msg[0] == "done":
                    w["state"], w["interrupted"], w["server_ttft_ms"] = "done", msg[1], msg[2]
                elif msg[0] == "failed":
                    self._lose(w, msg[1])
        except (EOFError, OSError):
            pass
        if w["state"] not in ("done", "lost") and not w["proc"].is_alive():
            self._lose(w, f"the process ended (exit code {w['proc'].exitcode})")

    def _lose(self, w: dict, why: str) -> None:
        w["state"], w["why"] = "lost", why
        if w["proc"].is_alive():
            w["proc"].kill()

    def start_together(self, ctrl_c: CtrlC | None = None) -> None:
        """Measure each ready worker's clock offset, then give all one start instant."""
        ready = [w for w in self.workers if w["state"] == "ready"]
        for w in ready:
            try:
                w["clock_rtt_ms"], w["clock_offset_ms"] = _clock_offset(w["conn"])
            except (EOFError, OSError, TimeoutError) as exc:
                self._lose(w, f"clock sync failed ({type(exc).__name__})")
        if ctrl_c is not None:
            ctrl_c.check()  # stopped before any request was sent
        start = time.monotonic() + LEAD_S
        for w in ready:
            if w["state"] == "ready":
                try:
                    w["conn"].send(("start", start + w["clock_offset_ms"] / 1000))
                except OSError as exc:  # it died after its clock sync
                    self._lose(w, f"died before its start ({type(exc).__name__})")
                    continue
                w["state"] = "running"

    def stop(self, on_progress: Progress) -> None:
        """SIGTERM to every worker still running; wait for what they measured; kill the rest."""
        for w in self.workers:
            if w["state"] not in ("done", "lost") and w["proc"].is_alive():
                w["proc"].terminate()
        self.until(lambda w: w["state"] in ("done", "lost"), STOP_S, on_progress)

    def close(self) -> None:
        for w in self.workers:
            if w["proc"].is_alive():
                w["proc"].kill()
            w["proc"].join()
            w["conn"].close()

    def accounts(self) -> list[dict]:
        return [{"worker": w["worker"], "requests": len(w["reqs"]),
                 "sessions": len({session_key(r) for r in w["reqs"]}), "state": w["state"],
                 "interrupted": w["interrupted"], "clock_offset_ms": w["clock_offset_ms"],
                 "clock_rtt_ms": w["clock_rtt_ms"], "lost_because": w["why"], "node": _HOST} for w in self.workers]


def _clock_offset(conn) -> tuple[float, float]:
    """(round trip, offset) in ms of the sample with the shortest round trip: worker clock minus
    ours at the midpoint."""
    best = (math.inf, 0.0)
    for _ in range(SYNC_PINGS):
        sent = time.monotonic()
        conn.send(("ping",))
        if not conn.poll(10.0):
            raise TimeoutError
        theirs = conn.recv()[1]
        back = time.monotonic()
        best = min(best, ((back - sent) * 1000, (theirs - (sent + back) / 2) * 1000))
    return round(best[0], 4), round(best[1], 4)


def _merge(pool: _Pool, shard_dir: Path, pipeline: str, interrupted: bool) -> pd.DataFrame:
    """Every worker's records, and a worker_lost record for each request of a lost worker, in
    request order: the same schema and order as a single-process replay. A shard file is whole
    (written atomically), so it is kept even when its 'done' message never arrived (the worker
    was killed just after writing it)."""
    import shutil

    from pddbench.metrics.records import read_records, to_frame

    frames = []
    for w in pool.workers:
        shard = shard_dir / f"worker-{w['worker']}.parquet"
        if shard.is_file():
            frames.append(read_records(shard))
            if w["state"] != "done":
                w["state"], w["why"], w["interrupted"] = "done", "", w["interrupted"] or interrupted
            continue
        w["state"] = "lost"
        w["why"] = w["why"] or "no records written"
        frames.append(to_frame([outcome_record(Outcome(r, send_s=r.intended_s, failure=LOST), pipeline)
                                for r in w["reqs"]]))
    shutil.rmtree(shard_dir, ignore_errors=True)
    frames = [f for f in frames if len(f)]
    if not frames:
        return to_frame([])
    return pd.concat(frames, ignore_index=True).sort_values("request_id", kind="stable").reset_index(drop=True)


# --- the worker's side (a spawned process) ---

def _worker(index: int, endpoint: str, model: str, timeout_s: float, reqs: list[LiveRequest],
            concurrency: int | None, pipeline: str, conn, shard_dir: str, cpus: set[int] | None,
            parent: int) -> None:
    import traceback

    from pddbench.live.client import ReplayClient, keep_sent, run_sync
    from pddbench.metrics.records import to_frame, write_records

    def on_term(_sig, _frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    _die_with_parent(parent)
    if cpus:
        os.sched_setaffinity(0, cpus)
    outcomes: list[Outcome] = []
    interrupted = False
    try:
        def on_done(o: Outcome) -> None:
            ok = not o.failure and bool(o.token_times_s)
            conn.send(("progress", not ok, (o.token_times_s[0] - o.send_s) * 1000 if ok else None))

        client = ReplayClient(endpoint, model, timeout_s=timeout_s)
        try:
            run_sync(client.run(reqs, concurrency, on_done, outcomes, start=lambda: _start_instant(conn)))
        except KeyboardInterrupt:
            interrupted = True
            outcomes = keep_sent(outcomes)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # what was measured is written whole
        write_records(Path(shard_dir) / f"worker-{index}.parquet",
                      to_frame([outcome_record(o, pipeline) for o in outcomes]))
        conn.send(("done", interrupted, {o.req.request_id: float(o.server["ttft_ms"]) for o in outcomes
                                         if not o.failure and isinstance(o.server.get("ttft_ms"), (int, float))}))
    except KeyboardInterrupt:
        conn.send(("failed", "stopped before it had written its records"))
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which marks the worker lost
        conn.send(("failed", f"{type(exc).__name__}: {exc} | " + " ".join(traceback.format_exc().split())[-400:]))


def _die_with_parent(parent: int) -> None:
    """SIGTERM this worker when the parent dies, even by SIGKILL (Linux: PR_SET_PDEATHSIG), so no
    worker goes on sending after the run is gone; a parent already gone ends it now."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the pipe's EOF still ends the worker at its next message
    if os.getppid() != parent:
        raise SystemExit(0)


async def _start_instant(conn) -> float:
    """Report ready, answer the parent's clock pings, return the start instant it sends. A
    daemon thread does the blocking reads: a worker stopped meanwhile is not held by it."""
    import asyncio
    import threading

    loop = asyncio.get_running_loop()
    got: asyncio.Future = loop.create_future()

    def talk() -> None:
        conn.send(("ready",))
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                return
            if msg[0] == "ping":
                conn.send(("pong", time.monotonic()))
            elif msg[0] == "start":
                loop.call_soon_threadsafe(got.set_result, msg[1])
                return
    threading.Thread(target=talk, daemon=True).start()
    return await got
