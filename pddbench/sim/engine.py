"""The event loop: a heap of (time, seq, kind, handler, args); handlers schedule further events.

Simulated time only: nothing here reads a clock. `seq` breaks ties in insertion order, so the
same inputs always replay in the same order (determinism byte for byte); the kind never decides
the order (seq is unique), it names the event and is counted.

Every event of the simulator has a kind, and the handler scheduled with it is named after it
(PULL_START's is whichever pull was asked for), so a request's transitions read in order:
ARRIVAL (run.py on_arrival), PREFILL_STEP until its last chunk, then
- PD, and PDD's P->MD pipeline: the KV pull, [PULL_START] LINK_DRAIN [KV_AT_BUSY_DECODER]
  KV_ARRIVED, then DECODE_FINISH;
- PrfaaS' offload: the transfer starts with the remote prefill's first step, LINK_DRAIN
  KV_STREAMED, and KV_ARRIVED once both the line and the prefill are done; its local path is PD's;
- PDD's relay pipeline: the pull to the relay (... RELAY_KV_ARRIVED, over RDMA) and in parallel
  the one to MD (... MD_KV_ARRIVED, over the WAN); then the handoff: Catch-Up rounds
  (LINK_DRAIN CATCH_UP_TOKENS CATCH_UP_ROUND), LINK_DRAIN HANDOFF, DECODE_FINISH on MD; or
  DECODE_FINISH on the relay first (relay_finish).
LINK_DRAIN and DECODE_FINISH events also fire stale (a later change superseded them) and return.
"""

from __future__ import annotations

import ctypes
from heapq import heappop, heappush
from typing import Any, Callable

from pddbench.core.errors import SimulationStalled

PROGRESS_EVERY = 0x4000  # events between two on_progress calls (and two checks for Ctrl-C)
# The watchdog: this many events in a row at one simulated instant with none of the kinds that
# move a request on (an arrival, a prefill step, a decode step) is a loop that cannot finish (e.g.
# a transfer whose remaining time rounds to nothing); run() stops with SimulationStalled. run.py
# raises it with the workload's size, so no finite run is ever stopped.
STALL_EVENTS = 1_000_000

# Event kinds (index into KIND_NAMES, the names the run summary's sim_events_by_kind uses).
ARRIVAL = 0             # a request arrives: run.py on_arrival
PREFILL_STEP = 1        # a prefill step ends: PrefillInstance._on_prefill_step
PULL_START = 2          # a decoder's scheduler runs and begins a KV pull (kv_pull_at_decode_step):
                        # Deployment._send / PDD._start_md_pull
LINK_DRAIN = 3          # a link's next transfer has sent its last byte: Link._on_link_drain (its
                        # arrival, after the propagation delay, is the transfer's own kind)
KV_AT_BUSY_DECODER = 4  # a pull's bytes are in while the decoder runs a batch: its arrival comes
                        # kv_pull_(relay_)busy_extra_ms later: Deployment._kv_at_busy_decoder
KV_ARRIVED = 5          # the prompt's KV is on the decoder that decodes the request (PD's D, PDD's MD
                        # on P->MD): PD._kv_arrived / PDD._kv_arrived_at_md
RELAY_KV_ARRIVED = 6    # relay pipeline: the KV is on the relay (RDMA), which starts decoding: PDD._relay_kv_arrived
MD_KV_ARRIVED = 7       # relay pipeline: the prompt's KV is on MD (WAN): PDD._md_kv_arrived
CATCH_UP_TOKENS = 8     # Catch-Up: a batch of the relay's token ids is on MD: PDD._catch_up_tokens_arrived
CATCH_UP_ROUND = 9      # Catch-Up: MD has recomputed them, next round: PDD._catch_up_round
HANDOFF = 10            # the handoff message (the last token ids) is on MD, which takes over: PDD._handoff_arrived
DECODE_FINISH = 11      # a decoder's next job completes: DecodeInstance._on_decode_finish
KV_STREAMED = 12        # prfaas offload: the line has carried every byte of a KV streamed layer by layer
                        # since the remote prefill began: PrfaaS._kv_streamed (then KV_ARRIVED)
UNNAMED = 13            # at() / after() / Link.send(): tests and tools; the simulator schedules none
KIND_NAMES = ("arrival", "prefill_step", "pull_start", "link_drain", "kv_at_busy_decoder", "kv_arrived",
              "relay_kv_arrived", "md_kv_arrived", "catch_up_tokens", "catch_up_round", "handoff",
              "decode_finish", "kv_streamed", "unnamed")
