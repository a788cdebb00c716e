"""The PDD request flow on real engines: prefill on P, the pipeline choice, the relay path and
the Extend-Decode handoff to MD. The decisions are the simulator's (pddbench/policy/pdd.py)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from dataclasses import dataclass

import aiohttp

from pddbench.cache import PrefixCache
from pddbench.live.kv_requests import one_token_body, remote_decode_prefill_body
from pddbench.live.router.config import RouterConfig, Trip
from pddbench.live.router.stream import Stream, post_json
from pddbench.live.router.wan import WanBook
from pddbench.policy import pdd as policy


def block_hashes(tokens: list[int], block_size: int) -> list[int]:
    """Chained hashes of the full blocks, as an engine's prefix cache keys them."""
    out, h = [], hashlib.blake2b(digest_size=8)
    for i in range(len(tokens) // block_size):
        h.update(json.dumps(tokens[i * block_size:(i + 1) * block_size]).encode())
        out.append(int.from_bytes(h.copy().digest(), "little"))
    return out


@dataclass
class Job:
    """One request in flight: the client's body, what the router derived from it, where its
    tokens go and its account."""
    body: dict                 # the client's request
    up: dict                   # the streaming body sent to the decoders
    n_out: int
    hashes: list[int]          # full prompt blocks, as MD's prefix cache keys them
    uncached: int              # prompt tokens MD does not hold
    wan_bytes: int             # KV a WAN transfer to MD moves
    kv: dict                   # kv_transfer_params of P's first prefill
    sink: asyncio.Queue
    trip: Trip

    @property
    def prompt(self) -> list[int]:
        return self.body["prompt"]


class Router:
    def __init__(self, cfg: RouterConfig):
        self.cfg, self.pol = cfg, cfg.policy
        self.md_cache = PrefixCache(cfg.md_cache_blocks)
        self.relay_inflight = 0
        self.wan = WanBook(cfg.wan)
        self.draining: set[asyncio.Task] = set()  # MD pulls left to finish after their relay did
        self.session: aiohttp.ClientSession | None = None

    def kv_bytes_for_tokens(self, tokens: int) -> int:
        return policy.kv_transfer_bytes(tokens, self.cfg.kv_bytes_per_token, self.cfg.kv_block_tokens)

    async def prefill(self, body: dict) -> tuple[dict, int]:
        res = await post_json(self.session, self.cfg.prefill, remote_decode_prefill_body(body))
        details = (res.get("usage") or {}).get("prompt_tokens_details") or {}
        return res["kv_transfer_params"], int(details.get("cached_tokens") or 0)

    async def warm_up(self, model: str) -> None:
        """One request down each KV path before serving: NIXL's first handshake between two
        engines takes seconds and must not land in a measured request."""
        body = {"model": model, "prompt": list(range(16, 16 + 3 * self.cfg.kv_block_tokens // 2)), "max_tokens": 2,
                "temperature": 0.0, "ignore_eos": True}
        for pipeline in ("p_md", "p_rld_md"):
            await self.serve(body, asyncio.Queue(), Trip(), force_pipeline=pipeline)

    async def serve(self, body: dict, sink: asyncio.Queue, trip: Trip, force_pipeline: str | None = None) -> None:
        """Produce the request's tokens into `sink` as (source, ids, text, finish_reason)."""
        cfg, prompt = self.cfg, body["prompt"]
        up = {**body, "stream": True, "return_token_ids": True, "stream_options": {"include_usage": True}}
        up.pop("pdd", None)
        t0 = time.monotonic()
        kv, trip.p_cached_tokens = await self.prefill(body)
        trip.prefill_ms = (time.monotonic() - t0) * 1000
        # Decided once P has the KV, as the simulator does: the line may be busier by then than
        # when the request arrived (P queues prefills).
        hashes = block_hashes(prompt, cfg.kv_block_tokens)
        trip.decode_cached_tokens = min(len(prompt), self.md_cache.match(hashes) * cfg.kv_block_tokens)
        uncached = len(prompt) - trip.decode_cached_tokens
        job = Job(body, up, int(body.get("max_tokens") or 16), hashes, uncached, self.kv_bytes_for_tokens(uncached),
                  kv, sink, trip)
        trip.pipeline = force_pipeline or policy.choose_pipeline(
            predicted_wan_kv_ms=self.wan.predict_ms(job.wan_bytes), ttft_sla_ms=cfg.ttft_sla_ms,
            budget_fraction=self.pol.relay_ttft_budget_fraction, relay_only_ablation=self.pol.relay_only_pipeline,
            relay_utilisation=self.relay_inflight / self.cfg.relay_slots, relay_busy_fraction=self.pol.relay_busy_fraction)
        if trip.pipeline == "p_md":
            await self._direct(job)
        else:
            await self._relay_path(job)

    async def _direct(self, job: Job) -> None:
        """P -> MD: MD pulls the KV over the WAN and decodes everything."""
        job.trip.wan_kv_bytes = job.wan_bytes
        self.wan.book(job.wan_bytes)
        try:
            md = Stream(self.session, self.cfg.main, {**job.up, "kv_transfer_params": job.kv}, job.sink, "main")
            await md.task
        finally:
            self.wan.release()
        self.md_cache.insert(job.hashes)
        job.trip.main_tokens = len(md.tokens)

    async def _relay_path(self, job: Job) -> None:
        """P -> RLD (-> MD): the relay decodes at once; MD takes over when its KV has arrived."""
        trip = job.trip
        trip.rdma_kv_bytes = self.kv_bytes_for_tokens(len(job.prompt))  # no cache on RLD
        trip.singular_flow = trip.pipeline == "p_rld_md" and self.pol.singular_filter and policy.is_singular_flow(
            input_tokens=len(job.prompt), uncached_tokens=job.uncached, max_output_tokens=job.n_out,
            min_input_tokens=self.pol.singular_min_input_tokens, max_output=self.pol.singular_max_output_tokens)
        if trip.pipeline == "p_rld" or trip.singular_flow:
            trip.decode_cached_tokens = 0  # MD takes no part
        if trip.singular_flow:
            trip.abort("singular_flow", saved_bytes=job.wan_bytes)  # the transfer is never started
        relay_t0 = time.monotonic()
        self.relay_inflight += 1
        relay = Stream(self.session, self.cfg.relay, {**job.up, "kv_transfer_params": job.kv}, job.sink, "relay")
        try:
            if trip.pipeline == "p_rld" or trip.singular_flow:
                await self._end_on_relay(job, relay)
            else:
                await self._dual(job, relay)
        finally:
            if not relay.task.done():
                await relay.cut()
            self.relay_inflight -= 1
            trip.relay_busy_ms = (time.monotonic() - relay_t0) * 1000

    async def _end_on_relay(self, job: Job, relay: Stream) -> None:
        await relay.task
        job.trip.relay_tokens = len(relay.tokens)
        job.trip.handoff_mode = "none" if job.trip.pipeline == "p_rld" else "relay_finish"

    async def _dual(self, job: Job, relay: Stream) -> None:
        """MD pulls its own lease on the prompt KV (a second prefill on P, a prefix-cache hit
        there) while the relay decodes; the first to finish decides what follows."""
        trip = job.trip
        kv2, _ = await self.prefill(job.body)
        trip.wan_kv_bytes = job.wan_bytes
        pull_t0 = time.monotonic()
        self.wan.book(job.wan_bytes)
        pull = asyncio.create_task(post_json(self.session, self.cfg.main, one_token_body(job.body, kv_transfer_params=kv2)))
        pull.add_done_callback(lambda _t: self.wan.release())
        try:
            await asyncio.wait({relay.task, pull}, return_when=asyncio.FIRST_COMPLETED)
            if not pull.done():  # the relay finished first: MD's transfer is not needed any more
                if self.pol.relay_finish_stops_wan_kv:
                    pull.cancel()  # the engine's read goes on: its bytes still cross (saved 0)
                    trip.abort("relay_finish")
                else:
                    self._drain(pull, job.hashes)
                return await self._end_on_relay(job, relay)
            if pull.exception() is not None:
                # MD could not take the KV (e.g. a NIXL handshake or transfer failure): the relay
                # has everything it needs, so it finishes the request and the user sees no error.
                trip.abort("md_error")
                trip.md_error = str(pull.exception())[:200]
                return await self._end_on_relay(job, relay)
            trip.wan_kv_ms = (time.monotonic() - pull_t0) * 1000
            self.md_cache.insert(job.hashes)
            while len(relay.tokens) < self.cfg.min_relay_tokens and not relay.task.done():
                await asyncio.sleep(0.002)
            if relay.task.done():
                return await self._end_on_relay(job, relay)
            await self._handoff(job, relay)
        finally:
            if not pull.done() and pull not in self.draining:
                pull.cancel()

    def _drain(self, pull: asyncio.Task, hashes: list[int]) -> None:
        """Let MD's pull finish in the background; MD then holds the prompt in its prefix cache."""
        def done(t: asyncio.Task) -> None:
            self.draining.discard(t)
            if not t.cancelled() and t.exception() is None:
                self.md_cache.insert(hashes)
        self.draining.add(pull)
        pull.add_done_callback(done)

    async def _handoff(self, job: Job, relay: Stream) -> None:
        """Extend-Decode handoff: MD recomputes the eager tokens (after Catch-Up, only the tail)
        and decodes the rest; the client stream continues from MD at the last token forwarded."""
        trip, pol = job.trip, self.pol
        trip.handoff_mode = policy.choose_handoff_mode(
            configured=pol.handoff_mode, pending_tokens=len(relay.tokens), threshold_tokens=pol.catch_up_threshold_tokens,
            relay_utilisation=self.relay_inflight / self.cfg.relay_slots, relay_busy_fraction=pol.relay_busy_fraction)
        t0 = time.monotonic()
        handed = await self._catch_up(job, relay) if trip.handoff_mode == "catch_up" else 0
        # The relay may finish during the handoff: then MD has nothing left to do and the request
        # ended on the relay, labelled as the simulator labels it (catch_up_rounds keeps the try).
        if relay.task.done():
            return await self._end_on_relay(job, relay)
        await relay.cut()
        eager = list(relay.tokens)
        trip.relay_tokens = len(eager)
        remaining = job.n_out - len(eager)
        if remaining <= 0 or relay.finish_reason:
            trip.handoff_mode = "relay_finish"
            return
        trip.wan_token_id_bytes += policy.handoff_message_bytes(len(eager) - handed)
        await self._switch_to_md(job, eager, remaining, t0)

    async def _catch_up(self, job: Job, relay: Stream) -> int:
        """MD replays the relay's tokens in one-token extend requests while the relay decodes;
        returns how many it has."""
        trip, pol, handed = job.trip, self.pol, 0
        while not relay.task.done():
            pending = len(relay.tokens) - handed
            if policy.catch_up_finished(pending_tokens=pending, batch_tokens=pol.catch_up_batch_tokens,
                                        rounds=trip.catch_up_rounds, max_rounds=pol.catch_up_max_rounds):
                break
            upto = len(relay.tokens)
            trip.wan_token_id_bytes += policy.handoff_message_bytes(upto - handed)
            await post_json(self.session, self.cfg.main, one_token_body(job.up, prompt=job.prompt + relay.tokens[:upto]))
            handed, trip.catch_up_rounds = upto, trip.catch_up_rounds + 1
        return handed

    async def _switch_to_md(self, job: Job, eager: list[int], remaining: int, t0: float) -> None:
        body = {**job.up, "prompt": job.prompt + eager, "max_tokens": remaining}
        if body.get("min_tokens"):
            body["min_tokens"] = max(0, int(body["min_tokens"]) - len(eager))
        first = asyncio.Event()
        md_sink: asyncio.Queue = asyncio.Queue()
        md = Stream(self.session, self.cfg.main, body, md_sink, "main")

        async def forward() -> None:
            while True:
                item = await md_sink.get()
                if item[1] and not first.is_set():
                    job.trip.handoff_ms = (time.monotonic() - t0) * 1000
                    first.set()
                job.sink.put_nowait(item)
        fwd = asyncio.create_task(forward())
        try:
            await md.task
            while not md_sink.empty():
                await asyncio.sleep(0)
        finally:
            fwd.cancel()
        job.trip.main_tokens = len(md.tokens)
