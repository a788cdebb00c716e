"""The PD proxy's stream handling against stand-in P and D servers (the proxy on real vLLM runs in
tests/test_live_vllm.py): D's events reach the client as soon as they are complete, and the
proxy's account goes in just before `data: [DONE]`."""

import asyncio
import json

import aiohttp
import pytest
from aiohttp import web

from pddbench.live.net import free_port
from pddbench.live.pd_proxy import make_app
from pddbench.live.sse import DONE, SSEParser


async def _serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}"


def test_events_pass_at_once_and_the_account_precedes_done():
    release_second = asyncio.Event()

    async def prefill(request):
        body = await request.json()
        assert body["max_tokens"] == 1 and body["kv_transfer_params"]["do_remote_decode"] is True
        await asyncio.sleep(0.05)
        return web.json_response({"choices": [{"text": "x"}], "kv_transfer_params": {"remote_block_ids": [1]}})

    async def decode(request):
        body = await request.json()
        assert body["kv_transfer_params"] == {"remote_block_ids": [1]}
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        await out.write(b'data: {"choices": [{"text": "a", "token_ids": [5]}]}\n\n')
        await release_second.wait()  # the client must have the first token before this
        # the second event split across writes, [DONE] glued to it
        await out.write(b'data: {"choices": [{"text": "b", ')
        await out.write(b'"token_ids": [6]}]}\n\ndata: [DONE]\n\n')
        await out.write_eof()
        return out

    async def go():
        p_app, d_app = web.Application(), web.Application()
        p_app.router.add_post("/v1/completions", prefill)
        d_app.router.add_post("/v1/completions", decode)
        (p_run, p_url), (d_run, d_url) = await _serve(p_app), await _serve(d_app)
        proxy_run, proxy_url = await _serve(make_app([p_url], [d_url]))
        events = []
        try:
            async with aiohttp.ClientSession() as s:
                async with s.post(proxy_url + "/v1/completions", json={"prompt": [1, 2], "max_tokens": 2,
                                                                       "stream": True}) as resp:
                    parser = SSEParser()
                    async for chunk in resp.content.iter_any():
                        for ev in parser.feed(chunk):
                            events.append(ev)
                            if ev is not DONE and ev.get("choices") and ev["choices"][0]["token_ids"] == [5]:
                                release_second.set()
        finally:
            for r in (proxy_run, p_run, d_run):
                await r.cleanup()
        return events

    events = asyncio.run(asyncio.wait_for(go(), 20))
    assert [e["choices"][0]["token_ids"] for e in events[:2]] == [[5], [6]]
    account = events[2]["pdd"]
    assert account["pipeline"] == "p_d" and account["prefill_ms"] >= 50 and account["d_first_token_ms"] >= 0
    assert events[3] is DONE and len(events) == 4
    json.dumps(account)  # plain JSON


def test_warm_up_pulls_over_every_pair_before_serving():
    """With a warm-up model, the proxy sends one request over each P -> D pair (D gets the
    kv_transfer_params of the P that prefilled it) before it accepts requests."""
    seen = []

    def prefill_on(name):
        async def prefill(request):
            body = await request.json()
            assert body["kv_transfer_params"]["do_remote_decode"] is True and body["model"] == "tiny"
            seen.append(("prefill", name))
            return web.json_response({"choices": [{"text": "x"}], "kv_transfer_params": {"from": name}})
        return prefill

    def decode_on(name):
        async def decode(request):
            body = await request.json()
            seen.append(("decode", name, body["kv_transfer_params"]["from"], body["stream"]))
            return web.json_response({"choices": [{"text": "y"}]})
        return decode

    async def go():
        runs, urls = [], {}
        for name, handler in (("P0", prefill_on("P0")), ("P1", prefill_on("P1")), ("D0", decode_on("D0"))):
            app = web.Application()
            app.router.add_post("/v1/completions", handler)
            run, urls[name] = await _serve(app)
            runs.append(run)
        proxy_run, _ = await _serve(make_app([urls["P0"], urls["P1"]], [urls["D0"]], warm_up_model="tiny"))
        warmed = list(seen)  # the proxy's site starts only after its startup (the warm-up) ran
        for r in (proxy_run, *runs):
            await r.cleanup()
        return warmed

    warmed = asyncio.run(asyncio.wait_for(go(), 20))
    assert warmed == [("prefill", "P0"), ("decode", "D0", "P0", False), ("prefill", "P1"), ("decode", "D0", "P1", False)]


def test_post_tries_again_once_when_the_engine_closed_the_connection():
    """A connection the engine closes as the request goes out fails before any answer: `post`
    sends it once more, and a second failure is the caller's."""
    from pddbench.live.upstream import engine_session, post

    async def go(drop_first: int):
        seen = {"n": 0}

        async def handle(reader, writer):
            seen["n"] += 1
            await reader.readuntil(b"\r\n\r\n")
            if seen["n"] <= drop_first:
                writer.close()  # no answer: what a keep-alive race looks like to the client
                return
            body = b'{"ok": true}'
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(body), body))
            await writer.drain()
            writer.close()

        port = free_port()
        server = await asyncio.start_server(handle, "127.0.0.1", port)
        try:
            async with engine_session() as session:
                async with await post(session, f"http://127.0.0.1:{port}/v1/completions", {"x": 1}) as resp:
                    return await resp.json(), seen["n"]
        finally:
            server.close()
            await server.wait_closed()

    assert asyncio.run(go(1)) == ({"ok": True}, 2)
    with pytest.raises(aiohttp.ServerDisconnectedError):
        asyncio.run(go(2))


def test_an_injected_front_delay_holds_completions_and_nothing_else():
    """live.front_added_delay_ms (the nightly gate's injected regression) reaches the proxy's app:
    a completion waits at least that long; /health does not."""
    from pddbench.live.injected_delay import add_delay

    async def ok(_request):
        return web.json_response({"ok": True})

    async def go():
        app = web.Application()
        add_delay(app, 300.0)
        app.router.add_post("/v1/completions", ok)
        app.router.add_get("/health", ok)
        run, url = await _serve(app)
        loop = asyncio.get_running_loop()
        try:
            async with aiohttp.ClientSession() as s:
                t0 = loop.time()
                async with s.post(url + "/v1/completions", json={}) as resp:
                    assert resp.status == 200
                held = loop.time() - t0
                async with s.get(url + "/health") as resp:
                    assert resp.status == 200
        finally:
            await run.cleanup()
        return held

    assert asyncio.run(go()) >= 0.3  # a lower bound: sleep never returns early
    assert len(make_app(["http://p"], ["http://d"], added_delay_ms=300.0).middlewares) == 1
    assert len(make_app(["http://p"], ["http://d"]).middlewares) == 0
