"""`pddbench replay-bench`: how precisely the replay client measures and keeps its schedule.

A fixed-latency endpoint (pddbench.live.fixed_server) runs on one core, the client on another;
at the given rate the client's TTFT is compared with the server's own TTFT for every request
(same CLOCK_MONOTONIC), and its actual send times with the schedule."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pddbench.core.io import write_json
from pddbench.live.client import LiveRequest, ReplayClient, run_sync
from pddbench.live.net import free_port, wait_port
from pddbench.live.schedule import at_rate
from pddbench.metrics.percentiles import distribution


def measure(rate_rps: float, duration_s: float, arrival: str = "poisson", ttft_ms: float = 50.0,
            itl_ms: float = 10.0, tokens: int = 8, seed: int = 0, pin: bool = True) -> dict:
    port = free_port()
    ncpu = os.cpu_count() or 1
    server_cpu, client_cpu = (1 % ncpu), 0
    server = subprocess.Popen(
        [sys.executable, "-m", "pddbench.live.fixed_server", "--port", str(port), "--ttft-ms", str(ttft_ms),
         "--itl-ms", str(itl_ms)],
        preexec_fn=(lambda: os.sched_setaffinity(0, {server_cpu})) if pin else None)
    old_affinity = os.sched_getaffinity(0)
    try:
        wait_port("127.0.0.1", port, timeout_s=20.0)
        if pin:
            os.sched_setaffinity(0, {client_cpu})
        n = max(1, int(rate_rps * duration_s))
        reqs = [LiveRequest(i, t, [1, 2, 3, 4], tokens) for i, t in enumerate(at_rate(n, rate_rps, arrival, seed))]
        client = ReplayClient(f"http://127.0.0.1:{port}", "fixed", timeout_s=60)
        outcomes, _ = run_sync(client.run(reqs))
    finally:
        os.sched_setaffinity(0, old_affinity)
        server.terminate()
        server.wait(timeout=10)
    ok = [o for o in outcomes if not o.failure and o.server]
    errors = [((o.token_times_s[0] - o.send_s) * 1000) - o.server["ttft_ms"] for o in ok]
    lags = [(o.send_s - o.req.intended_s) * 1000 for o in outcomes]
    return {
        "rate_rps": rate_rps, "arrival": arrival, "requests": len(outcomes), "failed": len(outcomes) - len(ok),
        "server_ttft_ms": ttft_ms, "pinned": pin,
        "ttft_error_ms": distribution(errors), "schedule_lag_ms": distribution(lags),
    }


def replay_bench(rates: list[float], duration_s: float, arrival: str, ttft_ms: float, out: Path | None) -> list[dict]:
    """`pddbench replay-bench`: measure() at each rate; also writes OUT/replay_bench.json when asked."""
    results = [measure(r, duration_s, arrival, ttft_ms) for r in rates]
    if out is not None:
        write_json(out / "replay_bench.json", results)
    return results


def describe(res: dict) -> str:
    """One terminal line per rate: TTFT error and schedule lag."""
    e, lag = res["ttft_error_ms"], res["schedule_lag_ms"]
    return (f"{res['rate_rps']:g} req/s ({res['requests']} requests, {res['failed']} failed): TTFT error "
            f"p50 {e['p50']:.2f} / p99 {e['p99']:.2f} ms; schedule lag p50 {lag['p50']:.2f} / p99 {lag['p99']:.2f} ms")
