"""Step times of real engines, for the simulator's calibrated latency model
(pddbench/sim/latency.py, `Calibrated`): prefill time against prompt length on P, decode step time
against batch size and context on D. Rows use the CSV columns the model fits:
phase,tokens,attn_pairs,batch,kv_tokens,step_ms, and cached_tokens (the prefix a prefill extends;
read by people, not by the fit).

Prefill: prompts with max_tokens 1, time to the response (so the HTTP hop is included, as it is in
every live TTFT); with a separate decoder, asked as the PD front asks P (do_remote_decode: P keeps
the KV for D), and 16/64-token prefills timed both ways into prefill_body_check.csv. The shapes are those the live traces have: most agentic requests compute a few
dozen new tokens over a cached context (the trace's median is ~22 new tokens over ~1,500 cached),
a few compute thousands. So besides uncached prompts from 16 to 4096 tokens, small extends (16 to
256 new tokens) over a cached context of 512 to 4096 tokens: one uncached 4096-token prompt warms
P's prefix cache, and each extend reuses its first `cached` tokens (a multiple of vLLM's 128-token
block, so they hit) with fresh tokens after them. Each row's `cached_tokens` says which; its
attn_pairs = tokens * (cached + tokens / 2), as the simulator counts a step. The reps go round
the shapes (rep r of every shape, then rep r + 1), so a burst of load from other work on the host
spreads over the shapes instead of falling on one. Decode: `batch` concurrent streams; the step
time is the mean gap between tokens once all have started, as TPOT averages a request's gaps (the
median, used before, left out the stalls a host shared with other work puts into every live TPOT:
on the 2-core AVX2 host under a load average of ~5, live TPOT p50 42 ms against a 22 ms twin)."""

from __future__ import annotations

import asyncio
import statistics
import time

from pddbench.live.sse import DONE, SSEParser
from pddbench.live.upstream import engine_session, post

# uncached prompt lengths: many small ones (the trace's typical extend) up to the longest the live traces have
PREFILL_TOKENS = (16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 2048, 4096, 6144)
# (new tokens, cached tokens before them): extends over a context in P's prefix cache
EXTEND_SHAPES = ((16, 512), (16, 1536), (16, 4096), (32, 1536), (64, 1536), (64, 4096), (256, 4096))
WARM_TOKENS = 4096  # the cached context every extend reuses a prefix of (>= every EXTEND_SHAPES cached)
# (batch, context tokens per sequence): batch and KV size vary independently for the fit
DECODE_SHAPES = ((1, 512), (2, 512), (4, 512), (8, 512), (1, 3072), (4, 3072))
DECODE_TOKENS = 24


def _prompt(seed: int, n: int, lo: int, hi: int) -> list[int]:
    """Random tokens, distinct per seed, so nothing hits the prefix cache. (The former formula,
    lo + (seed * 7919 + ...) % (hi - lo), repeated itself every 1008 seeds: the 4096-token
    prefill's prompt began with the 128-token transfer probe's.)"""
    import numpy as np

    return [int(t) for t in np.random.default_rng(seed).integers(lo, hi, n)]


