# cython: annotation_typing=False
"""Simulated links, described by the same LinkProfile the netem package emulates.

Bandwidth is shared equally by the transfers in flight (processor sharing, as parallel TCP flows
roughly do), or with `sharing: fifo` given to one transfer at a time in order of sending (one
connection carrying them in turn, as NIXL over UCX TCP does between two engines). It is tracked
as virtual service S, the bytes each served transfer has received: a transfer that starts at S0
with B bytes ends when S reaches S0 + B, so start, finish and cancel are O(log n). Outages (heavy-tailed stalls) are a seeded schedule, fixed whatever the traffic,
during which nothing is served. After the last byte leaves, the data still needs the one-way
propagation delay plus a jitter sample. With `transfer_latency_ms` set, each transfer instead
takes the next replayed latency, whatever its size.
Packet loss is emulated by the live backends only; the simulator does not model it.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import deque
from math import ulp
from typing import Any, Callable

from netem.link_model import bytes_per_ms, effective_delay_ms, effective_rate_gbps, predict_transfer_ms
from netem.profile import LinkProfile
from netem.sampling import JitterSampler, OutageSchedule
from pddbench.sim.engine import LINK_DRAIN, UNNAMED, EventLoop


class Transfer:
    __slots__ = ("nbytes", "target", "start_ms", "arrival", "on_done", "args", "cancelled", "done", "queued")

    def __init__(self, nbytes: float, target: float, start_ms: float, arrival: int, on_done, args):
        self.nbytes, self.target, self.start_ms = nbytes, target, start_ms
        self.arrival = arrival  # the event kind of its arrival (engine.py): what it carries to whom
        self.on_done, self.args = on_done, args
        self.cancelled = False
        self.done = False
        self.queued = False  # still waiting for bandwidth (in the sharing heap)


class Link:
    def __init__(self, loop: EventLoop, profile: LinkProfile, name: str, lines: int = 1):
        self.loop, self.profile, self.name = loop, profile, name
        self.rate_gbps = effective_rate_gbps(profile, lines=lines)  # the real line: no rate_scale
        self.rate_bytes_per_ms = None if self.rate_gbps is None else bytes_per_ms(self.rate_gbps)
        self.delay_ms = effective_delay_ms(profile)
        self._jitter = JitterSampler(profile.jitter, random.Random(f"{profile.seed}:{name}"))
        self._schedule = OutageSchedule(profile.outages, random.Random(f"{profile.seed}:{name}:outages"))
        self._replay = itertools.cycle(profile.transfer_latency_ms) if profile.transfer_latency_ms else None
        self._heap: list[tuple[float, int, Transfer]] = []  # transfers being served
        self.fifo = profile.sharing == "fifo"
        self._waiting: deque[Transfer] = deque()  # fifo: sent, behind the one being served
        self._seq = 0
        self.active = 0
        self.service = 0.0
        self._last_ms = 0.0
        self._version = 0
        self._outage_idx = 0
        # No outage ever: up-time is plain elapsed time (the general walk below gives the same numbers).
        self._never_down = not profile.outages.windows_ms and profile.outages.rate_per_s <= 0
        self.bytes_sent = 0.0

    # -- outage schedule -------------------------------------------------------------------------
    def _outage(self, i: int) -> tuple[float, float] | None:
        return self._schedule.window(i)

    def _uptime(self, t0: float, t1: float) -> float:
        """Milliseconds in [t0, t1] with the link up."""
        if self._never_down:
            return t1 - t0
        up, i = t1 - t0, self._outage_idx
        while (o := self._outage(i)) is not None and o[0] < t1:
            up -= max(0.0, min(t1, o[1]) - max(t0, o[0]))
            i += 1
        return up

    def _time_after_uptime(self, t0: float, need: float) -> float:
        """The earliest t with `need` ms of up-time in [t0, t]."""
        if self._never_down:
            return t0 + need
        t, i = t0, self._outage_idx
        while True:
            o = self._outage(i)
            if o is None or t + need <= o[0]:
                return t + need
            if o[1] > t:
                need -= max(0.0, o[0] - t)
                t = o[1]
            i += 1

    def _skip_past_outages(self, t: float) -> None:
        while not self._never_down and (o := self._outage(self._outage_idx)) is not None and o[1] <= t:
            self._outage_idx += 1

    # -- processor sharing ----------------------------------------------------------------------
    def _advance(self) -> None:
        now = self.loop.now
        if self.active and self.rate_bytes_per_ms is not None:
            self.service += self._uptime(self._last_ms, now) * self.rate_bytes_per_ms / self.active
        self._last_ms = now
        self._skip_past_outages(now)

    def _reschedule(self) -> None:
        self._version += 1
        while self._heap and self._heap[0][2].cancelled:
            heapq.heappop(self._heap)
        if not self._heap:
            return
        need_bytes = max(0.0, self._heap[0][0] - self.service)
        up_ms = need_bytes * self.active / self.rate_bytes_per_ms  # type: ignore[operator]
        self.loop.schedule(LINK_DRAIN, self._time_after_uptime(self.loop.now, up_ms), self._on_link_drain, self._version)

    def _on_link_drain(self, version: int) -> None:
        if version != self._version:
            return
        self._advance()
        eps = 1e-6 * max(1.0, self.service)
        if self.active and self.rate_bytes_per_ms is not None:
            # A remainder the line serves in less than simulated time's resolution at now (one
            # ulp: tiny transfers late in a run, extreme rates) is served: its finish, now + its
            # time, rounds to now, so waiting for it would reschedule this drain at now for ever.
            eps = max(eps, ulp(self.loop.now) * self.rate_bytes_per_ms / self.active)
        while self._heap and (self._heap[0][2].cancelled or self._heap[0][0] <= self.service + eps):
            _, _, tr = heapq.heappop(self._heap)
            if tr.cancelled:
                continue
            self.active -= 1
            tr.queued = False
            self._deliver(tr)
        self._serve_next()
        self._reschedule()

    def _serve(self, tr: Transfer) -> None:
        tr.target = self.service + tr.nbytes
        heapq.heappush(self._heap, (tr.target, self._seq, tr))
        self._seq += 1
        self.active += 1

    def _serve_next(self) -> None:
        """fifo: the next waiting transfer gets the line once it is free."""
        while self.fifo and not self.active and self._waiting:
            tr = self._waiting.popleft()
            if not tr.cancelled:
                self._serve(tr)

    def _deliver(self, tr: Transfer) -> None:
        self.bytes_sent += tr.nbytes
        self.loop.schedule_after(tr.arrival, self.delay_ms + self._jitter_ms(), self._arrive, tr)

    def _arrive(self, tr: Transfer) -> None:
        if not tr.cancelled:
            tr.done = True
            tr.on_done(*tr.args)

    def _jitter_ms(self) -> float:
        return max(-self.delay_ms, self._jitter.sample_ms())

    # -- API ------------------------------------------------------------------------------------
    def send(self, nbytes: float, on_done: Callable[..., Any], *args: Any) -> Transfer:
        """send_as() with an UNNAMED arrival (tests, tools)."""
        return self.send_as(UNNAMED, nbytes, on_done, *args)

    def send_as(self, arrival: int, nbytes: float, on_done: Callable[..., Any], *args: Any) -> Transfer:
        """Start a transfer; on_done(*args) runs when the last byte has arrived, as an event of
        kind `arrival` (engine.py: what the transfer carries to whom, e.g. KV_ARRIVED, HANDOFF)."""
        now = self.loop.now
        tr = Transfer(nbytes, 0.0, now, arrival, on_done, args)
        if self._replay is not None:
            self.bytes_sent += nbytes
            self.loop.schedule_after(arrival, next(self._replay), self._arrive, tr)
            return tr
        if nbytes <= 0 or self.rate_bytes_per_ms is None:
            self._deliver(tr)
            return tr
        self._advance()
        tr.queued = True
        if self.fifo and self.active:
            self._waiting.append(tr)
        else:
            self._serve(tr)
        self._reschedule()
        return tr

    def cancel(self, tr: Transfer) -> float:
        """Abort a transfer; returns the bytes that were not sent."""
        if tr.done or tr.cancelled:
            return 0.0
        tr.cancelled = True
        if not tr.queued:
            return 0.0  # already on the wire: only its delivery is dropped
        tr.queued = False
        if self.fifo and tr in self._waiting:
            self._waiting.remove(tr)
            return tr.nbytes  # never started
        self._advance()
        self.active -= 1
        left = max(0.0, tr.target - self.service)
        self._serve_next()
        self._reschedule()
        return left

    def predict_ms(self, nbytes: float) -> float:
        """What a transfer of nbytes started now would take if nothing else changes."""
        if self._replay is not None:
            return float(self.profile.transfer_latency_ms[0])
        backlog_ms = 0.0
        if self.fifo and self.rate_bytes_per_ms is not None:  # behind everything already sent
            self._advance()
            backlog = sum(max(0.0, t.target - self.service) for _, _, t in self._heap if not t.cancelled)
            backlog += sum(t.nbytes for t in self._waiting if not t.cancelled)
            backlog_ms = backlog / self.rate_bytes_per_ms
        return predict_transfer_ms(nbytes, rate_gbps=self.rate_gbps, delay_ms=self.delay_ms,
                                   sharing=self.profile.sharing, in_flight=self.active, backlog_ms=backlog_ms)
