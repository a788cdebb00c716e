# cython: annotation_typing=False
"""Decode instance (D, RLD or MD): continuous batching with KV-capacity admission.

Simulated per epoch, not per token: between two batch changes every step takes the same time,
so the instance keeps (t0, s0, step_ms) and a job's k-th token is the end of step
start_step + k - 1. Only admissions, removals and completions are events, which keeps a
100,000-request run in seconds. The step time is recomputed at each batch change from the batch
size and the KV it reads (KV growth inside an epoch is ignored). An Extend-Decode Handoff
admission pauses the batch for the extra compute of its extend tokens.
"""

from __future__ import annotations

import bisect
import heapq
from collections import deque
from typing import Any, Callable

from pddbench.cache import PrefixCache
from pddbench.sim.engine import DECODE_FINISH, EventLoop
from pddbench.sim.latency import LatencyModel


class DecodeJob:
    __slots__ = ("req", "context", "n_tokens", "extend", "start_step", "finish_step",
                 "first_token_ms", "on_first", "on_finish", "stopped", "reserved")

    def __init__(self, req: Any, context: int, n_tokens: int, extend: int,
                 on_first: Callable[["DecodeJob"], None] | None, on_finish: Callable[["DecodeJob", float], None]):
        self.req, self.context, self.n_tokens, self.extend = req, context, n_tokens, extend
        self.on_first, self.on_finish = on_first, on_finish
        self.start_step = self.finish_step = -1
        self.first_token_ms = -1.0
        self.stopped = False
        self.reserved = context + extend + n_tokens


class CoreShare:
    """Decode instances on one compute core. A member is busy while it runs a batch or receives a
    KV pull (vLLM's engine loop polls the transfer on its core; live, a relay decoded ~3x slower
    while MD on its core pulled a prompt over the WAN). With k busy, a busy member's step takes
    1 + (step_factor - 1)(k - 1) times its own: step_factor 2 is fair time-slicing between two.
    A change in k re-times the others' steps from the end of the step each is in (a step under
    way keeps its pace)."""
    __slots__ = ("members", "step_factor")

    def __init__(self, step_factor: float) -> None:
        self.members: list["DecodeInstance"] = []
        self.step_factor = step_factor

    def busy(self) -> int:
        return sum(1 for m in self.members if m.busy_on_core())

    def slowdown(self, member: "DecodeInstance") -> float:
        """How many times longer `member`'s steps take, counting it as busy."""
        k = self.busy() + (0 if member.busy_on_core() else 1)
        return 1.0 + (self.step_factor - 1.0) * (k - 1)

    def changed(self, by: "DecodeInstance") -> None:
        for m in self.members:
            if m is not by and m.running:
                m._change()


