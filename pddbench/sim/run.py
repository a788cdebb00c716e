"""Run one scenario in the simulator: workload -> cluster -> event loop -> records."""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Callable, Iterator

import pandas as pd

from pddbench.schema.scenario import Scenario
from pddbench.sim.cluster import build_cluster, hardware_cost_per_hour
from pddbench.sim.deployments import make_deployment
from pddbench.core.errors import SimulationStalled
from pddbench.sim.engine import ARRIVAL, STALL_EVENTS, EventLoop, Stalled
from pddbench.sim.request import SimRequest, records_frame
from pddbench.workload.source import workload_requests
from pddbench.workload.trace import Request


def _arrivals(reqs: list[Request], rate_scale: float) -> Iterator[SimRequest]:
    t0 = reqs[0].timestamp_ms
    for i, r in enumerate(reqs):
        yield SimRequest(i, (r.timestamp_ms - t0) / rate_scale, r.input_length, r.output_length,
                         r.hash_ids, r.session_id, r.turn)


@contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Pause the cyclic garbage collector. A run allocates millions of short-lived tuples and
    objects (freed by reference counting) beside a large live graph of requests, which each
    collection walks: 1,000+ collections took ~15 % of a 100,000-request run. What is cyclic
    (the cluster and its callbacks) is collected once the run is over."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def simulate(sc: Scenario, reqs: list[Request] | None = None,
             on_progress: Callable[[float, float], None] | None = None) -> tuple[pd.DataFrame, dict]:
    """Simulate the scenario; returns (records, facts about the run for the summary)."""
    with _no_cycle_collection():
        return _simulate(sc, reqs, on_progress)


def _simulate(sc: Scenario, reqs: list[Request] | None,
              on_progress: Callable[[float, float], None] | None) -> tuple[pd.DataFrame, dict]:
    reqs = workload_requests(sc) if reqs is None else reqs
    loop = EventLoop()
    cluster = build_cluster(sc, loop)
    deployment = make_deployment(sc, cluster)
    sim_reqs: list[SimRequest] = []
    arrivals = _arrivals(reqs, sc.workload.rate_scale)
    last_arrival = (reqs[-1].timestamp_ms - reqs[0].timestamp_ms) / sc.workload.rate_scale

    # Arrivals are fed one at a time so the heap holds only what is in flight.
    def on_arrival(req: SimRequest) -> None:
        sim_reqs.append(req)
        deployment.arrive(req)
        nxt = next(arrivals, None)
        if nxt is not None:
            loop.schedule(ARRIVAL, nxt.arrival_ms, on_arrival, nxt)

    first = next(arrivals)
    loop.schedule(ARRIVAL, first.arrival_ms, on_arrival, first)
    loop.stall_events = stall_limit(sc, len(reqs))
    interrupted = False
    try:
        loop.run(on_progress=(lambda t: on_progress(t, last_arrival)) if on_progress else None)
    except Stalled as exc:
        raise SimulationStalled(_stall_message(exc, sim_reqs)) from None
    except KeyboardInterrupt:
        interrupted = True  # keep what was simulated; unfinished requests are recorded as failed
        for r in sim_reqs:
            if not r.done:
                r.failure_reason = "interrupted"
    records = records_frame(sim_reqs)
    facts = {
        "cost_per_hour": hardware_cost_per_hour(sc),
        "sim_events": loop.events,
        "sim_events_by_kind": loop.events_by_kind(),
        "sim_end_ms": loop.now,
        "instances": {
            **{p.name: {"busy_ms": round(p.busy_ms, 3), "steps": p.steps} for p in cluster.prefill + cluster.remote_prefill},
            **{d.name: {"busy_ms": round(d.busy_ms, 3), "peak_batch": d.peak_batch}
               for d in cluster.decode + cluster.relay},
        },
        "wan_bytes_sent": int(cluster.wan.bytes_sent),
        "interrupted": interrupted,
    }
    return records, facts


def stall_limit(sc: Scenario, n_requests: int) -> int:
    """The watchdog's limit (engine.py): events in a row at one instant that move no request on.
    A finite run has at most a few per request in flight and per Catch-Up round at one instant."""
    return STALL_EVENTS + n_requests * (64 + 4 * sc.policy.catch_up_max_rounds)


def _stall_message(exc: Stalled, sim_reqs: list[SimRequest]) -> str:
    t, kind, handler, args = exc.event
    stuck = _requests_in((getattr(handler, "__self__", None), args))
    unfinished = [r for r in sim_reqs if not r.done]
    if not stuck and unfinished:
        stuck = [min(unfinished, key=lambda r: r.arrival_ms)]
    who = (f"request {stuck[0].request_id} (arrived at {stuck[0].arrival_ms:.6g} ms, {len(unfinished):,} "
           "unfinished) makes no progress" if stuck else "no request is in flight")
    return (f"the simulation stalled: {exc}; {who}. A value at the edge of float precision "
            "(a tiny size or huge rate) can do this: bring the scenario's extreme values nearer the usual ones")


def _requests_in(obj: object, depth: int = 0) -> list[SimRequest]:
    """The requests an event concerns: in its arguments, the state objects and transfers they hold,
    and for a link's event the transfer at the head of its line."""
    if depth > 4 or obj is None:
        return []
    if isinstance(obj, SimRequest):
        return [obj]
    if isinstance(obj, (tuple, list)):
        return [r for item in obj[:8] for r in _requests_in(item, depth + 1)]
    found: list[SimRequest] = []
    for attr in ("req", "args", "_heap"):  # a job or handoff state, a transfer, a link's line
        value = getattr(obj, attr, None)
        if attr == "_heap" and isinstance(value, list) and value:
            value = min(value)[2:]  # the transfer due first: (target, seq, transfer)
        if value is not None:
            found += _requests_in(value, depth + 1)
    return found
