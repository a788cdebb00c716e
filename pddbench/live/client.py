"""The replay client: drives an OpenAI-compatible server with streaming /v1/completions.

TTFT starts when the request is handed to an already-open connection (connections are opened
and kept warm before the run, so pool growth never lands in TTFT) and stops when the first
token's bytes are read. All times are time.monotonic() (CLOCK_MONOTONIC), in ms from run start.
Failures (HTTP errors, timeouts, refused connections, malformed streams) become failed records;
a dead server ends the run with everything measured kept.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable

import aiohttp
import orjson

from pddbench.live.sse import DONE, SSEError, SSEParser
from pddbench.live.upstream import IDLE_CONNECTION_S
from pddbench.metrics.records import derive_latencies


@dataclass
class LiveRequest:
    request_id: int
    intended_s: float
    prompt: list[int]
    output_tokens: int
    hash_ids: list[int] = field(default_factory=list)
    session_id: int = -1
    turn: int = -1


@dataclass
class Outcome:
    req: LiveRequest
    send_s: float = math.nan
    token_times_s: list[float] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    cached_tokens: int = 0
    failure: str = ""
    server: dict = field(default_factory=dict)  # extra fields a test endpoint reports


WARM_TIMEOUT_S = 10.0  # the warm-up's own limit: a server that never answers it fails the run fast
REASON_CHARS = 200  # a server's error message kept in failure_reason, cut to this length


class BadResponse(ValueError):
    """A well-formed event whose fields do not have the OpenAI schema's types."""


def _now() -> float:
    return time.monotonic()


SPIN_S = 0.0015


async def _wait_until(target: float) -> None:
    """Sleep until just before `target`, then yield in a tight loop: timers fire up to a
    millisecond early or late, and a request sent early would understate its lag."""
    delay = target - _now() - SPIN_S
    if delay > 0:
        await asyncio.sleep(delay)
    while _now() < target:
        await asyncio.sleep(0)