class DecodeInstance:
    def __init__(self, loop: EventLoop, name: str, latency: LatencyModel, kv_capacity_tokens: int,
                 max_batch: int, cache: PrefixCache | None, block_size: int):
        self.loop, self.name, self.latency = loop, name, latency
        self.kv_capacity_tokens, self.max_batch = kv_capacity_tokens, max_batch
        self.cache, self.block_size = cache, block_size
        self.waiting: deque[DecodeJob] = deque()
        self.running: set[DecodeJob] = set()
        self.load = 0  # len(running) + len(waiting), kept as a number: routing reads it per request
        self._finish_heap: list[tuple[int, int, DecodeJob]] = []
        self._awaiting_first: list[DecodeJob] = []
        self._seq = 0
        self.kv_used = 0
        self._sum_context = 0
        self._sum_start = 0
        # epoch
        self.t0, self.s0, self.step_ms = 0.0, 0, 1.0
        self._version = 0
        # suffix-max stack of step gaps: (epoch start step, gap ms), gaps strictly decreasing
        self._gap_steps: list[int] = []
        self._gap_ms: list[float] = []
        self.busy_ms = 0.0
        self._busy_since: float | None = None
        self.peak_batch = 0
        self.core: CoreShare | None = None  # set by the cluster when the instance shares a core
        self.receiving = 0  # KV pulls into this instance under way (counted on a shared core only)

    # -- observable state (for routing and policy) ------------------------------------------------
    def utilisation(self) -> float:
        return min(1.0, len(self.running) / self.max_batch)

    def pressure(self) -> float:
        """How full the instance is, 0..1, counting queued jobs: sequences (running and waiting)
        against the batch limit, or KV held against capacity, whichever is fuller."""
        return min(1.0, max(self.load / self.max_batch, self.kv_used / self.kv_capacity_tokens))

    def match_tokens(self, hash_ids: list[int], input_tokens: int) -> int:
        if self.cache is None:
            return 0
        return min(self.cache.match(hash_ids) * self.block_size, input_tokens)

    # -- epoch arithmetic -----------------------------------------------------------------------
    def _step_end_ms(self, step: int) -> float:
        return self.t0 + (step - self.s0 + 1) * self.step_ms

    def _boundary(self) -> tuple[float, int]:
        """When, and at which step, the batch can next change: now if a step just ended, else
        the end of the step in progress (changes take effect between steps)."""
        now = self.loop.now
        if not self.running or now <= self.t0:
            return max(now, self.t0) if self.running else now, self.s0
        x = (now - self.t0) / self.step_ms
        c = int(x + 1e-9)
        if x - c <= 1e-9:
            return self.t0 + c * self.step_ms, self.s0 + c
        return self.t0 + (c + 1) * self.step_ms, self.s0 + c + 1

    def _share(self) -> float:
        """How many times longer this instance's steps take on its shared core (1 alone)."""
        if self.core is None:
            return 1
        return self.core.slowdown(self)

    def busy_on_core(self) -> bool:
        """Running a batch or receiving a KV pull: either takes a shared core's time."""
        return bool(self.running) or self.receiving > 0

    def pull_started(self) -> None:
        """A KV pull into this instance began (it is busy on a shared core until pull_ended)."""
        self._count_pulls(+1)

    def pull_ended(self) -> None:
        self._count_pulls(-1)

    def _count_pulls(self, change: int) -> None:
        was_busy = self.busy_on_core()
        self.receiving += change
        if self.core is not None and self.busy_on_core() != was_busy:
            self.core.changed(self)

    def next_step_end_ms(self) -> float:
        """When the instance's scheduler next runs: now if it is idle or between steps, else the
        end of the step in progress."""
        return self._boundary()[0]

    def _sync(self) -> tuple[float, int, list[tuple[DecodeJob, float]]]:
        """Settle everything that happens on the current grid before the boundary: first tokens
        and completions (released now, reported by the caller after the new epoch is set)."""
        t_b, s_b = self._boundary()
        t0, s0, step_ms = self.t0, self.s0, self.step_ms  # the grid: step k ends at _step_end_ms(k)
        if self._awaiting_first:
            keep = []
            for job in self._awaiting_first:
                if job.stopped:
                    continue
                if job.start_step < s_b:
                    job.first_token_ms = t0 + (job.start_step - s0 + 1) * step_ms
                    if job.on_first is not None:
                        job.on_first(job)
                else:
                    keep.append(job)
            self._awaiting_first = keep
        finished = []
        heap = self._finish_heap
        while heap and heap[0][0] < s_b:
            job = heapq.heappop(heap)[2]
            if job.stopped:
                continue
            finished.append((job, t0 + (job.finish_step - s0 + 1) * step_ms))
            job.stopped = True
            self._release(job)
        return t_b, s_b, finished

    def _new_epoch(self, t_b: float, s_b: int, pause_ms: float = 0.0) -> None:
        n = len(self.running)
        was_busy = self._busy_since is not None
        if n:
            kv = self._sum_context + n * s_b - self._sum_start
            self.step_ms = self.latency.decode_ms(n, kv)
            if self.core is not None:
                self.step_ms *= self._share()
            self._push_gap(s_b, self.step_ms + pause_ms)
            if self._busy_since is None:
                self._busy_since = t_b
        elif self._busy_since is not None:
            self.busy_ms += t_b - self._busy_since
            self._busy_since = None
        self.t0, self.s0 = t_b + pause_ms, s_b
        self._version += 1
        while self._finish_heap and self._finish_heap[0][2].stopped:
            heapq.heappop(self._finish_heap)  # stopped (handed-off) jobs never finish here
        if self._finish_heap:
            self.loop.schedule(DECODE_FINISH, self._step_end_ms(self._finish_heap[0][0]), self._on_decode_finish,
                               self._version)
        if self.core is not None and was_busy != bool(n) and not self.receiving:
            self.core.changed(self)  # last: this instance is consistent if a sharer's change calls back

    def _push_gap(self, step: int, gap: float) -> None:
        while self._gap_ms and self._gap_ms[-1] <= gap:
            self._gap_ms.pop()
            self._gap_steps.pop()
        self._gap_steps.append(step)
        self._gap_ms.append(gap)
        if len(self._gap_steps) > 4096 and self.running:
            oldest = min([j.start_step for j in self.running])
            cut = bisect.bisect_left(self._gap_steps, oldest)
            del self._gap_steps[:cut], self._gap_ms[:cut]

    def max_gap_since(self, step: int) -> float:
        """The largest inter-token gap of the steps from `step` on (a job's max ITL)."""
        i = bisect.bisect_left(self._gap_steps, step + 1)
        return self._gap_ms[i] if i < len(self._gap_ms) else self.step_ms

    def produced_by_now(self, job: DecodeJob) -> int:
        """Tokens the job has produced by now (steps fully completed)."""
        if job.start_step < 0:
            return 0
        now = self.loop.now
        last = self.s0 - 1 if now < self.t0 else self.s0 - 1 + int((now - self.t0) / self.step_ms + 1e-9)
        return max(0, min(job.n_tokens, last - job.start_step + 1))

    def extend_pause(self, tokens: int) -> float:
        """Recompute `tokens` handed-over tokens in one pass (Catch-Up batch): the running batch
        pauses for the extra compute. Returns the pause in ms."""
        n = max(1, len(self.running))
        kv = self._sum_context
        pause = (self.latency.decode_ms(n, kv, tokens) - self.latency.decode_ms(n, kv)) * self._share()
        if not self.running:
            return pause + self.latency.decode_ms(1, 0) * self._share()
        t_b, s_b, finished = self._sync()
        self._new_epoch(t_b, s_b, pause)
        for job, t in finished:
            job.on_finish(job, t)
        return (t_b - self.loop.now) + pause

    # -- changes --------------------------------------------------------------------------------
    def submit(self, job: DecodeJob) -> None:
        self.waiting.append(job)
        self.load += 1
        if self._can_admit():
            self._change()

    def _can_admit(self) -> bool:
        return bool(self.waiting) and len(self.running) < self.max_batch and (
            self.kv_used + self.waiting[0].reserved <= self.kv_capacity_tokens)

    def _change(self, stop: DecodeJob | None = None) -> tuple[float, int]:
        t_b, s_b, finished = self._sync()
        if stop is not None and not stop.stopped:
            stop.stopped = True
            self._release(stop)
        pause, extend, n_admitted = 0.0, 0, 0
        while self._can_admit():
            job = self.waiting.popleft()
            self.kv_used += job.reserved
            job.start_step = s_b
            job.finish_step = s_b + job.n_tokens - 1
            self.running.add(job)
            self._sum_context += job.context + job.extend
            self._sum_start += s_b
            heapq.heappush(self._finish_heap, (job.finish_step, self._seq, job))
            self._seq += 1
            self._awaiting_first.append(job)
            if self.cache is not None:
                # The decode-side radix cache (DRC) holds the prompt's blocks from admission on:
                # the KV has arrived and is held, so a concurrent request sharing the prefix
                # hits it instead of shipping it again (inserting only at finish would not).
                self.cache.insert(job.req.hash_ids)
            extend += job.extend
            n_admitted += 1
        if extend:
            n, kv = len(self.running), self._sum_context
            pause = (self.latency.decode_ms(n, kv, extend) - self.latency.decode_ms(n, kv)) * self._share()
        self.peak_batch = max(self.peak_batch, len(self.running))
        self._new_epoch(t_b, s_b, pause)
        for job, t in finished:
            job.on_finish(job, t)
        return t_b, s_b

    def _release(self, job: DecodeJob) -> None:
        self.running.discard(job)
        self.load -= 1
        self.kv_used -= job.reserved
        self._sum_context -= job.context + job.extend
        self._sum_start -= job.start_step
        if self.cache is not None:
            self.cache.insert(job.req.hash_ids)  # last use: refresh the prompt's recency

    def _on_decode_finish(self, version: int) -> None:
        if version == self._version:
            self._change()

    def stop(self, job: DecodeJob) -> tuple[int, float]:
        """Stop a job after the step in progress (handoff or abort). Returns the tokens it
        produced and when the last of them came out (when it was stopped, if none)."""
        if job.stopped:
            return job.n_tokens, self.loop.now
        if job.start_step < 0:  # still waiting for admission
            self.waiting.remove(job)
            self.load -= 1
            job.stopped = True
            return 0, self.loop.now
        t_b, s_b = self._change(stop=job)
        produced = max(0, min(job.n_tokens, s_b - job.start_step))
        return produced, t_b if produced else self.loop.now