N_KINDS = 14  # engine.pxd sizes its counters by it


def _signal_check() -> Callable[[], int]:
    """PyErr_CheckSignals, which runs a pending Ctrl-C's handler (KeyboardInterrupt) from C: the
    compiled loop runs no Python bytecode, where the interpreter would otherwise hear it. A no-op
    where the C API is not reachable (the interpreter hears it between bytecodes there)."""
    try:
        return ctypes.pythonapi.PyErr_CheckSignals  # a PyDLL function: an exception it sets is raised
    except (AttributeError, OSError):  # pragma: no cover - an interpreter without the C API
        return lambda: 0


check_signals = _signal_check()


class Stalled(SimulationStalled):
    """The loop made no progress: `event` is what it ran last, (time, kind name, handler, args)."""

    def __init__(self, message: str, event: tuple):
        super().__init__(message)
        self.event = event


class EventLoop:
    __slots__ = ("now", "_heap", "_seq", "events", "_by_kind", "stall_events")

    def __init__(self) -> None:
        self.now = 0.0
        self.stall_events = STALL_EVENTS  # the watchdog's limit (run.py scales it to the workload)
        self._heap: list[tuple[float, int, int, Callable[..., Any], tuple]] = []
        self._seq = 0
        self.events = 0
        # events run per kind: a C array in the compiled build (engine.pxd), so counting is one
        # increment; assigned through a local, which Cython copies in (a `[0] * n` literal it refuses)
        by_kind = [0] * N_KINDS
        self._by_kind = by_kind

    def schedule(self, kind: int, t: float, handler: Callable[..., Any], *args: Any) -> None:
        """Run handler(*args) at simulated time t, as an event of `kind`."""
        if not 0 <= kind < N_KINDS:
            raise ValueError(f"unknown event kind {kind!r}")
        if t < self.now:
            t = self.now  # never schedule into the past (float rounding)
        heappush(self._heap, (t, self._seq, kind, handler, args))
        self._seq += 1

    def schedule_after(self, kind: int, delay: float, handler: Callable[..., Any], *args: Any) -> None:
        # schedule(kind, self.now + delay, ...) written out: called once or twice per simulated event
        if not 0 <= kind < N_KINDS:
            raise ValueError(f"unknown event kind {kind!r}")
        t = self.now + delay
        if t < self.now:
            t = self.now
        heappush(self._heap, (t, self._seq, kind, handler, args))
        self._seq += 1

    def at(self, t: float, handler: Callable[..., Any], *args: Any) -> None:
        """schedule() of an UNNAMED event (tests, tools)."""
        if t < self.now:
            t = self.now
        heappush(self._heap, (t, self._seq, UNNAMED, handler, args))
        self._seq += 1

    def after(self, delay: float, handler: Callable[..., Any], *args: Any) -> None:
        """schedule_after() of an UNNAMED event (tests, tools)."""
        t = self.now + delay
        if t < self.now:
            t = self.now
        heappush(self._heap, (t, self._seq, UNNAMED, handler, args))
        self._seq += 1

    def run(self, until: float = float("inf"), on_progress: Callable[[float], None] | None = None) -> None:
        heap = self._heap
        events = self.events  # counted in a local, stored back however the loop ends
        every = PROGRESS_EVERY
        last_t = self.now
        idle = 0  # events in a row at last_t that moved no request on (the watchdog)
        limit = self.stall_events
        try:
            while heap and heap[0][0] <= until:
                t, _, kind, handler, args = heappop(heap)
                self.now = t
                handler(*args)
                events += 1
                self._by_kind[kind] += 1
                if t > last_t or kind == ARRIVAL or kind == PREFILL_STEP or kind == DECODE_FINISH:
                    last_t = t
                    idle = 0
                else:
                    idle += 1
                    if idle > limit:
                        raise Stalled(f"{idle:,} events in a row at simulated time {t!r} ms (the last: "
                                      f"{KIND_NAMES[kind]}) and no request moved on", (t, KIND_NAMES[kind], handler, args))
                if not events % every:
                    check_signals()  # Ctrl-C, heard in the compiled build too
                    if on_progress is not None:
                        on_progress(t)
        finally:
            self.events = events

    def events_by_kind(self) -> dict[str, int]:
        """Events run per kind name, sorted by name: every simulator kind (0 if none), `unnamed`
        only when some ran. Sums to `events`."""
        counts = {KIND_NAMES[k]: self._by_kind[k] for k in range(N_KINDS)}
        if not counts["unnamed"]:
            del counts["unnamed"]
        return dict(sorted(counts.items()))
