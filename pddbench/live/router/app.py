"""The PDD router's HTTP front: an OpenAI-compatible /v1/completions (prompts as token ids),
streamed or not. Every response ends with a usage chunk carrying the request's `pdd` account
(Trip), which the replay client copies into the records. Binds to loopback or a project
namespace address only."""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid

import aiohttp
from aiohttp import web

from pddbench.cache import PrefixCache
from pddbench.live.injected_delay import add_delay
from pddbench.live.router.config import RouterConfig, Trip
from pddbench.live.router.flow import Router
from pddbench.live.router.stream import UpstreamError
from pddbench.live.service import ON_ACCOUNT
from pddbench.live.upstream import engine_session

ROUTER = web.AppKey("router", Router)


class _Reply:
    """The client's response, streamed as tokens arrive or sent whole at the end."""

    def __init__(self, request: web.Request, body: dict):
        self.request, self.body = request, body
        self.rid, self.created, self.model = f"cmpl-pdd-{uuid.uuid4().hex[:16]}", int(time.time()), body.get("model", "")
        self.stream, self.want_ids = bool(body.get("stream")), bool(body.get("return_token_ids"))
        self.out: web.StreamResponse | None = None
        self.produced: list[int] = []
        self.text_parts: list[str] = []
        self.finish: str | None = None

    def _event(self, **fields) -> bytes:
        ev = {"id": self.rid, "object": "text_completion", "created": self.created, "model": self.model, **fields}
        return b"data: " + json.dumps(ev).encode() + b"\n\n"

    def _chunk(self, text: str, ids: list[int], finish: str | None) -> bytes:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        if self.want_ids:
            choice["token_ids"] = ids
        return self._event(choices=[choice])

    async def _open(self) -> web.StreamResponse:
        if self.out is None:
            self.out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await self.out.prepare(self.request)
        return self.out

    async def tokens(self, ids: list[int], text: str, finish: str | None) -> None:
        self.produced.extend(ids)
        self.text_parts.append(text)
        self.finish = finish or self.finish
        if self.stream:
            out = await self._open()
            if ids or text:
                await out.write(self._chunk(text, ids, None))

    async def error(self, exc: Exception) -> web.StreamResponse:
        """Before any token: an HTTP error; after: an error event ends the stream."""
        if isinstance(exc, UpstreamError):
            message, status = str(exc), exc.status if exc.status >= 400 else 502
        else:
            message, status = f"engine unreachable: {exc!r}", 502
        if self.out is None:
            return web.json_response({"error": {"message": message}}, status=status)
        await self.out.write(b"data: " + json.dumps({"error": {"message": message}}).encode() + b"\n\n")
        await self.out.write_eof()
        return self.out

    async def done(self, trip: Trip) -> web.StreamResponse:
        n_in = len(self.body["prompt"])
        finish = "length" if len(self.produced) >= int(self.body.get("max_tokens") or 16) else (self.finish or "stop")
        usage = {"prompt_tokens": n_in, "completion_tokens": len(self.produced),
                 "total_tokens": n_in + len(self.produced),
                 "prompt_tokens_details": {"cached_tokens": trip.p_cached_tokens}}
        if not self.stream:
            choice = {"index": 0, "text": "".join(self.text_parts), "finish_reason": finish, "logprobs": None}
            if self.want_ids:
                choice["token_ids"] = self.produced
            return web.json_response({"id": self.rid, "object": "text_completion", "created": self.created,
                                      "model": self.model, "choices": [choice], "usage": usage, "pdd": trip.as_pdd()})
        out = await self._open()
        await out.write(self._chunk("", [], finish))
        await out.write(self._event(choices=[], usage=usage, pdd=trip.as_pdd()) + b"data: [DONE]\n\n")
        await out.write_eof()
        return out


async def _relay_tokens(sink: asyncio.Queue, work: asyncio.Task, reply: _Reply) -> None:
    """Pass the sink's tokens to the client until the request's work is done and the sink empty."""
    while True:
        get = asyncio.create_task(sink.get())
        await asyncio.wait({get, work}, return_when=asyncio.FIRST_COMPLETED)
        if not get.done():
            get.cancel()
            if sink.empty():
                return
            continue
        _source, ids, text, finish = get.result()
        await reply.tokens(ids, text, finish)


async def completions(request: web.Request) -> web.StreamResponse:
    router: Router = request.app[ROUTER]
    try:
        body = await request.json()
    except json.JSONDecodeError as exc:
        _tell(request, 400, REJECTED)
        return web.json_response({"error": {"message": f"body is not JSON: {exc}"}}, status=400)
    prompt = body.get("prompt")
    if not (isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt)):
        _tell(request, 400, REJECTED)
        return web.json_response({"error": {"message": "the PDD router takes prompts as a list of token ids"}}, status=400)
    reply, sink, trip = _Reply(request, body), asyncio.Queue(), Trip()
    work = asyncio.create_task(router.serve(body, sink, trip))
    try:
        await _relay_tokens(sink, work, reply)
        work.result()
    except (UpstreamError, aiohttp.ClientError, asyncio.TimeoutError) as exc:
        out = await reply.error(exc)
        _tell(request, 502 if out.status == 200 else out.status, trip.as_pdd())  # a stream ended by an error is no success
        return out
    finally:
        if not work.done():
            work.cancel()
    out = await reply.done(trip)
    _tell(request, out.status, trip.as_pdd())
    return out


def _tell(request: web.Request, status: int, account: dict) -> None:
    """The request's account to the service around the router (`pddbench serve`), if any."""
    on_account = request.app.get(ON_ACCOUNT)
    if on_account is not None:
        on_account(status, account)


REJECTED = {"pipeline": "none"}  # refused before any pipeline was chosen (bad JSON, not token ids)


async def models(request: web.Request) -> web.Response:
    router = request.app[ROUTER]
    async with router.session.get(router.cfg.main + "/v1/models") as resp:
        return web.json_response(await resp.json(), status=resp.status)


async def health(_request: web.Request) -> web.Response:
    return web.Response(text="ok")


def make_app(cfg: RouterConfig, warm_model: str | None = None, added_delay_ms: float = 0.0) -> web.Application:
    app = web.Application()
    add_delay(app, added_delay_ms)
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


def main(argv: list[str] | None = None) -> None:
    from pddbench.live.router import __doc__ as doc

    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--config", required=True, help="RouterConfig as JSON (RouterConfig.model_dump_json)")
    p.add_argument("--warm-up-model", default=None, help="served model name: warm both KV paths before listening")
    p.add_argument("--added-delay-ms", type=float, default=0.0, help="injected regression: hold each request this long")
    a = p.parse_args(argv)
    app = make_app(RouterConfig.model_validate_json(a.config), warm_model=a.warm_up_model,
                   added_delay_ms=a.added_delay_ms)
    web.run_app(app, host=a.host, port=a.port, print=None, access_log=None)
