"""`pddbench replay-bench`: how precisely the replay client measures and keeps its schedule.

A fixed-latency endpoint (pddbench.live.fixed_server) runs on the last core, the client on another
(or `--workers N` client processes, `replay --workers`'s sharded replay, over the other cores);
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
            itl_ms: float = 10.0, tokens: int = 8, seed: int = 0, pin: bool = True, workers: int = 1) -> dict:
    """One rate: the endpoint on the last core, the client (or `workers` client processes, by
    `replay --workers`'s code) on the others; TTFT error and schedule lag, merged and per worker."""
    port = free_port()
    cores = sorted(os.sched_getaffinity(0))
    server_cpu, client_cpus = cores[-1], (cores[:-1] or cores)
    server = subprocess.Popen(
        [sys.executable, "-m", "pddbench.live.fixed_server", "--port", str(port), "--ttft-ms", str(ttft_ms),
         "--itl-ms", str(itl_ms)],
        preexec_fn=(lambda: os.sched_setaffinity(0, {server_cpu})) if pin else None)
    try:
        wait_port("127.0.0.1", port, timeout_s=20.0)
        n = max(1, int(rate_rps * duration_s))
        # no sessions: every request is one of its own, so the split over workers is as even as it can be
        reqs = [LiveRequest(i, t, [1, 2, 3, 4], tokens) for i, t in enumerate(at_rate(n, rate_rps, arrival, seed))]
        endpoint = f"http://127.0.0.1:{port}"
        if workers == 1:
            per_request = _one_client(endpoint, reqs, {client_cpus[0]} if pin else None)
        else:
            per_request = _sharded(endpoint, reqs, workers, [{c} for c in client_cpus] if pin else None)
    finally:
        server.terminate()
        server.wait(timeout=10)
    return _result(rate_rps, arrival, ttft_ms, pin, workers, reqs, per_request)


def _one_client(endpoint: str, reqs: list[LiveRequest], cpus: set[int] | None) -> dict[int, tuple]:
    old_affinity = os.sched_getaffinity(0)
    try:
        if cpus:
            os.sched_setaffinity(0, cpus)
        outcomes, _ = run_sync(ReplayClient(endpoint, "fixed", timeout_s=60).run(reqs))
    finally:
        os.sched_setaffinity(0, old_affinity)
    return {o.req.request_id: ((o.send_s - o.req.intended_s) * 1000,
                               (o.token_times_s[0] - o.send_s) * 1000 - o.server["ttft_ms"]
                               if not o.failure and o.server.get("ttft_ms") is not None else None)
            for o in outcomes}


def _sharded(endpoint: str, reqs: list[LiveRequest], workers: int, cpus: list[set[int]] | None) -> dict[int, tuple]:
    import tempfile

    from pddbench.live.shards import replay_sharded

    server_ttft: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="pddbench-replay-bench-") as tmp:
        records, _accounts, interrupted = replay_sharded(
            endpoint, "fixed", reqs, workers, Path(tmp) / "shards", concurrency=None, timeout_s=60,
            pipeline="colocated", on_progress=lambda _failed, _ttft: None, cpus=cpus, server_ttft_ms=server_ttft)
    if interrupted:
        raise KeyboardInterrupt
    out = {}
    for row in records.itertuples(index=False):
        sent = row.failure_reason != "worker_lost"
        error = row.ttft_ms - server_ttft[row.request_id] if not row.failed and row.request_id in server_ttft else None
        out[int(row.request_id)] = (row.schedule_lag_ms if sent else None, error)
    return out


def _result(rate_rps: float, arrival: str, ttft_ms: float, pin: bool, workers: int, reqs: list[LiveRequest],
            per_request: dict[int, tuple]) -> dict:
    from pddbench.live.shards import assign_sessions

    def summary(ids: list[int]) -> dict:
        rows = [per_request.get(i, (None, None)) for i in ids]
        lags = [lag for lag, _ in rows if lag is not None]
        errors = [err for _, err in rows if err is not None]
        return {"requests": len(ids), "failed": len(ids) - len(errors),
                "ttft_error_ms": distribution(errors), "schedule_lag_ms": distribution(lags)}

    ids = [r.request_id for r in reqs]
    owner = assign_sessions(reqs, workers)
    per_worker = [{"worker": k, **summary([i for i, w in zip(ids, owner) if w == k])} for k in range(workers)]
    return {"rate_rps": rate_rps, "arrival": arrival, "workers": workers, "server_ttft_ms": ttft_ms, "pinned": pin,
            **summary(ids), "per_worker": per_worker}


def replay_bench(rates: list[float], duration_s: float, arrival: str, ttft_ms: float, out: Path | None,
                 workers: list[int] | None = None, max_lag_ms: float = 1.0) -> dict:
    """`pddbench replay-bench`: measure() at each rate and worker count; the highest rate each
    worker count held on schedule (lag p99 <= max_lag_ms, nothing failed). Writes
    OUT/replay_bench.json when asked."""
    counts = workers or [1]
    results = [measure(r, duration_s, arrival, ttft_ms, workers=n) for n in counts for r in rates]
    held = {}
    for n in counts:
        ok = [res["rate_rps"] for res in results if res["workers"] == n and held_schedule(res, max_lag_ms)]
        held[str(n)] = max(ok) if ok else None
    report = {"max_lag_ms": max_lag_ms, "results": results, "highest_rate_held_rps": held}
    if out is not None:
        write_json(out / "replay_bench.json", report)
    return report


def held_schedule(res: dict, max_lag_ms: float) -> bool:
    lag = res["schedule_lag_ms"]["p99"]
    return res["failed"] == 0 and lag is not None and lag <= max_lag_ms


def describe(res: dict) -> str:
    """One terminal line per rate: TTFT error and schedule lag."""
    line = (f"{res['rate_rps']:g} req/s, {res['workers']} worker{'s' if res['workers'] > 1 else ''} "
            f"({res['requests']} requests, {res['failed']} failed): {_pcts(res)}")
    if res["workers"] > 1:
        line += "".join(f"\n  worker {w['worker']} ({w['requests']} requests): {_pcts(w)}" for w in res["per_worker"])
    return line


def _pcts(res: dict) -> str:
    def ms(d: dict, q: str) -> str:
        return "-" if d[q] is None else f"{d[q]:.2f}"
    e, lag = res["ttft_error_ms"], res["schedule_lag_ms"]
    return (f"TTFT error p50 {ms(e, 'p50')} / p99 {ms(e, 'p99')} ms; "
            f"schedule lag p50 {ms(lag, 'p50')} / p99 {ms(lag, 'p99')} ms")
