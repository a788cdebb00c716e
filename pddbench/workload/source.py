"""Where a scenario's requests come from: one loader per `workload.source`, in a small registry
the simulator and the live runtime both call (neither imports the other for it)."""

from __future__ import annotations

from typing import Any, Callable

from pddbench.workload.fixed import fixed_requests
from pddbench.workload.synth import synthesize
from pddbench.workload.trace import Request, load_trace

# The schema (pddbench/schema) sits above this layer and imports its configs, so the loaders take
# its Workload section (and workload_requests a Scenario) without importing their types.
Workload = Scenario = Any


def _from_trace(w: "Workload") -> list[Request]:
    assert w.trace is not None  # the schema refuses source 'trace' without a trace
    return load_trace(w.trace, w.block_size)


def _from_fixed(w: "Workload") -> list[Request]:
    assert w.fixed is not None
    return fixed_requests(w.fixed, w.block_size)


def _from_synth(w: "Workload") -> list[Request]:
    return synthesize(w.synth.model_copy(update={"block_size": w.block_size}))


SOURCES: dict[str, Callable[["Workload"], list[Request]]] = {
    "trace": _from_trace,
    "fixed": _from_fixed,
    "synth": _from_synth,
}


def workload_requests(sc: "Scenario") -> list[Request]:
    w = sc.workload
    reqs = SOURCES[w.resolved_source()](w)
    return reqs[: w.max_requests] if w.max_requests else reqs
