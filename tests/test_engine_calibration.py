"""The engine calibration's client against a loopback stand-in engine that closes connections the
way vLLM does (its keep-alive timeout) at the worst moment: the calibration must not fail on it.
(The calibration against real engines runs in tests/test_live_vllm.py.)"""

import asyncio
import json

from aiohttp import web

from pddbench.live import engine_calibration as cal
from pddbench.live.net import free_port


def _stand_in_engine(drop: set[int]):
    """Completions as vLLM answers them (JSON, or SSE when streamed); the requests numbered in
    `drop` (1-based) lose their connection before any answer, as a request sent on a connection
    the engine is closing does."""
    seen = {"n": 0}

    async def completions(request: web.Request):
        body = await request.json()
        seen["n"] += 1
        if seen["n"] in drop:
            request.transport.close()
            return web.Response()  # never reaches the client: the connection is gone
        if not body.get("stream"):
            return web.json_response({"choices": [{"text": "x"}], "kv_transfer_params": {"remote_block_ids": [0]}})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for _ in range(body["max_tokens"]):
            await resp.write(b"data: " + json.dumps({"choices": [{"text": "x"}]}).encode() + b"\n\n")
            await asyncio.sleep(0.001)
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    return app, seen


def _calibrate_against(drop: set[int]):
    async def go():
        app, seen = _stand_in_engine(drop)
        runner = web.AppRunner(app)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        url = f"http://127.0.0.1:{port}"
        try:
            steps = await cal.measure(url, url, reps=1, remote_decode=True)
            xfer = await cal.measure_kv_transfer(url, url, kv_bytes_per_token=1000, reps=1)
            return steps, xfer, seen["n"]
        finally:
            await runner.cleanup()

    return asyncio.run(asyncio.wait_for(go(), 60))


def test_calibration_survives_connections_the_engine_closes():
    prefills = 1 + len(cal.PREFILL_TOKENS) + len(cal.EXTEND_SHAPES)
    streams = sum(b for b, _ in cal.DECODE_SHAPES)
    # a prefill, a decode stream (the second shape's first), a KV pull (the second transfer's)
    steps, xfer, served = _calibrate_against({3, prefills + 2, prefills + streams + 4})
    assert sum(r["phase"] == "prefill" for r in steps) == prefills
    assert [r["batch"] for r in steps if r["phase"] == "decode"] == [b for b, _ in cal.DECODE_SHAPES]
    assert all(r["step_ms"] > 0 for r in steps)
    assert len(xfer) == len(cal.TRANSFER_TOKENS)
    assert served == prefills + streams + 2 * len(cal.TRANSFER_TOKENS) + 3  # the dropped ones were sent again
