"""A minimal disaggregated-prefill proxy (the PD baselines): each /v1/completions request is
prefilled on P (max_tokens 1, do_remote_decode), then decoded on D with P's kv_transfer_params, so
D pulls the prompt KV from P through the KV connector; D's stream goes back to the client as is.
The proxy adds no policy: P and D are chosen round-robin. Binds to loopback (or a project
namespace address) only.

Before the stream's `data: [DONE]` it adds one event `{"choices": [], "pdd": {...}}` with its
account of the request (the PDD router's format): `prefill_ms`, received -> P answered (P's queue
and prefill), and `d_first_token_ms`, D asked -> D's first token (the KV pull and D's first step),
so a run's TTFT splits into its P and D parts."""

from __future__ import annotations

import argparse
import itertools
import json
import time

import aiohttp
from aiohttp import web

from pddbench.live.injected_delay import add_delay
from pddbench.live.service import ON_ACCOUNT
from pddbench.live.kv_requests import one_token_body, remote_decode_prefill_body
from pddbench.live.upstream import engine_session, post


async def completions(request: web.Request) -> web.StreamResponse:
    tell = request.app.get(ON_ACCOUNT) or (lambda _status, _account: None)
    try:
        body = await request.json()
    except json.JSONDecodeError as exc:
        tell(400, {"pipeline": "p_d"})
        return web.json_response({"error": {"message": f"body is not JSON: {exc}"}}, status=400)
    try:
        return await _serve(request, body, tell)
    except aiohttp.ClientError as exc:  # P or D unreachable or gone mid-request
        tell(502, {"pipeline": "p_d"})
        if request.get(PREPARED):
            raise  # the stream has begun: nothing else can be said to the client
        return web.json_response({"error": {"message": f"engine unreachable: {exc!r}"}}, status=502)


PREPARED = web.RequestKey("prepared", bool)  # set once the client's response has started


async def _serve(request: web.Request, body: dict, tell) -> web.StreamResponse:
    up = request.app[UPSTREAMS]
    received = time.monotonic()
    p_url, d_url = next(up.prefill), next(up.decode)
    session = up.session
    async with await post(session, p_url + "/v1/completions", remote_decode_prefill_body(body)) as resp:
        if resp.status != 200:
            tell(resp.status, {"pipeline": "p_d"})
            return web.Response(status=resp.status, text=await resp.text())
        kv_params = (await resp.json()).get("kv_transfer_params")
    asked_d = time.monotonic()
    decode_body = {**body, "kv_transfer_params": kv_params}
    async with await post(session, d_url + "/v1/completions", decode_body) as resp:
        out = web.StreamResponse(status=resp.status, headers={"Content-Type": resp.headers.get("Content-Type", "text/event-stream")})
        await out.prepare(request)
        request[PREPARED] = True
        if not body.get("stream") or resp.status != 200:
            await out.write(await resp.read())
            await out.write_eof()
            tell(resp.status, {"pipeline": "p_d", "prefill_ms": (asked_d - received) * 1000})
            return out
        pending, first, done = b"", None, False
        async for chunk in resp.content.iter_any():
            first = first or time.monotonic()
            pending += chunk
            end = pending.rfind(b"\n\n")
            if end < 0:
                continue
            ready, pending = pending[:end + 2], pending[end + 2:]
            if ready.endswith(DONE_EVENT):  # our account goes in before it
                ready, done = ready[:-len(DONE_EVENT)], True
            await out.write(ready)  # whole events at once: no token waits for the next chunk
        account = {"pipeline": "p_d", "prefill_ms": (asked_d - received) * 1000,
                   "d_first_token_ms": None if first is None else (first - asked_d) * 1000}
        tail = b"data: " + json.dumps({"choices": [], "pdd": account}).encode() + b"\n\n"
        await out.write(pending + tail + (DONE_EVENT if done else b""))
        await out.write_eof()
        tell(resp.status, account)
        return out


DONE_EVENT = b"data: [DONE]\n\n"


async def models(request: web.Request) -> web.Response:
    up = request.app[UPSTREAMS]
    async with up.session.get(up.decode_urls[0] + "/v1/models") as resp:
        return web.json_response(await resp.json(), status=resp.status)


class Upstreams:
    """P and D in round-robin order, and the one client session to both."""

    def __init__(self, prefill: list[str], decode: list[str], warm_up_model: str | None = None):
        self.prefill, self.decode, self.decode_urls = itertools.cycle(prefill), itertools.cycle(decode), decode
        self.prefill_urls, self.warm_up_model = prefill, warm_up_model
        self.session: aiohttp.ClientSession | None = None

    async def warm_up(self) -> None:
        """One request over each P -> D pair before listening, as the PDD router does: NIXL's
        first handshake between two engines (about a second over the live WAN) must not land
        in a measured request."""
        body = {"model": self.warm_up_model, "prompt": list(range(16, 16 + 192)), "temperature": 0.0}
        for p_url in self.prefill_urls:
            for d_url in self.decode_urls:
                async with await post(self.session, p_url + "/v1/completions", remote_decode_prefill_body(body)) as r:
                    r.raise_for_status()
                    kv = (await r.json())["kv_transfer_params"]
                async with await post(self.session, d_url + "/v1/completions",
                                      one_token_body(body, kv_transfer_params=kv)) as r:
                    r.raise_for_status()


UPSTREAMS = web.AppKey("upstreams", Upstreams)


async def _session(app: web.Application):
    up = app[UPSTREAMS]
    up.session = engine_session()
    if up.warm_up_model:
        await up.warm_up()
    yield
    await app[UPSTREAMS].session.close()


def make_app(prefill: list[str], decode: list[str], warm_up_model: str | None = None,
             added_delay_ms: float = 0.0) -> web.Application:
    app = web.Application()
    add_delay(app, added_delay_ms)
    app[UPSTREAMS] = Upstreams(prefill, decode, warm_up_model)
    app.cleanup_ctx.append(_session)
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    return app


async def health(_request: web.Request) -> web.Response:
    return web.Response(text="ok")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--prefill", action="append", required=True, help="P base URL (repeatable)")
    p.add_argument("--decode", action="append", required=True, help="D base URL (repeatable)")
    p.add_argument("--warm-up-model", default=None, help="served model name: warm each P -> D pair before listening")
    p.add_argument("--added-delay-ms", type=float, default=0.0, help="injected regression: hold each request this long")
    a = p.parse_args()
    web.run_app(make_app(a.prefill, a.decode, a.warm_up_model, a.added_delay_ms), host=a.host, port=a.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
