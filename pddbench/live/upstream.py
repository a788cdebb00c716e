"""The HTTP client to vLLM engines: the fronts' (PD proxy, PDD router) and the engine calibration's."""

from __future__ import annotations

import aiohttp

from pddbench.live.engines import ENGINE_KEEP_ALIVE_S

# vLLM closes a connection idle for VLLM_HTTP_TIMEOUT_KEEP_ALIVE (5 s by default); aiohttp keeps
# one for 15 s. A request sent on a connection the engine is closing fails: seen live, one request
# in 40 (an http_500 from the proxy) after a 4 s pause in the trace. So a client lets an idle
# connection go well before the engine would.
# The fronts (PD proxy, PDD router, calibration) talk to engines pddbench started, which keep
# connections ENGINE_KEEP_ALIVE_S: their pools stay warm, as a serving router's do. With 2 s, a
# request after a quiet spell opened a new connection, and across the WAN that handshake is one
# more round trip before D can pull (+45 ms on a quarter of the cross-DC requests at load 0.5).
FRONT_IDLE_CONNECTION_S = ENGINE_KEEP_ALIVE_S / 2
# The replay client may talk to any endpoint, vLLM's 5 s default included.
IDLE_CONNECTION_S = 2.0


def engine_session(total_timeout_s: float = 3600) -> aiohttp.ClientSession:
    """Every client of an engine pddbench started (the fronts, the engine calibration) uses this
    one: idle connections stay warm, and go before the engine would close them."""
    return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=total_timeout_s),
                                 connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=FRONT_IDLE_CONNECTION_S))


async def post(session: aiohttp.ClientSession, url: str, body: dict) -> aiohttp.ClientResponse:
    """POST `body` as JSON; one fresh try when a pooled connection turns out closed before any
    answer (the race the short idle time makes rare). Use the response with `async with`."""
    for attempt in (1, 2):
        try:
            return await session.post(url, json=body)
        except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError):
            if attempt == 2:
                raise
    raise AssertionError("unreachable")