class ReplayClient:
    def __init__(self, endpoint: str, model: str, timeout_s: float = 600.0, max_connections: int = 1024,
                 extra_body: dict | None = None):
        self.url = endpoint.rstrip("/") + "/v1/completions"
        self.base = endpoint.rstrip("/")
        self.model, self.timeout_s = model, timeout_s
        self.max_connections = max_connections
        self.extra_body = extra_body or {}

    def body(self, req: LiveRequest) -> dict:
        return {"model": self.model, "prompt": req.prompt, "max_tokens": req.output_tokens, "min_tokens": req.output_tokens,
                "ignore_eos": True, "temperature": 0.0, "stream": True, "return_token_ids": True,
                "stream_options": {"include_usage": True, "continuous_usage_stats": False}, **self.extra_body}

    async def _warm(self, session: aiohttp.ClientSession, n: int) -> bool:
        """Open n connections; False when no ping was answered within WARM_TIMEOUT_S (a server
        that accepts connections and never answers)."""
        limit = aiohttp.ClientTimeout(total=WARM_TIMEOUT_S, sock_connect=WARM_TIMEOUT_S)

        async def ping() -> bool:
            try:
                async with session.get(self.base + "/v1/models", timeout=limit) as resp:
                    await resp.read()
                return True
            except asyncio.TimeoutError:
                return False
            except aiohttp.ClientError:
                return True  # refused or reset: the requests will say so themselves
        return any(await asyncio.gather(*(ping() for _ in range(n))))

    async def _one(self, session: aiohttp.ClientSession, req: LiveRequest, t0: float, out: Outcome) -> None:
        parser = SSEParser()
        out.send_s = _now() - t0
        try:
            async with session.post(self.url, json=self.body(req)) as resp:
                if resp.status != 200:
                    out.failure = _reason(f"http_{resp.status}", _error_message(await resp.read()))
                    return
                async for chunk in resp.content.iter_any():
                    arrived = _now() - t0
                    for ev in parser.feed(chunk):
                        self._event(ev, arrived, out)
                for ev in parser.close():
                    self._event(ev, _now() - t0, out)
            if not out.token_times_s and not out.failure:
                out.failure = "no_tokens"
        except SSEError:
            out.failure = "malformed_stream"
        except BadResponse as exc:
            out.failure = _reason("bad_response", str(exc))
        except asyncio.TimeoutError:
            out.failure = "timeout"
        except aiohttp.ClientConnectionError:
            out.failure = "connection_error"
        except aiohttp.ClientError as exc:
            out.failure = f"client_error:{type(exc).__name__}"
        except asyncio.CancelledError:
            out.failure = "interrupted"
            raise

    @staticmethod
    def _event(ev: object, arrived: float, out: Outcome) -> None:
        if ev is DONE or out.failure:
            return
        if not isinstance(ev, dict):
            raise BadResponse(f"event is {type(ev).__name__}, not an object")
        if "error" in ev:
            out.failure = _reason("server_error", _message_of(ev["error"]))
            return
        for choice in _typed(ev.get("choices"), list, "choices") or []:
            _choice(_typed(choice, dict, "choices[]"), arrived, out)
        usage = _typed(ev.get("usage"), dict, "usage")
        if usage:
            details = _typed(usage.get("prompt_tokens_details"), dict, "usage.prompt_tokens_details") or {}
            out.cached_tokens = _count(details.get("cached_tokens"), "usage.prompt_tokens_details.cached_tokens")
        if "server_timing" in ev:
            out.server = _typed(ev["server_timing"], dict, "server_timing") or {}
        if isinstance(ev.get("pdd"), dict):  # the PDD router's account of the request
            out.server = ev["pdd"]

    async def run(self, reqs: list[LiveRequest], concurrency: int | None = None,
                  on_done: Callable[[Outcome], None] | None = None,
                  outcomes: list[Outcome] | None = None,
                  start: Callable[[], Awaitable[float]] | None = None) -> tuple[list[Outcome], float]:
        """Send every request at its intended offset (or keep `concurrency` in flight); returns
        the outcomes and the run's monotonic start time. Pass `outcomes` (empty) to keep what
        was measured when the run is interrupted. `start`, awaited once the connections are
        warm, gives the start instant (monotonic s) when several clients share one schedule."""
        timeout = aiohttp.ClientTimeout(total=self.timeout_s, sock_connect=10)
        limit = concurrency or self.max_connections
        # a colocated run's front is vLLM itself: let idle connections go before it closes them
        connector = aiohttp.TCPConnector(limit=limit, force_close=False, enable_cleanup_closed=True,
                                         keepalive_timeout=IDLE_CONNECTION_S)
        if outcomes is None:
            outcomes = []
        outcomes[:] = [Outcome(r) for r in reqs]
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            t0 = _now()
            if not await self._warm(session, min(limit, max(1, len(reqs)), 64)):
                for o in outcomes:
                    o.send_s, o.failure = _now() - t0, f"warmup_timeout: no answer to GET /v1/models in {WARM_TIMEOUT_S:g} s"
                    if on_done:
                        on_done(o)
                return outcomes, t0
            t0 = await start() if start else _now()
            await _wait_until(t0)
            if concurrency:
                sem = asyncio.Semaphore(concurrency)

                async def bounded(o: Outcome) -> None:
                    async with sem:
                        o.req.intended_s = _now() - t0
                        await self._one(session, o.req, t0, o)
                    if on_done:
                        on_done(o)
                await asyncio.gather(*(bounded(o) for o in outcomes))
                return outcomes, t0
            tasks = []
            try:
                for o in outcomes:
                    await _wait_until(t0 + o.req.intended_s)
                    task = asyncio.create_task(self._one(session, o.req, t0, o))
                    if on_done:
                        task.add_done_callback(lambda _t, o=o: on_done(o))
                    tasks.append(task)
                await asyncio.gather(*tasks)
            finally:  # interrupted: end the requests in flight before the session closes under them
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
        return outcomes, t0


def keep_sent(outcomes: list[Outcome]) -> list[Outcome]:
    """After Ctrl-C: the requests that were sent; one still in flight is failed as 'interrupted'."""
    sent = [o for o in outcomes if not math.isnan(o.send_s)]
    for o in sent:
        if not o.failure and not o.token_times_s:  # the client's cancellation did not reach it
            o.failure = "interrupted"
    return sent


def _typed(value, kind: type, name: str):
    if value is not None and not isinstance(value, kind):
        raise BadResponse(f"{name} is {type(value).__name__}, not {kind.__name__}")
    return value


def _count(value, name: str) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadResponse(f"{name} is {value!r}, not a count")
    return value


