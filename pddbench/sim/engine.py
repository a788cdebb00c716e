"""The event loop: a heap of (time, seq, handler, args); handlers schedule further events.

Simulated time only: nothing here reads a clock. `seq` breaks ties in insertion order, so the
same inputs always replay in the same order (determinism byte for byte).
"""

from __future__ import annotations

from heapq import heappop, heappush
from typing import Any, Callable

PROGRESS_EVERY = 0x4000  # events between two on_progress calls


class EventLoop:
    __slots__ = ("now", "_heap", "_seq", "events")

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, Callable[..., Any], tuple]] = []
        self._seq = 0
        self.events = 0

    def at(self, t: float, handler: Callable[..., Any], *args: Any) -> None:
        if t < self.now:
            t = self.now  # never schedule into the past (float rounding)
        heappush(self._heap, (t, self._seq, handler, args))
        self._seq += 1

    def after(self, delay: float, handler: Callable[..., Any], *args: Any) -> None:
        # at(self.now + delay, ...) written out: this is called once or twice per simulated event
        t = self.now + delay
        if t < self.now:
            t = self.now
        heappush(self._heap, (t, self._seq, handler, args))
        self._seq += 1

    def run(self, until: float = float("inf"), on_progress: Callable[[float], None] | None = None) -> None:
        heap = self._heap
        events = self.events  # counted in a local, stored back however the loop ends
        try:
            while heap and heap[0][0] <= until:
                t, _, handler, args = heappop(heap)
                self.now = t
                handler(*args)
                events += 1
                if on_progress is not None and not events % PROGRESS_EVERY:
                    on_progress(t)
        finally:
            self.events = events
