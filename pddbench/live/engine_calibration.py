"""Step times of real engines, for the simulator's calibrated latency model
(pddbench/sim/latency.py, `Calibrated`): prefill time against prompt length on P, decode step time
against batch size on D. Rows use the CSV columns the model fits:
phase,tokens,attn_pairs,batch,kv_tokens,step_ms.

Prefill: uncached prompts with max_tokens 1, time to the response (so the HTTP hop is included, as
it is in every live TTFT). Decode: `batch` concurrent streams; the step time is the median gap
between tokens once all have started."""

from __future__ import annotations

import asyncio
import statistics
import time

import aiohttp

from pddbench.live.sse import DONE, SSEParser

PREFILL_TOKENS = (128, 512, 1024, 2048, 4096)
DECODE_BATCHES = (1, 2, 4, 8)
DECODE_CONTEXT, DECODE_TOKENS = 512, 24


def _prompt(seed: int, n: int, lo: int, hi: int) -> list[int]:
    # distinct per seed and position, so nothing hits the prefix cache
    return [lo + (seed * 7919 + i * 104729 + (i * i) % 9973) % (hi - lo) for i in range(n)]


async def _prefill_ms(session, url: str, model: str, prompt: list[int]) -> float:
    t0 = time.monotonic()
    async with session.post(url + "/v1/completions", json={"model": model, "prompt": prompt, "max_tokens": 1,
                                                           "temperature": 0.0}) as resp:
        await resp.read()
        resp.raise_for_status()
    return (time.monotonic() - t0) * 1000


async def _stream_times(session, url: str, model: str, prompt: list[int], n: int) -> list[float]:
    body = {"model": model, "prompt": prompt, "max_tokens": n, "min_tokens": n, "ignore_eos": True,
            "temperature": 0.0, "stream": True}
    times, parser = [], SSEParser()
    async with session.post(url + "/v1/completions", json=body) as resp:
        resp.raise_for_status()
        async for chunk in resp.content.iter_any():
            now = time.monotonic()
            for ev in parser.feed(chunk):
                if ev is not DONE and isinstance(ev, dict) and ev.get("choices"):
                    times.append(now)
    return times


async def measure(prefill_url: str, decode_url: str, model: str = "tiny", vocab: tuple[int, int] = (16, 1024),
                  reps: int = 3, seed: int = 10_000) -> list[dict]:
    rows = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        for n in PREFILL_TOKENS:
            for r in range(reps):
                ms = await _prefill_ms(session, prefill_url, model, _prompt(seed + n * 10 + r, n, *vocab))
                rows.append({"phase": "prefill", "tokens": n, "attn_pairs": n * n / 2, "batch": "", "kv_tokens": "",
                             "step_ms": round(ms, 3)})
        for b in DECODE_BATCHES:
            streams = await asyncio.gather(*(
                _stream_times(session, decode_url, model, _prompt(seed + 50_000 + b * 100 + i, DECODE_CONTEXT, *vocab),
                              DECODE_TOKENS) for i in range(b)))
            start = max(s[0] for s in streams)  # every stream decoding: the batch is full
            gaps = [(t2 - t1) * 1000 for s in streams for t1, t2 in zip(s, s[1:]) if t1 >= start]
            if gaps:
                rows.append({"phase": "decode", "tokens": "", "attn_pairs": "", "batch": b,
                             "kv_tokens": b * (DECODE_CONTEXT + DECODE_TOKENS // 2),
                             "step_ms": round(statistics.median(gaps), 3)})
    return rows


def to_csv(rows: list[dict]) -> str:
    cols = ["phase", "tokens", "attn_pairs", "batch", "kv_tokens", "step_ms"]
    return "\n".join([",".join(cols)] + [",".join(str(r[c]) for c in cols) for r in rows]) + "\n"
