"""What the router and the proxy add when they run as a standalone service (`pddbench serve`,
issue 28.5): counters in Prometheus text format at /metrics, one JSON log line per request, and a
/health that asks every engine behind them. The live runs' own fronts leave all three off.

Metrics (prometheus_client, one registry per app):
  pddbench_requests_total{pipeline, status}      requests answered, by the pipeline that served them
  pddbench_handoffs_total{mode}                  PDD handoffs by mode (one_shot, catch_up, relay_finish)
  pddbench_transfer_aborts_total{reason}         WAN KV transfers aborted (singular_flow, relay_finish, md_error)
  pddbench_wan_kv_bytes_total                    KV bytes booked across the WAN
  pddbench_wan_token_id_bytes_total              token-id bytes of handoffs across the WAN
  pddbench_rdma_kv_bytes_total                   KV bytes moved inside datacenter A (P -> RLD)
  pddbench_requests_in_flight                    requests being served now"""

from __future__ import annotations

import asyncio
import json
import logging
import time

import aiohttp
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, generate_latest

ON_ACCOUNT = web.AppKey("on_account", object)  # callable(status: int, account: dict), set by a service
LOG = logging.getLogger("pddbench.serve")


class ServiceMetrics:
    def __init__(self):
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("pddbench_requests", "requests answered", ["pipeline", "status"], registry=r)
        self.handoffs = Counter("pddbench_handoffs", "PDD handoffs by mode", ["mode"], registry=r)
        self.aborts = Counter("pddbench_transfer_aborts", "WAN KV transfers aborted", ["reason"], registry=r)
        self.wan_kv = Counter("pddbench_wan_kv_bytes", "KV bytes across the WAN", registry=r)
        self.wan_ids = Counter("pddbench_wan_token_id_bytes", "token-id bytes across the WAN", registry=r)
        self.rdma_kv = Counter("pddbench_rdma_kv_bytes", "KV bytes inside datacenter A", registry=r)
        self.in_flight = Gauge("pddbench_requests_in_flight", "requests being served", registry=r)

    def account(self, status: int, acc: dict) -> None:
        """Count one answered request from its `pdd` account (the router's Trip, or the proxy's)."""
        self.requests.labels(acc.get("pipeline") or "unknown", str(status)).inc()
        mode = acc.get("handoff_mode")
        if mode and mode != "none":
            self.handoffs.labels(mode).inc()
        if acc.get("transfer_aborted"):
            self.aborts.labels(acc.get("transfer_abort_reason") or "unknown").inc()
        self.wan_kv.inc(acc.get("wan_kv_bytes") or 0)
        self.wan_ids.inc(acc.get("wan_token_id_bytes") or 0)
        self.rdma_kv.inc(acc.get("rdma_kv_bytes") or 0)


def add_service(app: web.Application, engines: dict[str, str], session_of) -> ServiceMetrics:
    """Turn a front's app into a service: /metrics, /health over `engines` (role -> base URL, asked
    through the app's own client session, `session_of(app)`), a JSON log line per request."""
    metrics = ServiceMetrics()

    def on_account(status: int, acc: dict) -> None:
        metrics.account(status, acc)
        LOG.info(json.dumps({"event": "request", "status": status, **{k: acc.get(k) for k in LOGGED}}))

    @web.middleware
    async def in_flight(request: web.Request, handler):
        if request.path != "/v1/completions":
            return await handler(request)
        metrics.in_flight.inc()
        try:
            return await handler(request)
        finally:
            metrics.in_flight.dec()

    async def metrics_view(_request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def health(request: web.Request) -> web.Response:
        session = session_of(request.app)

        async def ask(url: str) -> str:
            try:
                async with session.get(url + "/health", timeout=HEALTH_TIMEOUT) as resp:
                    return "ok" if resp.status == 200 else f"HTTP {resp.status}"
            except Exception as exc:  # any failure to answer is the engine's state, reported
                return f"unreachable: {type(exc).__name__}"
        states = dict(zip(engines, await asyncio.gather(*(ask(u) for u in engines.values()))))
        ok = all(s == "ok" for s in states.values())
        return web.json_response({"status": "ok" if ok else "degraded", "engines": states}, status=200 if ok else 503)

    app[ON_ACCOUNT] = on_account
    app.middlewares.append(in_flight)
    app.router.add_get("/metrics", metrics_view)
    app.router.add_get("/health/engines", health)
    return metrics


HEALTH_TIMEOUT = aiohttp.ClientTimeout(total=2.0)  # an engine slower than this to say it is alive is not
LOGGED = ("pipeline", "handoff_mode", "prefill_ms", "d_first_token_ms", "wan_kv_ms", "handoff_ms", "relay_tokens",
          "main_tokens", "wan_kv_bytes", "wan_token_id_bytes", "transfer_aborted", "transfer_abort_reason",
          "singular_flow", "md_error")


class JsonLines(logging.Formatter):
    """A log record as one JSON object: its time, level and message (a request's JSON merged in)."""

    def format(self, record: logging.LogRecord) -> str:
        base = {"ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
                "level": record.levelname.lower(), "logger": record.name}
        msg = record.getMessage()
        try:
            body = json.loads(msg)
        except ValueError:
            body = None
        return json.dumps({**base, **body} if isinstance(body, dict) else {**base, "message": msg})
