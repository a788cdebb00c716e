"""Sharded replay on Ray (`pddbench replay --workers N --ray`): the same split, schedule and
merged records as `--workers` on this host (shards.py), with each worker a Ray actor that Ray
spreads over the cluster's nodes, so load generators can sit on several machines.

Placement by datacenter: with `datacenter` DC every actor asks for a sliver of the custom resource
`dc_<DC>`, so Ray places the load generators only on the nodes started with it (`ray start
--resources '{"dc_a": 64}'`), e.g. beside the front they drive; a cluster with no such node is
refused in one line before any actor is made.

One schedule across machines, as on one host: every actor first gets its requests and warms its
connections (prepare); then, each node's CLOCK_MONOTONIC having its own origin, the parent measures
every actor's clock offset (ping-pong through Ray, the sample with the shortest round trip) and
gives each actor the common start instant in its own clock (begin). The round trip bounds the
offset's error and is kept per worker (`clock_rtt_ms`).

What crosses the network is JSON text (the requests out, records and progress back); nothing of
ours is pickled. Ctrl-C asks every actor to stop and keeps what it measured (STOP_S at most); an
actor whose process or node dies is reported lost and its requests become failed records
(`worker_lost`). Every actor is killed before the call returns, whatever happened."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import socket
import time
from typing import Callable

import pandas as pd

from pddbench.live.client import LiveRequest, Outcome, ReplayClient, keep_sent, outcome_record, run_sync
from pddbench.live.shards import LOST, STOP_S, CtrlC, assign_sessions, concurrency_shares, session_key

LEAD_S = 0.5     # from the last clock sync to the start: one Ray call to each actor, across nodes
READY_S = 120.0  # every actor placed, then warm (a cluster short of CPUs never places some)
POLL_S = 0.25    # progress polls while the actors send
SYNC_PINGS = 7

Progress = Callable[[bool, float | None], None]


class ReplayActor:
    """One load generator on a Ray node: replay.py's client, started at a given instant. Threaded
    (max_concurrency > 1) so that progress() and stop() are answered while run() sends."""

    def __init__(self) -> None:
        import threading

        self._finished: list = []  # (failed, ttft_ms) since the last progress()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None
        self._start: asyncio.Future | None = None
        self._warm = threading.Event()
        self._stopped = False

    def now(self) -> float:
        return time.monotonic()

    def node(self) -> str:
        return socket.gethostname()

    def progress(self) -> str:
        done, self._finished = self._finished, []
        return json.dumps(done)

    def stop(self) -> None:
        self._stopped = True
        if self._loop is not None and self._task is not None:
            self._loop.call_soon_threadsafe(self._task.cancel)

    def warm(self, timeout_s: float) -> bool:
        """Whether run() has its connections open and waits for begin()."""
        return self._warm.wait(timeout_s)

    def begin(self, start: float) -> None:
        """The start instant, in this node's monotonic clock."""
        self._loop.call_soon_threadsafe(lambda: self._start.done() or self._start.set_result(start))

    def run(self, spec_text: str) -> str:
        """Open and warm the connections, wait for begin(), send the spec's requests; the
        records as JSON."""
        spec = json.loads(spec_text)
        reqs = [LiveRequest(**r) for r in spec["requests"]]
        client = ReplayClient(spec["endpoint"], spec["model"], timeout_s=spec["timeout_s"])
        outcomes: list[Outcome] = []

        def on_done(o: Outcome) -> None:
            ok = not o.failure and bool(o.token_times_s)
            self._finished.append((not ok, (o.token_times_s[0] - o.send_s) * 1000 if ok else None))

        async def start_at() -> float:
            self._warm.set()
            return await self._start

        async def main() -> None:
            self._loop, self._task = asyncio.get_running_loop(), asyncio.current_task()
            self._start = self._loop.create_future()
            if self._stopped:
                return
            await client.run(reqs, spec["concurrency"], on_done, outcomes, start=start_at)
        interrupted = False
        try:
            run_sync(main())
        except asyncio.CancelledError:
            interrupted = True
            outcomes = keep_sent(outcomes)
        interrupted = interrupted or self._stopped
        return json.dumps({"interrupted": interrupted,
                           "records": [outcome_record(o, spec["pipeline"]) for o in outcomes]})


def dc_resource(datacenter: str) -> str:
    """The custom Ray resource that marks a node as in `datacenter`."""
    return f"dc_{datacenter}"


