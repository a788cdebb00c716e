# cython: annotation_typing=False
"""Prefill instance: FCFS chunked prefill with a prefix cache.

Each step computes up to `chunk_tokens` new tokens. A request's last, partial chunk (its "tail
chunk", small when most of the prompt was cached) runs as its own step unless
`pack_tail_chunks` lets it share the step with the next requests' chunks; a lone small step still
reads all the weights, which is what makes the article's throughput dips near 20%/40% hit.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable

from pddbench.cache import PrefixCache
from pddbench.sim.engine import PREFILL_STEP, EventLoop
from pddbench.sim.latency import LatencyModel


class PrefillJob:
    __slots__ = ("req", "remaining", "context", "on_done", "on_start")

    def __init__(self, req: Any, computed: int, cached: int, on_done: Callable[[Any], None],
                 on_start: Callable[[Any], None] | None = None):
        self.req, self.remaining, self.context, self.on_done = req, computed, cached, on_done
        self.on_start = on_start


class PrefillInstance:
    def __init__(self, loop: EventLoop, name: str, latency: LatencyModel, chunk_tokens: int,
                 cache: PrefixCache | None, block_size: int, pack_tail_chunks: bool = False):
        self.loop, self.name, self.latency = loop, name, latency
        self.chunk_tokens, self.cache, self.block_size = chunk_tokens, cache, block_size
        self.pack_tail_chunks = pack_tail_chunks
        self.queue: deque[PrefillJob] = deque()
        self.queued_tokens = 0
        self.busy = False
        self.busy_ms = 0.0
        self.steps = 0

    def match_tokens(self, hash_ids: list[int], input_tokens: int) -> int:
        if self.cache is None:
            return 0
        return min(self.cache.match(hash_ids) * self.block_size, input_tokens)

    def submit(self, req: Any, on_done: Callable[[Any], None], hit_blocks: int | None = None,
               on_start: Callable[[Any], None] | None = None) -> int:
        """Queue a prefill; returns the prompt tokens served from this instance's prefix cache.
        `hit_blocks`: this cache's match() of the request, when the caller has just made it;
        `on_start(req)` runs when its first chunk starts (a KV streamed layer by layer leaves then)."""
        cached = 0
        if self.cache is not None:
            if hit_blocks is None:
                hit_blocks = self.cache.access(req.hash_ids)
            else:  # access() without redoing the match: the cache has not changed since
                self.cache.insert(req.hash_ids, hit_blocks)
            cached = min(hit_blocks * self.block_size, req.input_tokens)
        computed = max(1, req.input_tokens - cached)  # the last prompt token is always computed
        self.submit_recompute(req, computed, on_done, on_start)
        return req.input_tokens - computed

    def submit_recompute(self, req: Any, computed: int, on_done: Callable[[Any], None],
                         on_start: Callable[[Any], None] | None = None) -> None:
        """Queue a prefill of the prompt's last `computed` tokens, the rest being a prefix hit
        (submit's own queueing; also a second request for a prompt just prefilled, for which the
        cache is not touched)."""
        self.queue.append(PrefillJob(req, computed, req.input_tokens - computed, on_done, on_start))
        self.queued_tokens += computed
        if not self.busy:
            self._step()

    def _step(self) -> None:
        if not self.queue:
            self.busy = False
            return
        self.busy = True
        budget, tokens, attn, pieces = self.chunk_tokens, 0, 0.0, []
        for job in self.queue:
            take = min(job.remaining, budget)
            is_tail = take == job.remaining and take < self.chunk_tokens
            if pieces and is_tail and not self.pack_tail_chunks:
                break  # a tail chunk does not join another request's step
            if job.req.prefill_start_ms < 0:
                job.req.prefill_start_ms = self.loop.now
                if job.on_start is not None:
                    job.on_start(job.req)
            pieces.append((job, take))
            tokens += take
            attn += take * (job.context + take / 2)
            budget -= take
            if budget <= 0 or (is_tail and not self.pack_tail_chunks):
                break
        step_ms = self.latency.prefill_ms(tokens, attn)
        self.steps += 1
        self.busy_ms += step_ms
        self.loop.schedule_after(PREFILL_STEP, step_ms, self._on_prefill_step, pieces)

    def _on_prefill_step(self, pieces: list[tuple[PrefillJob, int]]) -> None:
        for job, take in pieces:
            job.remaining -= take
            job.context += take
            self.queued_tokens -= take
        while self.queue and self.queue[0].remaining == 0:
            job = self.queue.popleft()
            job.on_done(job.req)
        self._step()
