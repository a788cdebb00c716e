"""The PDD router on real vLLM engines: an OpenAI-compatible /v1/completions front serving each
request with P and RLD (datacenter A) and MD (datacenter B, across the WAN), using the same
policy functions as the simulator (pddbench/policy/pdd.py).

Design (no engine patch; vLLM's NixlConnector pull path and its prefix cache):
- P prefills with `do_remote_decode`; the decoder named in the returned kv_transfer_params pulls
  the prompt KV. NIXL frees P's blocks after the *first* consumer's read notification, so the
  dual path asks P twice: the second request is a prefix-cache hit on P (only the last partial
  block is recomputed) and gives MD its own lease on the same KV.
- RLD decodes from the first lease at once; its tokens stream to the client (eager tokens).
- MD pulls the prompt KV over the WAN with a one-token request; vLLM caches the pulled full
  blocks in MD's prefix cache (the "KV has arrived" moment).
- Extend-Decode Handoff: the router stops reading RLD (closing the stream aborts the request
  there) and sends MD prompt + the eager token ids as a normal request: the prompt part is a
  prefix-cache hit, the eager tokens are recomputed in one extend step, and MD decodes the rest.
  The client stream continues from MD; the cut is the last token forwarded, so nothing is
  duplicated or lost.
- Catch-Up: while RLD keeps decoding, MD replays the tokens produced so far in one-token extend
  requests (each caches their full blocks), so the final switch recomputes only a short tail.
- Singular flows (and requests whose relay finishes first) never start or abort MD's transfer.

Every response ends with a usage chunk that carries a `pdd` object (pipeline, handoff mode,
tokens per decoder, timings, bytes per link), which the replay client copies into the records.
Binds to loopback or a project namespace address only.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import time
import uuid
from dataclasses import dataclass

import aiohttp
from aiohttp import web

from pddbench.cache.prefix_cache import PrefixCache
from pddbench.live.kv_requests import one_token_body, remote_decode_prefill_body
from pddbench.live.sse import DONE, SSEParser
from pddbench.live.upstream import engine_session, post
from pddbench.policy import pdd as policy


@dataclass
class RouterConfig:
    prefill: str
    relay: str
    main: str
    kv_bytes_per_token: int
    block_size: int                   # engine KV block: prefix-cache granularity on MD
    wan_rate_gbps: float | None       # what the router assumes of the WAN, for its prediction
    wan_delay_ms: float
    ttft_sla_ms: float
    wan_sharing: str = "fair"         # the WAN profile's `sharing`: how pulls in flight share the rate
    handoff_mode: str = "adaptive"
    catch_up_threshold_tokens: int = 64
    catch_up_batch_tokens: int = 32
    catch_up_max_rounds: int = 8
    relay_busy_fraction: float = 0.8
    relay_slots: int = 8              # concurrent relay requests that count as a fully busy relay
    relay_ttft_budget_fraction: float = 0.1
    singular_filter: bool = True
    singular_min_input_tokens: int = 32768
    singular_max_output_tokens: int = 16
    relay_only_pipeline: bool = False
    relay_finish_stops_wan_kv: bool = True  # false: MD's pull drains (vLLM cannot stop it) and MD keeps the prompt
    min_relay_tokens: int = 0         # start a handoff no earlier: lets loopback tests exercise it
    md_cache_blocks: int | None = None

    @classmethod
    def from_json(cls, text: str) -> "RouterConfig":
        return cls(**json.loads(text))


@dataclass
class Trip:
    """What the router saw of one request; becomes the `pdd` object of the last chunk."""
    pipeline: str = "p_md"
    handoff_mode: str = "none"
    relay_tokens: int = 0
    main_tokens: int = 0
    p_cached_tokens: int = 0
    decode_cached_tokens: int = 0
    prefill_ms: float = float("nan")
    wan_kv_ms: float = float("nan")
    handoff_ms: float = float("nan")
    relay_busy_ms: float = 0.0
    catch_up_rounds: int = 0
    rdma_kv_bytes: int = 0
    wan_kv_bytes: int = 0
    wan_token_id_bytes: int = 0
    wan_kv_bytes_saved: int = 0
    transfer_aborted: bool = False
    singular_flow: bool = False
    md_error: str = ""                # why MD could not take over, when it could not


class UpstreamError(Exception):
    def __init__(self, status: int, text: str):
        super().__init__(f"upstream {status}: {text[:200]}")
        self.status, self.text = status, text


def block_hashes(tokens: list[int], block_size: int) -> list[int]:
    """Chained hashes of the full blocks, as an engine's prefix cache keys them."""
    out, h = [], hashlib.blake2b(digest_size=8)
    for i in range(len(tokens) // block_size):
        h.update(json.dumps(tokens[i * block_size:(i + 1) * block_size]).encode())
        out.append(int.from_bytes(h.copy().digest(), "little"))
    return out


class _Stream:
    """One upstream streaming completion read into `tokens` (ids, texts) by a task; cancelling
    the task closes the connection, which aborts the request on the engine."""

    def __init__(self, session: aiohttp.ClientSession, url: str, body: dict, sink: asyncio.Queue, source: str):
        self.tokens: list[int] = []
        self.finish_reason: str | None = None
        self.task = asyncio.create_task(self._read(session, url, body, sink, source))

    async def _read(self, session, url, body, sink, source) -> None:
        parser = SSEParser()
        async with await post(session, url + "/v1/completions", body) as resp:
            if resp.status != 200:
                raise UpstreamError(resp.status, await resp.text())
            async for chunk in resp.content.iter_any():
                for ev in parser.feed(chunk):
                    if ev is DONE or not isinstance(ev, dict):
                        continue
                    if "error" in ev:
                        raise UpstreamError(500, json.dumps(ev["error"]))
                    for ch in ev.get("choices") or []:
                        ids = ch.get("token_ids") or []
                        # appended and queued in one step: the token count is the cut point
                        self.tokens.extend(ids)
                        sink.put_nowait((source, ids, ch.get("text") or "", ch.get("finish_reason")))
                        if ch.get("finish_reason"):
                            self.finish_reason = ch["finish_reason"]

    async def cut(self) -> None:
        self.task.cancel()
        try:
            await self.task
        except asyncio.CancelledError:
            pass


async def _post_json(session: aiohttp.ClientSession, url: str, body: dict) -> dict:
    async with await post(session, url + "/v1/completions", body) as resp:
        if resp.status != 200:
            raise UpstreamError(resp.status, await resp.text())
        return await resp.json()


class Router:
    def __init__(self, cfg: RouterConfig):
        self.cfg = cfg
        self.md_cache = PrefixCache(cfg.md_cache_blocks)
        self.relay_inflight = 0
        self.wan_inflight = 0
        self.wan_free_at = 0.0  # fifo: when the pulls booked so far will have crossed (monotonic s)
        self.draining: set[asyncio.Task] = set()  # MD pulls left to finish after their relay did
        self.session: aiohttp.ClientSession | None = None

    def predict_wan_ms(self, nbytes: int) -> float:
        """Same model as the simulator's link.predict_ms: a fair share of the rate, or (fifo)
        behind every byte booked ahead, plus the delay."""
        rate = self.cfg.wan_rate_gbps
        if not rate:
            return self.cfg.wan_delay_ms
        if self.cfg.wan_sharing == "fifo":
            backlog_ms = max(0.0, self.wan_free_at - time.monotonic()) * 1000
            return backlog_ms + nbytes * 8 / (rate * 1e6) + self.cfg.wan_delay_ms
        return nbytes * 8 * (self.wan_inflight + 1) / (rate * 1e6) + self.cfg.wan_delay_ms

    def _book_wan(self, nbytes: int) -> None:
        """A pull starts: its bytes queue behind those booked before (vLLM cannot stop a pull,
        so a booking stands even when the router gives up on it)."""
        self.wan_inflight += 1
        if self.cfg.wan_rate_gbps:
            start = max(time.monotonic(), self.wan_free_at)
            self.wan_free_at = start + nbytes * 8 / (self.cfg.wan_rate_gbps * 1e9)

    async def prefill(self, body: dict) -> tuple[dict, int]:
        res = await _post_json(self.session, self.cfg.prefill, remote_decode_prefill_body(body))
        details = (res.get("usage") or {}).get("prompt_tokens_details") or {}
        return res["kv_transfer_params"], int(details.get("cached_tokens") or 0)

    async def warm_up(self, model: str) -> None:
        """One request down each KV path before serving: NIXL's first handshake between two
        engines takes seconds and must not land in a measured request."""
        body = {"model": model, "prompt": list(range(16, 16 + 3 * self.cfg.block_size // 2)), "max_tokens": 2,
                "temperature": 0.0, "ignore_eos": True}
        for pipeline in ("p_md", "p_rld_md"):
            await self.serve(body, asyncio.Queue(), Trip(), force_pipeline=pipeline)

    async def serve(self, body: dict, sink: asyncio.Queue, trip: Trip, force_pipeline: str | None = None) -> None:
        """Produce the request's tokens into `sink` as (source, ids, text, finish_reason)."""
        cfg, prompt = self.cfg, body["prompt"]
        n_out = int(body.get("max_tokens") or 16)
        up = {**body, "stream": True, "return_token_ids": True, "stream_options": {"include_usage": True}}
        up.pop("pdd", None)
        t0 = time.monotonic()
        kv1, trip.p_cached_tokens = await self.prefill(body)
        trip.prefill_ms = (time.monotonic() - t0) * 1000
        # Decided once P has the KV, as the simulator does: the line may be busier by then than
        # when the request arrived (P queues prefills).
        hashes = block_hashes(prompt, cfg.block_size)
        trip.decode_cached_tokens = min(len(prompt), self.md_cache.match(hashes) * cfg.block_size)
        uncached = len(prompt) - trip.decode_cached_tokens
        wan_bytes = policy.kv_transfer_bytes(uncached, cfg.kv_bytes_per_token, cfg.block_size)
        trip.pipeline = policy.choose_pipeline(
            predicted_wan_kv_ms=self.predict_wan_ms(wan_bytes), ttft_sla_ms=cfg.ttft_sla_ms,
            budget_fraction=cfg.relay_ttft_budget_fraction, relay_only_ablation=cfg.relay_only_pipeline)
        trip.pipeline = force_pipeline or trip.pipeline
        if trip.pipeline == "p_md":
            trip.wan_kv_bytes = wan_bytes
            self._book_wan(wan_bytes)
            try:
                md = _Stream(self.session, cfg.main, {**up, "kv_transfer_params": kv1}, sink, "main")
                await md.task
            finally:
                self.wan_inflight -= 1
            self.md_cache.insert(hashes)
            trip.main_tokens = len(md.tokens)
            return
        await self._relay_path(body, up, prompt, n_out, hashes, uncached, wan_bytes, kv1, sink, trip)

    async def _relay_path(self, body, up, prompt, n_out, hashes, uncached, wan_bytes, kv1, sink, trip) -> None:
        cfg = self.cfg
        trip.rdma_kv_bytes = policy.kv_transfer_bytes(len(prompt), cfg.kv_bytes_per_token, cfg.block_size)  # no cache on RLD
        trip.singular_flow = cfg.singular_filter and policy.is_singular_flow(
            input_tokens=len(prompt), uncached_tokens=uncached, max_output_tokens=n_out,
            min_input_tokens=cfg.singular_min_input_tokens, max_output=cfg.singular_max_output_tokens)
        relay_t0 = time.monotonic()
        self.relay_inflight += 1
        relay = _Stream(self.session, cfg.relay, {**up, "kv_transfer_params": kv1}, sink, "relay")
        pull: asyncio.Task | None = None
        try:
            if trip.pipeline == "p_rld" or trip.singular_flow:
                if trip.singular_flow:
                    trip.wan_kv_bytes_saved = wan_bytes
                trip.handoff_mode = "relay_finish"
                await relay.task
                trip.relay_tokens = len(relay.tokens)
                return
            kv2, _ = await self.prefill(body)
            trip.wan_kv_bytes = wan_bytes
            pull_t0 = time.monotonic()
            self._book_wan(wan_bytes)
            pull = asyncio.create_task(_post_json(self.session, cfg.main, one_token_body(body, kv_transfer_params=kv2)))
            pull.add_done_callback(lambda _t: setattr(self, "wan_inflight", self.wan_inflight - 1))
            await asyncio.wait({relay.task, pull}, return_when=asyncio.FIRST_COMPLETED)
            if not pull.done():  # the relay finished first: MD's transfer is not needed any more
                trip.handoff_mode = "relay_finish"
                if cfg.relay_finish_stops_wan_kv:
                    pull.cancel()
                    trip.transfer_aborted = True
                else:
                    self._drain(pull, hashes)
                    pull = None
                await relay.task
                trip.relay_tokens = len(relay.tokens)
                return
            if pull.exception() is not None:
                # MD could not take the KV (e.g. a NIXL handshake or transfer failure): the relay
                # has everything it needs, so it finishes the request and the user sees no error.
                trip.transfer_aborted = True
                trip.handoff_mode = "relay_finish"
                trip.md_error = str(pull.exception())[:200]
                await relay.task
                trip.relay_tokens = len(relay.tokens)
                return
            trip.wan_kv_ms = (time.monotonic() - pull_t0) * 1000
            self.md_cache.insert(hashes)
            while len(relay.tokens) < cfg.min_relay_tokens and not relay.task.done():
                await asyncio.sleep(0.002)
            if relay.task.done():
                relay.task.result()
                trip.handoff_mode = "relay_finish"
                trip.relay_tokens = len(relay.tokens)
                return
            await self._handoff(up, prompt, n_out, relay, sink, trip)
        finally:
            if pull is not None and not pull.done():
                pull.cancel()
            if not relay.task.done():
                await relay.cut()
            self.relay_inflight -= 1
            trip.relay_busy_ms = (time.monotonic() - relay_t0) * 1000

    def _drain(self, pull: asyncio.Task, hashes: list[int]) -> None:
        """Let MD's pull finish in the background; MD then holds the prompt in its prefix cache."""
        def done(t: asyncio.Task) -> None:
            self.draining.discard(t)
            if not t.cancelled() and t.exception() is None:
                self.md_cache.insert(hashes)
        self.draining.add(pull)
        pull.add_done_callback(done)

    async def _handoff(self, up, prompt, n_out, relay: _Stream, sink, trip: Trip) -> None:
        cfg = self.cfg
        trip.handoff_mode = policy.choose_handoff_mode(
            configured=cfg.handoff_mode, pending_tokens=len(relay.tokens), threshold_tokens=cfg.catch_up_threshold_tokens,
            relay_utilisation=self.relay_inflight / cfg.relay_slots, relay_busy_fraction=cfg.relay_busy_fraction)
        t0 = time.monotonic()
        handed = 0
        if trip.handoff_mode == "catch_up":
            while not relay.task.done():
                pending = len(relay.tokens) - handed
                if policy.catch_up_finished(pending_tokens=pending, batch_tokens=cfg.catch_up_batch_tokens,
                                            rounds=trip.catch_up_rounds, max_rounds=cfg.catch_up_max_rounds):
                    break
                upto = len(relay.tokens)
                trip.wan_token_id_bytes += policy.handoff_message_bytes(upto - handed)
                await _post_json(self.session, cfg.main, one_token_body(up, prompt=prompt + relay.tokens[:upto]))
                handed, trip.catch_up_rounds = upto, trip.catch_up_rounds + 1
        # The relay may finish during the handoff: then MD has nothing left to do and the request
        # ended on the relay, labelled as the simulator labels it (catch_up_rounds keeps the try).
        if relay.task.done():
            relay.task.result()
            trip.relay_tokens = len(relay.tokens)
            trip.handoff_mode = "relay_finish"
            return
        await relay.cut()
        eager = list(relay.tokens)
        trip.relay_tokens = len(eager)
        remaining = n_out - len(eager)
        if remaining <= 0 or relay.finish_reason:
            trip.handoff_mode = "relay_finish"
            return
        trip.wan_token_id_bytes += policy.handoff_message_bytes(len(eager) - handed)
        body = {**up, "prompt": prompt + eager, "max_tokens": remaining}
        if body.get("min_tokens"):
            body["min_tokens"] = max(0, int(body["min_tokens"]) - len(eager))
        first = asyncio.Event()
        md_sink: asyncio.Queue = asyncio.Queue()
        md = _Stream(self.session, cfg.main, body, md_sink, "main")

        async def relay_out() -> None:
            while True:
                item = await md_sink.get()
                if item[1] and not first.is_set():
                    trip.handoff_ms = (time.monotonic() - t0) * 1000
                    first.set()
                sink.put_nowait(item)
        fwd = asyncio.create_task(relay_out())
        try:
            await md.task
            while not md_sink.empty():
                await asyncio.sleep(0)
        finally:
            fwd.cancel()
        trip.main_tokens = len(md.tokens)


def _chunk(rid: str, model: str, created: int, text: str, ids: list[int] | None, finish: str | None) -> bytes:
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
    if ids is not None:
        choice["token_ids"] = ids
    ev = {"id": rid, "object": "text_completion", "created": created, "model": model, "choices": [choice]}
    return b"data: " + json.dumps(ev).encode() + b"\n\n"


async def completions(request: web.Request) -> web.StreamResponse:
    router: Router = request.app[ROUTER]
    try:
        body = await request.json()
    except json.JSONDecodeError as exc:
        return web.json_response({"error": {"message": f"body is not JSON: {exc}"}}, status=400)
    prompt = body.get("prompt")
    if not (isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt)):
        return web.json_response({"error": {"message": "the PDD router takes prompts as a list of token ids"}}, status=400)
    rid, created, model = f"cmpl-pdd-{uuid.uuid4().hex[:16]}", int(time.time()), body.get("model", "")
    want_ids = bool(body.get("return_token_ids"))
    sink: asyncio.Queue = asyncio.Queue()
    trip = Trip()
    work = asyncio.create_task(router.serve(body, sink, trip))
    out: web.StreamResponse | None = None
    produced: list[int] = []
    text_parts: list[str] = []
    finish = None
    try:
        while True:
            get = asyncio.create_task(sink.get())
            await asyncio.wait({get, work}, return_when=asyncio.FIRST_COMPLETED)
            if not get.done():
                get.cancel()
                if sink.empty():
                    break
                continue
            _source, ids, text, fr = get.result()
            produced.extend(ids)
            text_parts.append(text)
            finish = fr or finish
            if body.get("stream"):
                if out is None:
                    out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
                    await out.prepare(request)
                if ids or text:
                    await out.write(_chunk(rid, model, created, text, ids if want_ids else None, None))
        work.result()
    except UpstreamError as exc:
        if out is None:
            return web.json_response({"error": {"message": str(exc)}}, status=exc.status if exc.status >= 400 else 502)
        await out.write(b"data: " + json.dumps({"error": {"message": str(exc)}}).encode() + b"\n\n")
        await out.write_eof()
        return out
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        if out is None:
            return web.json_response({"error": {"message": f"engine unreachable: {exc!r}"}}, status=502)
        await out.write(b"data: " + json.dumps({"error": {"message": f"engine unreachable: {exc!r}"}}).encode() + b"\n\n")
        await out.write_eof()
        return out
    finally:
        if not work.done():
            work.cancel()
    finish = "length" if len(produced) >= int(body.get("max_tokens") or 16) else (finish or "stop")
    usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": len(produced),
             "total_tokens": len(body["prompt"]) + len(produced),
             "prompt_tokens_details": {"cached_tokens": trip.p_cached_tokens}}
    pdd = {k: (None if isinstance(v, float) and v != v else v) for k, v in trip.__dict__.items()}
    if not body.get("stream"):
        choice = {"index": 0, "text": "".join(text_parts), "finish_reason": finish, "logprobs": None}
        if want_ids:
            choice["token_ids"] = produced
        return web.json_response({"id": rid, "object": "text_completion", "created": created, "model": model,
                                  "choices": [choice], "usage": usage, "pdd": pdd})
    if out is None:
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
    await out.write(_chunk(rid, model, created, "", [] if want_ids else None, finish))
    tail = {"id": rid, "object": "text_completion", "created": created, "model": model, "choices": [],
            "usage": usage, "pdd": pdd}
    await out.write(b"data: " + json.dumps(tail).encode() + b"\n\ndata: [DONE]\n\n")
    await out.write_eof()
    return out


async def models(request: web.Request) -> web.Response:
    async with request.app[ROUTER].session.get(request.app[ROUTER].cfg.main + "/v1/models") as resp:
        return web.json_response(await resp.json(), status=resp.status)


async def health(_request: web.Request) -> web.Response:
    return web.Response(text="ok")


ROUTER = web.AppKey("router", Router)


def make_app(cfg: RouterConfig, warm_model: str | None = None) -> web.Application:
    app = web.Application()
    router = Router(cfg)
    app[ROUTER] = router

    async def session_ctx(_app):
        router.session = engine_session()
        if warm_model:
            await router.warm_up(warm_model)
            router.md_cache = PrefixCache(cfg.md_cache_blocks)
        yield
        for t in list(router.draining):
            t.cancel()
        await router.session.close()
    app.cleanup_ctx.append(session_ctx)
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    return app


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--config", required=True, help="RouterConfig as JSON")
    p.add_argument("--warm-up-model", default=None, help="served model name: warm both KV paths before listening")
    a = p.parse_args()
    app = make_app(RouterConfig.from_json(a.config), warm_model=a.warm_up_model)
    web.run_app(app, host=a.host, port=a.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
