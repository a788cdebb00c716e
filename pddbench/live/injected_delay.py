"""An injected regression for checking the nightly gate: the front (PD proxy or PDD router) holds
every completion request this long before serving it (`live.front_added_delay_ms`). Zero in every
shipped scenario; a gate that does not fail with it set is too lax to trust."""

from __future__ import annotations

import asyncio

from aiohttp import web


def add_delay(app: web.Application, delay_ms: float) -> None:
    """Hold each POST /v1/completions `delay_ms` before its handler runs (nothing when 0)."""
    if delay_ms <= 0:
        return

    @web.middleware
    async def held(request: web.Request, handler):
        if request.method == "POST" and request.path == "/v1/completions":
            await asyncio.sleep(delay_ms / 1000)
        return await handler(request)

    app.middlewares.append(held)