def _choice(choice: dict, arrived: float, out: Outcome) -> None:
    ids = _typed(choice.get("token_ids"), list, "choices[].token_ids")
    if ids and not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise BadResponse("choices[].token_ids holds something other than integers")
    text = _typed(choice.get("text"), str, "choices[].text")
    n = len(ids) if ids else (1 if text else 0)
    if ids:
        out.token_ids.extend(ids)
    out.token_times_s.extend([arrived] * n)


def _message_of(error: object) -> str:
    if isinstance(error, dict):
        error = error.get("message", error)
    return str(error)


def _error_message(body: bytes) -> str:
    """The message of an OpenAI-style (JSON) error body; '' for anything else."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return ""
    return _message_of(obj.get("error", obj) if isinstance(obj, dict) else obj)


def _reason(kind: str, message: str) -> str:
    message = " ".join(message.split())[:REASON_CHARS]
    return f"{kind}: {message}" if message else kind


def run_sync(coro):
    """Run the client on uvloop: a faster loop keeps dispatch and timestamping tight."""
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


def outcome_record(o: Outcome, pipeline: str = "colocated") -> dict:
    """An Outcome as a row of the shared record schema (pddbench/metrics/records.py)."""
    req, nan = o.req, math.nan
    failed = bool(o.failure) or not o.token_times_s
    times_ms = [t * 1000 for t in o.token_times_s]
    arrival = o.send_s * 1000
    first = times_ms[0] if times_ms else nan
    finish = times_ms[-1] if times_ms else nan
    gaps = [b - a for a, b in zip(times_ms, times_ms[1:])]
    produced = len(times_ms)
    router = _router_fields(o.server, gaps, arrival) if "pipeline" in o.server else {}
    prefill_end = router.get("prefill_end_ms", nan)
    row = {
        "request_id": req.request_id, "session_id": req.session_id, "turn": req.turn,
        "arrival_ms": arrival, "input_tokens": len(req.prompt), "output_tokens": produced if failed else max(produced, 1),
        "p_cached_tokens": o.cached_tokens, "decode_cached_tokens": 0, "pipeline": pipeline, "offload_reason": "",
        "handoff_mode": "none",
        "prefill_start_ms": nan, "prefill_end_ms": nan,
        "first_token_ms": nan if failed else first, "finish_ms": nan if failed else finish,
        **derive_latencies(arrival, first, finish, produced, failed, prefill_end),
        "max_itl_ms": max(gaps) if gaps else 0.0,
        "schedule_lag_ms": (o.send_s - req.intended_s) * 1000, "wan_kv_ms": nan,
        "relay_tokens": 0, "main_tokens": produced, "handoff_ms": nan, "handoff_stall_ms": nan, "relay_busy_ms": 0.0,
        "rdma_kv_bytes": 0, "wan_kv_bytes": 0, "wan_token_id_bytes": 0, "wan_kv_bytes_saved": 0,
        "transfer_aborted": False, "transfer_abort_reason": "", "singular_flow": False, "failed": failed,
        "failure_reason": o.failure or ("no_tokens" if failed else ""),
    }
    row.update(router)
    return row


_ROUTER_FIELDS = ("pipeline", "handoff_mode", "relay_tokens", "main_tokens", "decode_cached_tokens", "wan_kv_ms",
                  "handoff_ms", "relay_busy_ms", "rdma_kv_bytes", "wan_kv_bytes", "wan_token_id_bytes",
                  "wan_kv_bytes_saved", "transfer_aborted", "transfer_abort_reason", "singular_flow")


def _router_fields(pdd: dict, gaps: list[float], arrival_ms: float) -> dict:
    """The PDD router's per-request account (its last chunk) as record fields. The stall is
    measured here, where the user is: the one gap at the switch, the relay's last token (index
    relay_tokens - 1) -> MD's first (index relay_tokens)."""
    row = {k: (math.nan if pdd.get(k) is None else pdd[k]) for k in _ROUTER_FIELDS if k in pdd}
    row["transfer_abort_reason"] = str(pdd.get("transfer_abort_reason") or "")
    relay = int(pdd.get("relay_tokens") or 0)
    if pdd.get("handoff_mode") in ("one_shot", "catch_up") and pdd.get("main_tokens") and 0 < relay <= len(gaps):
        row["handoff_stall_ms"] = gaps[relay - 1]
    if pdd.get("prefill_ms") is not None:
        row["prefill_end_ms"] = arrival_ms + pdd["prefill_ms"]
    return row