def replay_on_ray(endpoint: str, model: str, reqs: list[LiveRequest], workers: int, address: str | None, *,
                  concurrency: int | None, timeout_s: float, pipeline: str,
                  on_progress: Progress, datacenter: str | None = None) -> tuple[pd.DataFrame, list[dict], bool]:
    """Send `reqs` from `workers` Ray actors (address None: a local runtime of `workers` CPUs), on
    the nodes of `datacenter` where given; returns (records of every request, one account per
    worker, interrupted), as replay_sharded."""
    from pddbench.core.errors import UserError
    from pddbench.core.ray_cluster import connect_ray, disconnect_ray

    owner = assign_sessions(reqs, workers)
    parts = [(k, [r for r, w in zip(reqs, owner) if w == k]) for k in range(workers)]
    parts = [(k, part) for k, part in parts if part]
    shares = concurrency_shares(concurrency, len(parts))
    ray, _where, log = connect_ray(address, workers if address is None else None)
    placement = {}
    if datacenter is not None:
        resource = dc_resource(datacenter)
        if not ray.cluster_resources().get(resource):
            disconnect_ray(ray, log)
            raise UserError(f"--datacenter {datacenter}: no node of the Ray cluster has the resource {resource}; "
                            f"start that datacenter's nodes with `ray start ... --resources '{{\"{resource}\": 64}}'`")
        placement = {"resources": {resource: 0.001}}  # a sliver: the CPUs, not this, bound how many fit
    accounts = [{"worker": k, "requests": len(part), "sessions": len({session_key(r) for r in part}),
                 "state": "starting", "interrupted": False, "clock_offset_ms": None, "clock_rtt_ms": None,
                 "lost_because": "", "node": None} for k, part in parts]
    actors: list = []
    records: dict[int, list] = {}
    runs: dict = {}  # run() reference -> its account
    interrupted = False
    with CtrlC() as ctrl_c:
        try:
            remote = ray.remote(num_cpus=1, max_concurrency=4, max_restarts=0)(ReplayActor)
            actors = [remote.options(scheduling_strategy="SPREAD", **placement).remote() for _ in parts]
            try:
                _place(ray, actors, accounts, ctrl_c)
                for (k, part), share, actor, acc in zip(parts, shares, actors, accounts):
                    if acc["state"] == "ready":
                        spec = {"endpoint": endpoint, "model": model, "timeout_s": timeout_s, "concurrency": share,
                                "pipeline": pipeline, "requests": [dataclasses.asdict(r) for r in part]}
                        runs[actor.run.remote(json.dumps(spec))] = acc
                _warm(ray, actors, accounts, ctrl_c)
                _sync(ray, actors, accounts, ctrl_c)
                ctrl_c.check()  # stopped before any request was sent
                for ref, acc in list(runs.items()):
                    if acc["state"] == "lost":  # waits for a start it will never get
                        del runs[ref]
                        ray.kill(actors[accounts.index(acc)])
                start = time.monotonic() + LEAD_S
                for actor, acc in zip(actors, accounts):
                    if acc["state"] == "ready":
                        actor.begin.remote(start + acc["clock_offset_ms"] / 1000)
                        acc["state"] = "running"
                _collect(ray, runs, actors, accounts, records, on_progress, math.inf, ctrl_c)
            except KeyboardInterrupt:
                interrupted = True
                for actor in actors:
                    actor.stop.remote()
                _collect(ray, runs, actors, accounts, records, on_progress, STOP_S)  # a 2nd Ctrl-C: only the flag
        finally:
            for actor in actors:
                try:
                    ray.kill(actor)
                except Exception:  # noqa: BLE001 - already gone with its node
                    pass
            disconnect_ray(ray, log)
    return _merge(parts, accounts, records, pipeline), accounts, interrupted


def _wait_all(ray, refs: list, timeout_s: float, ctrl_c: CtrlC) -> tuple[list, list]:
    """ray.wait for all of `refs`, in POLL_S steps so that a Ctrl-C is heard."""
    ready, waiting, deadline = [], list(refs), time.monotonic() + timeout_s
    while waiting and time.monotonic() < deadline:
        ctrl_c.check()
        got, waiting = ray.wait(waiting, num_returns=len(waiting), timeout=POLL_S)
        ready += got
    return ready, waiting


def _place(ray, actors: list, accounts: list[dict], ctrl_c: CtrlC) -> None:
    """Wait for every actor to run somewhere; one not placed within READY_S is lost."""
    refs = {a.node.remote(): acc for a, acc in zip(actors, accounts)}
    ready, waiting = _wait_all(ray, list(refs), READY_S, ctrl_c)
    for ref in ready:
        try:
            refs[ref]["node"], refs[ref]["state"] = ray.get(ref), "ready"
        except Exception as exc:  # noqa: BLE001 - Ray's errors for a dead actor or node are many
            _lose(refs[ref], exc)
    for ref in waiting:
        refs[ref]["state"], refs[ref]["lost_because"] = "lost", (
            f"not placed within {READY_S:g} s (the cluster has no free CPU for it?)")


