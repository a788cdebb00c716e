"""Upstream engine calls of the PDD router: streamed completions read by a task, and one-shot
JSON completions (prefill, KV pull, extend step)."""

from __future__ import annotations

import asyncio
import json

import aiohttp

from pddbench.live.sse import DONE, SSEParser
from pddbench.live.upstream import post


class UpstreamError(Exception):
    def __init__(self, status: int, text: str):
        super().__init__(f"upstream {status}: {text[:200]}")
        self.status, self.text = status, text


class Stream:
    """One upstream streaming completion read into `tokens` (ids) by a task, each event also put
    on `sink` as (source, ids, text, finish_reason); cancelling the task closes the connection,
    which aborts the request on the engine."""

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


async def post_json(session: aiohttp.ClientSession, url: str, body: dict) -> dict:
    async with await post(session, url + "/v1/completions", body) as resp:
        if resp.status != 200:
            raise UpstreamError(resp.status, await resp.text())
        return await resp.json()
