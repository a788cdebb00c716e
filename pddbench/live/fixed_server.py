"""A fixed-latency streaming endpoint (OpenAI /v1/completions shape) to measure the replay client
itself: first token after --ttft-ms, then one token every --itl-ms. Each stream's last chunk
reports the server's own timing (CLOCK_MONOTONIC, comparable with the client's on one host), so
TTFT measurement error = client TTFT - server TTFT. Binds to loopback only."""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from aiohttp import web


async def completions(request: web.Request) -> web.StreamResponse:
    recv = time.monotonic()
    body = await request.json()
    cfg = request.app[CFG]
    n = int(body.get("max_tokens") or 16)
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    first_sent = None
    for i in range(n):
        due = recv + (cfg.ttft_ms + i * cfg.itl_ms) / 1000
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        chunk = {"choices": [{"index": 0, "text": "x", "token_ids": [100 + i % 50]}]}
        await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        first_sent = first_sent or time.monotonic()
    timing = {"recv_s": recv, "first_sent_s": first_sent, "ttft_ms": (first_sent - recv) * 1000}
    if "x-request-id" in request.headers:  # a client that ignores server_timing can ask for it afterwards
        cfg.timings[request.headers["x-request-id"]] = timing
    usage = {"prompt_tokens": len(body.get("prompt") or []), "completion_tokens": n}
    await resp.write(b"data: " + json.dumps({"choices": [], "usage": usage, "server_timing": timing}).encode() + b"\n\n")
    await resp.write(b"data: [DONE]\n\n")
    if cfg.log_requests:  # lets a test act once the client is demonstrably running
        print("served", flush=True)
    return resp


async def models(_request: web.Request) -> web.Response:
    return web.json_response({"data": [{"id": "fixed"}]})


async def timings(request: web.Request) -> web.Response:
    """The server's own timing of every request that carried an x-request-id header."""
    return web.json_response(request.app[CFG].timings)


CFG = web.AppKey("cfg", argparse.Namespace)


def make_app(ttft_ms: float, itl_ms: float, log_requests: bool = False) -> web.Application:
    app = web.Application()
    app[CFG] = argparse.Namespace(ttft_ms=ttft_ms, itl_ms=itl_ms, log_requests=log_requests, timings={})
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/pddbench/timings", timings)
    return app


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--ttft-ms", type=float, default=50.0)
    p.add_argument("--itl-ms", type=float, default=10.0)
    p.add_argument("--log-requests", action="store_true", help="print a line per completed request")
    a = p.parse_args()
    import uvloop

    web.run_app(make_app(a.ttft_ms, a.itl_ms, a.log_requests), host="127.0.0.1", port=a.port, print=None, access_log=None,
                loop=uvloop.new_event_loop())


if __name__ == "__main__":
    main()