def _warm(ray, actors: list, accounts: list[dict], ctrl_c: CtrlC) -> None:
    """Wait until every running actor's connections are warm; one not warm within READY_S is
    lost (its run() then reports why, or is killed with the rest)."""
    refs = {a.warm.remote(READY_S): acc for a, acc in zip(actors, accounts) if acc["state"] == "ready"}
    ready, waiting = _wait_all(ray, list(refs), READY_S + 10, ctrl_c)
    for ref in ready:
        try:
            warm = ray.get(ref)
        except Exception as exc:  # noqa: BLE001
            _lose(refs[ref], exc)
            continue
        if not warm:
            refs[ref]["state"], refs[ref]["lost_because"] = "lost", f"not warm within {READY_S:g} s"
    for ref in waiting:
        refs[ref]["state"], refs[ref]["lost_because"] = "lost", f"not warm within {READY_S:g} s"


def _sync(ray, actors: list, accounts: list[dict], ctrl_c: CtrlC) -> None:
    """Each ready actor's clock offset: (its clock - ours) at the midpoint of the fastest ping."""
    for actor, acc in zip(actors, accounts):
        ctrl_c.check()
        if acc["state"] != "ready":
            continue
        best = (math.inf, 0.0)
        try:
            for _ in range(SYNC_PINGS):
                sent = time.monotonic()
                theirs = ray.get(actor.now.remote(), timeout=10)
                back = time.monotonic()
                best = min(best, ((back - sent) * 1000, (theirs - (sent + back) / 2) * 1000))
        except Exception as exc:  # noqa: BLE001
            _lose(acc, exc)
            continue
        acc["clock_rtt_ms"], acc["clock_offset_ms"] = round(best[0], 4), round(best[1], 4)


def _collect(ray, runs: dict, actors: list, accounts: list[dict], records: dict, on_progress: Progress,
             timeout_s: float, ctrl_c: CtrlC | None = None) -> None:
    """Wait for the running actors' records, feeding progress; past timeout_s the rest are lost.
    A Ctrl-C (`ctrl_c`) raises here, between results, never between taking one and keeping it."""
    deadline = time.monotonic() + timeout_s
    while runs:
        if ctrl_c is not None:
            ctrl_c.check()
        left = deadline - time.monotonic()
        if left <= 0:
            for acc in runs.values():
                acc["state"], acc["lost_because"] = "lost", f"did not stop within {timeout_s:g} s"
            runs.clear()
            return
        done, _ = ray.wait(list(runs), num_returns=1, timeout=min(POLL_S, left))
        _progress(ray, actors, accounts, on_progress)
        for ref in done:
            acc = runs.pop(ref)
            try:
                got = json.loads(ray.get(ref))
            except Exception as exc:  # noqa: BLE001 - the actor's process or node died
                _lose(acc, exc)
                continue
            records[acc["worker"]] = got["records"]
            acc["state"], acc["interrupted"] = "done", got["interrupted"]


def _progress(ray, actors: list, accounts: list[dict], on_progress: Progress) -> None:
    refs = [a.progress.remote() for a, acc in zip(actors, accounts) if acc["state"] == "running"]
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=POLL_S)
    for ref in ready:
        try:
            for failed, ttft in json.loads(ray.get(ref)):
                on_progress(failed, ttft)
        except Exception:  # noqa: BLE001 - a dead actor: its run() says so
            pass


def _lose(acc: dict, exc: BaseException) -> None:
    first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
    acc["state"], acc["lost_because"] = "lost", f"{type(exc).__name__}: {first}".rstrip(": ")


def _merge(parts: list, accounts: list[dict], records: dict, pipeline: str) -> pd.DataFrame:
    """Every actor's records and a worker_lost record for each request of a lost one, in request
    order: the schema and order of a single-process replay."""
    from pddbench.metrics.records import to_frame

    rows = []
    for (k, part), acc in zip(parts, accounts):
        if acc["state"] == "done":
            rows += records[k]
        else:
            acc["state"] = "lost"
            acc["lost_because"] = acc["lost_because"] or "no records returned"
            rows += [outcome_record(Outcome(r, send_s=r.intended_s, failure=LOST), pipeline) for r in part]
    frame = to_frame(rows)
    if not len(frame):
        return frame
    return frame.sort_values("request_id", kind="stable").reset_index(drop=True)