async def _prefill_ms(session, url: str, model: str, prompt: list[int], remote_decode: bool = False) -> float:
    """One prefill, timed to P's answer. `remote_decode`: asked as the PD front asks P (P keeps the
    KV for a decoder that will pull it), the request live P serves."""
    from pddbench.live.kv_requests import remote_decode_prefill_body

    body = {"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0.0}
    t0 = time.monotonic()
    async with await post(session, url + "/v1/completions",
                          remote_decode_prefill_body(body) if remote_decode else body) as resp:
        await resp.read()
        resp.raise_for_status()
    return (time.monotonic() - t0) * 1000


async def _stream_times(session, url: str, model: str, prompt: list[int], n: int) -> list[float]:
    body = {"model": model, "prompt": prompt, "max_tokens": n, "min_tokens": n, "ignore_eos": True,
            "temperature": 0.0, "stream": True}
    times, parser = [], SSEParser()
    async with await post(session, url + "/v1/completions", body) as resp:
        resp.raise_for_status()
        async for chunk in resp.content.iter_any():
            now = time.monotonic()
            for ev in parser.feed(chunk):
                if ev is not DONE and isinstance(ev, dict) and ev.get("choices"):
                    times.append(now)
    return times


def _prefill_row(new: int, cached: int, ms: float) -> dict:
    return {"phase": "prefill", "tokens": new, "attn_pairs": new * (cached + new / 2), "batch": "", "kv_tokens": "",
            "step_ms": round(ms, 3), "cached_tokens": cached}


BODY_CHECK_TOKENS = (16, 64)  # prefills timed both ways (PD body and plain), to see what the PD body costs P
# (name, PD body, pause before, s): back to back as the calibration times, and after an idle second
# as live requests mostly arrive (does an engine that waited answer slower?)
BODY_CHECK_WAYS = (("pd", True, 0.0), ("plain", False, 0.0), ("pd_after_idle_1s", True, 1.0))


async def measure(prefill_url: str, decode_url: str, model: str = "tiny", vocab: tuple[int, int] = (16, 1024),
                  reps: int = 3, seed: int = 10_000, remote_decode: bool = False,
                  body_check: list[dict] | None = None) -> list[dict]:
    """Step-time rows. `remote_decode`: P's prefills are asked as the PD front asks them (P keeps
    the KV for a remote decoder); `body_check`, when given, gets rows timing BODY_CHECK_TOKENS
    both ways (body: pd | plain)."""
    rows = []
    async with engine_session(total_timeout_s=600) as session:
        async def prefill(prompt: list[int]) -> float:
            return await _prefill_ms(session, prefill_url, model, prompt, remote_decode)

        # the context the extends hit: its prefill is one more uncached WARM_TOKENS point
        context = _prompt(seed - 1, WARM_TOKENS, *vocab)
        rows.append(_prefill_row(WARM_TOKENS, 0, await prefill(context)))
        for r in range(reps):
            for n in PREFILL_TOKENS:
                rows.append(_prefill_row(n, 0, await prefill(_prompt(seed + n * 10 + r, n, *vocab))))
            for n, cached in EXTEND_SHAPES:
                fresh = _prompt(seed + 20_000 + cached * 10 + n * 100 + r, n, *vocab)
                rows.append(_prefill_row(n, cached, await prefill(context[:cached] + fresh)))
            if body_check is not None:
                for n in BODY_CHECK_TOKENS:
                    for k, (body, pd_body, pause) in enumerate(BODY_CHECK_WAYS):
                        await asyncio.sleep(pause)
                        prompt = _prompt(seed + 30_000 + n * 10 + r * 4 + k, n, *vocab)
                        ms = await _prefill_ms(session, prefill_url, model, prompt, pd_body)
                        body_check.append({"body": body, "tokens": n, "step_ms": round(ms, 3)})
        for b, ctx in DECODE_SHAPES:
            streams = await asyncio.gather(*(
                _stream_times(session, decode_url, model, _prompt(seed + 50_000 + ctx + b * 100 + i, ctx, *vocab),
                              DECODE_TOKENS) for i in range(b)))
            start = max(s[0] for s in streams)  # every stream decoding: the batch is full
            gaps = [(t2 - t1) * 1000 for s in streams for t1, t2 in zip(s, s[1:]) if t1 >= start]
            if gaps:
                rows.append({"phase": "decode", "tokens": "", "attn_pairs": "", "batch": b,
                             "kv_tokens": b * (ctx + DECODE_TOKENS // 2),
                             "step_ms": round(statistics.fmean(gaps), 3), "cached_tokens": ""})
    return rows


async def _lease(session, prefill_url: str, body: dict) -> dict:
    """P prefills `body` keeping the KV for a remote decoder; returns its kv_transfer_params."""
    from pddbench.live.kv_requests import remote_decode_prefill_body

    async with await post(session, prefill_url + "/v1/completions", remote_decode_prefill_body(body)) as resp:
        resp.raise_for_status()
        return (await resp.json())["kv_transfer_params"]


async def _pull(session, url: str, body: dict, kv: dict) -> float:
    """The decoder at `url` pulls that KV and answers one token; returns when it answered."""
    from pddbench.live.kv_requests import one_token_body

    async with await post(session, url + "/v1/completions", one_token_body(body, kv_transfer_params=kv)) as resp:
        await resp.read()
        resp.raise_for_status()
    return time.monotonic()


TRANSFER_TOKENS = (128, 512, 1024, 2048, 4096)  # 128: one block, what a mostly cached prompt moves


async def measure_kv_transfer(prefill_url: str, decode_url: str, kv_bytes_per_token: int, model: str = "tiny",
                              vocab: tuple[int, int] = (16, 1024), reps: int = 3, seed: int = 90_000) -> list[dict]:
    """P -> D KV transfer through the connector: P prefills an uncached prompt with
    do_remote_decode; the time from then until D answers a one-token request with P's
    kv_transfer_params is the pull plus D's one-token step (`pddbench fidelity` subtracts D's
    calibrated batch-1 step from the fitted fixed part, since the twin simulates that step)."""
    rows = []
    async with engine_session(total_timeout_s=600) as session:
        for n in TRANSFER_TOKENS:
            for r in range(reps):
                body = {"model": model, "prompt": _prompt(seed + n * 10 + r, n, *vocab), "temperature": 0.0}
                kv = await _lease(session, prefill_url, body)
                t0 = time.monotonic()
                t1 = await _pull(session, decode_url, body, kv)
                rows.append({"tokens": n, "kv_bytes": n * kv_bytes_per_token, "transfer_ms": round((t1 - t0) * 1000, 3)})
    return rows


RELAY_TRANSFER_CSV = "kv_transfer_relay_calibration.csv"  # PDD: P -> RLD, as kv_transfer_calibration.csv


async def measure_relay_transfer(prefill_url: str, relay_url: str, main_url: str, kv_bytes_per_token: int,
                                 model: str = "tiny", vocab: tuple[int, int] = (16, 1024), reps: int = 3,
                                 seed: int = 97_000, sizes: tuple[int, ...] = TRANSFER_TOKENS) -> list[dict]:
    """PDD's P -> RLD pull as the router's dual path makes it: P prefills (do_remote_decode), RLD
    is asked for one token with that KV and, at once, P is asked again (MD's own lease, a prefix
    hit) and MD pulls that lease across the WAN, as pddbench/live/router/flow.py does. The time
    until RLD answers is the pull plus RLD's one-token step, with what competes with it live: P's
    second step (UCX over TCP progresses the read on the core that computes) and MD's pull on the
    core RLD shares. Rows as measure_kv_transfer's."""
    rows = []
    async with engine_session(total_timeout_s=600) as session:
        for r in range(reps):  # reps go round the sizes, as measure() does
            for n in sizes:
                body = {"model": model, "prompt": _prompt(seed + n * 10 + r, n, *vocab), "temperature": 0.0}
                kv = await _lease(session, prefill_url, body)
                t0 = time.monotonic()
                relay = asyncio.ensure_future(_pull(session, relay_url, body, kv))
                kv2 = await _lease(session, prefill_url, body)
                main = asyncio.ensure_future(_pull(session, main_url, body, kv2))
                t_relay, _ = await asyncio.gather(relay, main)
                rows.append({"tokens": n, "kv_bytes": n * kv_bytes_per_token, "transfer_ms": round((t_relay - t0) * 1000, 3)})
    return rows


BUSY_CHECK_CSV = "kv_transfer_busy_check.csv"
BUSY_TRANSFER_TOKENS = 512  # the busy check's transfer: a few blocks, like most live requests'
BUSY_PREFILL_TOKENS = 2048   # what keeps P computing during the "p_busy" pulls
BUSY_DECODE_STREAMS = 2      # what keeps D decoding during the "d_busy" pulls


async def measure_busy_transfers(prefill_url: str, decode_url: str, model: str = "tiny",
                                 vocab: tuple[int, int] = (16, 1024), reps: int = 5,
                                 seed: int = 95_000, relay_url: str | None = None) -> list[dict]:
    """The P -> D pull of a BUSY_TRANSFER_TOKENS prompt in three engine states: both idle (what
    measure_kv_transfer times), P computing another prompt's prefill, D decoding other streams.
    Live, transfers happen in all three; the twin takes d_busy's extra time over idle for pulls
    into a decoding D (pddbench/measure/fidelity.py _busy_extra). With PDD's relay, also its local
    P -> RLD pull with RLD idle ("rld_idle") and decoding other streams ("rld_busy"): in live PDD
    runs that pull took ~100 ms more while the relay decoded, where the WAN pull into MD hardly
    changed. Rows: state, tokens, transfer_ms."""
    rows = []
    async with engine_session(total_timeout_s=600) as session:
        async def one(state: str, k: int) -> None:
            body = {"model": model, "prompt": _prompt(seed + k, BUSY_TRANSFER_TOKENS, *vocab), "temperature": 0.0}
            kv = await _lease(session, prefill_url, body)
            into = relay_url if state.startswith("rld_") else decode_url
            load = None
            if state == "p_busy":
                load = asyncio.ensure_future(_prefill_ms(session, prefill_url, model,
                                                         _prompt(seed + 500 + k, BUSY_PREFILL_TOKENS, *vocab)))
            elif state in ("d_busy", "rld_busy"):
                load = asyncio.gather(*(_stream_times(session, into, model,
                                                      _prompt(seed + 1000 + k * 10 + i, 32, *vocab), 64)
                                        for i in range(BUSY_DECODE_STREAMS)))
            if load is not None:
                await asyncio.sleep(0.3)  # P inside its prefill / the decoder's streams decoding
            t0 = time.monotonic()
            t1 = await _pull(session, into, body, kv)
            rows.append({"state": state, "tokens": BUSY_TRANSFER_TOKENS, "transfer_ms": round((t1 - t0) * 1000, 3)})
            if load is not None:
                await load

        states = ("idle", "p_busy", "d_busy") + (("rld_idle", "rld_busy") if relay_url else ())
        for r in range(reps):
            for j, state in enumerate(states):
                await one(state, r * len(states) + j)
    return rows


CORE_SHARE_CSV = "core_share_check.csv"
CORE_SHARE_PULL_TOKENS = 4096  # MD's WAN pull while the relay decodes: ~1.3 s over the live WAN
CORE_SHARE_CONTEXT_TOKENS = 64  # the relay's timed stream: a 32-token prompt, 64 tokens out (mean context)


async def measure_core_sharing(prefill_url: str, relay_url: str, main_url: str, model: str = "tiny",
                               vocab: tuple[int, int] = (16, 1024), reps: int = 3, seed: int = 98_000) -> list[dict]:
    """PDD's RLD and MD share a core: the relay's time per token (one 64-token stream, mean gap)
    with MD idle, MD pulling a CORE_SHARE_PULL_TOKENS prompt's KV over the WAN ("md_pull") and
    MD decoding BUSY_DECODE_STREAMS streams ("md_decode"). Fair time-slicing would double it; the
    twin takes the measured ratio (pddbench/measure/fidelity.py). Rows: state, tpot_ms."""
    async def md_pull(session, k: int) -> None:
        body = {"model": model, "prompt": _prompt(seed + 100 + k, CORE_SHARE_PULL_TOKENS, *vocab), "temperature": 0.0}
        await _pull(session, main_url, body, await _lease(session, prefill_url, body))

    rows = []
    async with engine_session(total_timeout_s=600) as session:
        for r in range(reps):
            for j, state in enumerate(("idle", "md_pull", "md_decode")):
                k = r * 3 + j
                load = None
                if state == "md_pull":
                    load = asyncio.ensure_future(md_pull(session, k))
                elif state == "md_decode":
                    load = asyncio.gather(*(_stream_times(session, main_url, model,
                                                          _prompt(seed + 1000 + k * 10 + i, 32, *vocab), 200)
                                            for i in range(BUSY_DECODE_STREAMS)))
                if load is not None:
                    await asyncio.sleep(0.2)  # MD's pull under way / its streams decoding
                times = await _stream_times(session, relay_url, model, _prompt(seed + k, 32, *vocab), 64)
                gaps = [b - a for a, b in zip(times, times[1:])]
                rows.append({"state": state, "tpot_ms": round(sum(gaps) / len(gaps) * 1000, 3)})
                if load is not None:
                    await load
    return rows


def fit_link(rows: list[dict]) -> dict:
    """transfer_ms = delay_ms + kv_bytes / rate, fitted to the median of each size (one slow
    outlier must not move the line) -> a link profile for the twin. A flat or falling line means
    size does not matter at these sizes: rate unlimited (None)."""
    import numpy as np

    sizes = sorted({r["kv_bytes"] for r in rows})
    x = np.array(sizes, dtype=float)
    y = np.array([np.median([r["transfer_ms"] for r in rows if r["kv_bytes"] == b]) for b in sizes])
    slope, intercept = np.polyfit(x, y, 1) if len(sizes) > 1 else (0.0, float(y[0]))
    if slope <= 0:
        return {"delay_ms": round(float(np.median(y)), 3), "rate_gbps": None}
    return {"delay_ms": round(max(0.0, float(intercept)), 3), "rate_gbps": round(8 / slope / 1e6, 6)}


def to_csv(rows: list[dict], cols: list[str] | None = None) -> str:
    cols = cols or ["phase", "tokens", "attn_pairs", "batch", "kv_tokens", "step_ms", "cached_tokens"]
    return "\n".join([",".join(cols)] + [",".join(str(r[c]) for c in cols) for r in rows]) + "\n"


async def _calibrate(prefill_url: str, decode_url: str, kv_bytes_per_token: int, vocab: tuple[int, int],
                     relay_url: str | None = None, model: str = "tiny"):
    # with a separate decoder, P is timed on the requests the PD front sends it (KV kept for D)
    check: list[dict] | None = [] if kv_bytes_per_token else None
    steps = await measure(prefill_url, decode_url, model, vocab=vocab, remote_decode=bool(kv_bytes_per_token),
                          body_check=check)
    xfer = await measure_kv_transfer(prefill_url, decode_url, kv_bytes_per_token, model, vocab=vocab) \
        if kv_bytes_per_token else None
    busy = await measure_busy_transfers(prefill_url, decode_url, model, vocab=vocab, relay_url=relay_url) \
        if kv_bytes_per_token else None
    # PDD's local P -> RLD pull (NIXL over UCX TCP on one host, not the RDMA the twin assumes
    # otherwise), beside the dual path's second lease on P and MD's pull, as live
    relay = await measure_relay_transfer(prefill_url, relay_url, decode_url, kv_bytes_per_token, model=model, vocab=vocab) \
        if kv_bytes_per_token and relay_url else None
    share = await measure_core_sharing(prefill_url, relay_url, decode_url, model, vocab=vocab) \
        if kv_bytes_per_token and relay_url else None
    return steps, xfer, check, busy, relay, share


def main(argv: list[str] | None = None) -> None:
    """Runs as its own process so that it can sit in the client's datacenter (`ip netns exec`):
    across the WAN the measured P -> D transfer includes every crossing a live request makes."""
    import argparse
    from pathlib import Path

    from pddbench.core.io import write_text
    from pddbench.live.client import run_sync

    p = argparse.ArgumentParser(description="Measure step times (and the P -> D KV transfer) of running engines.")
    p.add_argument("--prefill", required=True, help="P's URL")
    p.add_argument("--decode", required=True, help="D's URL")
    p.add_argument("--kv-bytes-per-token", type=int, default=0, help="0: skip the KV-transfer measurement")
    p.add_argument("--relay", default=None, help="PDD's RLD URL: also measure the P -> RLD transfer")
    p.add_argument("--vocab", type=int, nargs=2, default=(16, 1024), metavar=("LO", "HI"))
    p.add_argument("--model", default="tiny", help="the served model name")
    p.add_argument("--out", required=True, help="folder for engine_calibration.csv and kv_transfer_calibration.csv")
    a = p.parse_args(argv)
    steps, xfer, check, busy, relay, share = run_sync(_calibrate(a.prefill, a.decode, a.kv_bytes_per_token, tuple(a.vocab),
                                                          a.relay, a.model))
    if busy:  # what the engines' state does to a pull (fidelity: the twin's busy-decoder extra)
        write_text(Path(a.out) / BUSY_CHECK_CSV, to_csv(busy, ["state", "tokens", "transfer_ms"]))
    write_text(Path(a.out) / "engine_calibration.csv", to_csv(steps))
    if check:
        write_text(Path(a.out) / "prefill_body_check.csv", to_csv(check, ["body", "tokens", "step_ms"]))
    if xfer is not None:
        write_text(Path(a.out) / "kv_transfer_calibration.csv", to_csv(xfer, ["tokens", "kv_bytes", "transfer_ms"]))
    if relay is not None:
        write_text(Path(a.out) / RELAY_TRANSFER_CSV, to_csv(relay, ["tokens", "kv_bytes", "transfer_ms"]))
    if share is not None:
        write_text(Path(a.out) / CORE_SHARE_CSV, to_csv(share, ["state", "tpot_ms"]))


if __name__ == "__main__":
    main()
