"""`pddbench replay-bench`: how precisely the replay client measures and keeps its schedule.

A fixed-latency endpoint (pddbench.live.fixed_server) runs on the last core, the client on another
(or `--workers N` client processes, `replay --workers`'s sharded replay, over the other cores);
at the given rate the client's TTFT is compared with the server's own TTFT for every request
(same CLOCK_MONOTONIC), and its actual send times with the schedule."""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

from pddbench.core.io import write_json
from pddbench.live.client import LiveRequest, ReplayClient, run_sync
from pddbench.live.net import free_port, wait_port
from pddbench.live.schedule import at_rate
from pddbench.metrics.percentiles import distribution


@contextmanager
def fixed_endpoint(ttft_ms: float, itl_ms: float, pin: bool):
    """The fixed-latency endpoint on the last core: yields (url, the cores left for clients)."""
    port = free_port()
    cores = sorted(os.sched_getaffinity(0))
    server_cpu, client_cpus = cores[-1], (cores[:-1] or cores)
    server = subprocess.Popen(
        [sys.executable, "-m", "pddbench.live.fixed_server", "--port", str(port), "--ttft-ms", str(ttft_ms),
         "--itl-ms", str(itl_ms)],
        preexec_fn=(lambda: os.sched_setaffinity(0, {server_cpu})) if pin else None)
    try:
        wait_port("127.0.0.1", port, timeout_s=20.0)
        yield f"http://127.0.0.1:{port}", client_cpus
    finally:
        server.terminate()
        server.wait(timeout=10)


def measure(rate_rps: float, duration_s: float, arrival: str = "poisson", ttft_ms: float = 50.0,
            itl_ms: float = 10.0, tokens: int = 8, seed: int = 0, pin: bool = True, workers: int = 1) -> dict:
    """One rate: the client (or `workers` client processes, by `replay --workers`'s code) on the
    cores beside the endpoint's; TTFT error and schedule lag, merged and per worker."""
    n = max(1, int(rate_rps * duration_s))
    # no sessions: every request is one of its own, so the split over workers is as even as it can be
    reqs = [LiveRequest(i, t, [1, 2, 3, 4], tokens) for i, t in enumerate(at_rate(n, rate_rps, arrival, seed))]
    with fixed_endpoint(ttft_ms, itl_ms, pin) as (endpoint, client_cpus):
        if workers == 1:
            per_request = _one_client(endpoint, reqs, {client_cpus[0]} if pin else None)
        else:
            per_request = _sharded(endpoint, reqs, workers, [{c} for c in client_cpus] if pin else None)
    return _result(rate_rps, arrival, ttft_ms, pin, workers, reqs, per_request)


def measure_vllm_bench(rate_rps: float, duration_s: float, arrival: str, ttft_ms: float, tokenizer: Path,
                       log: Path, itl_ms: float = 10.0, tokens: int = 8, seed: int = 0, pin: bool = True) -> dict:
    """The same rate, endpoint and pinning driven by `vllm bench serve`. Its TTFT error is matched
    per request (x-request-id) with the server's own timing; it does not record when it meant to
    send, so its schedule lag is not known: the achieved send rate stands for it."""
    import aiohttp

    from pddbench.live import vllm_bench

    n = max(1, int(rate_rps * duration_s))
    with fixed_endpoint(ttft_ms, itl_ms, pin) as (endpoint, client_cpus):
        got = vllm_bench.run(endpoint, tokenizer, rate_rps, n, arrival, tokens, seed,
                             {client_cpus[0]} if pin else None, log)

        async def server_timings() -> dict:
            async with aiohttp.ClientSession() as s, s.get(f"{endpoint}/pddbench/timings") as resp:
                return await resp.json()
        timings = run_sync(server_timings())
    errors, unmatched = [], 0
    for rid, start, ttft, err in zip(got["request_ids"], got["start_s"], got["ttft_s"], got["errors"]):
        server = timings.get(rid)
        # the same CLOCK_MONOTONIC: the server must have received it after the client sent it, soon
        if err or not ttft or server is None or not 0 <= server["recv_s"] - start < 1.0:
            unmatched += 1
            continue
        errors.append(ttft * 1000 - server["ttft_ms"])
    return {"tool": "vllm bench serve", "rate_rps": rate_rps, "arrival": arrival, "requests": n,
            "failed": unmatched, "ttft_error_ms": distribution(errors), "schedule_lag_ms": None,
            "achieved_send_rate_rps": send_rate(got["start_s"])}


def send_rate(send_s: list[float]) -> float | None:
    """Requests sent per second, first send to last: the rate a load generator actually offered."""
    if len(send_s) < 2 or max(send_s) == min(send_s):
        return None
    return round((len(send_s) - 1) / (max(send_s) - min(send_s)), 3)


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
    sent = [r.intended_s + per_request[r.request_id][0] / 1000 for r in reqs
            if per_request.get(r.request_id, (None,))[0] is not None]
    return {"tool": "pddbench", "rate_rps": rate_rps, "arrival": arrival, "workers": workers,
            "server_ttft_ms": ttft_ms, "pinned": pin, **summary(ids), "achieved_send_rate_rps": send_rate(sent),
            "scheduled_rate_rps": send_rate([r.intended_s for r in reqs]),
            "per_worker": per_worker}


def replay_bench(rates: list[float], duration_s: float, arrival: str, ttft_ms: float, out: Path | None,
                 workers: list[int] | None = None, max_lag_ms: float = 1.0, against_vllm_bench: bool = False) -> dict:
    """`pddbench replay-bench`: measure() at each rate and worker count; the highest rate each
    worker count held on schedule (lag p99 <= max_lag_ms, nothing failed); with
    `against_vllm_bench`, vLLM's tool at the same rates, or why it could not run. Writes
    OUT/replay_bench.json when asked."""
    counts = workers or [1]
    results = [measure(r, duration_s, arrival, ttft_ms, workers=n) for n in counts for r in rates]
    held = {}
    for n in counts:
        ok = [res["rate_rps"] for res in results if res["workers"] == n and held_schedule(res, max_lag_ms)]
        held[str(n)] = max(ok) if ok else None
    report = {"max_lag_ms": max_lag_ms, "results": results, "highest_rate_held_rps": held}
    if against_vllm_bench:
        report["vllm_bench"] = _vllm_bench_side(rates, duration_s, arrival, ttft_ms, out)
    if out is not None:
        write_json(out / "replay_bench.json", report)
    return report


def _vllm_bench_side(rates: list[float], duration_s: float, arrival: str, ttft_ms: float, out: Path | None) -> dict:
    """vLLM's tool at every rate: {'results': [...]} or {'unavailable': why}."""
    import tempfile

    from pddbench.live import vllm_bench
    from pddbench.live.tiny_model import build_tiny_model_subprocess

    why = vllm_bench.unavailable()
    if why:
        return {"unavailable": why}
    with tempfile.TemporaryDirectory(prefix="pddbench-replay-bench-") as tmp:
        try:
            tokenizer = Path(build_tiny_model_subprocess(Path(tmp) / "tokenizer"))  # it needs one; no hub here
        except Exception as exc:  # noqa: BLE001 - as below
            return {"unavailable": f"no tokenizer for it ({type(exc).__name__}: {str(exc)[:300]})"}
        results = []
        for rate in rates:
            log = Path(tmp) / f"vllm_bench_{rate:g}rps.log"
            try:
                results.append(measure_vllm_bench(rate, duration_s, arrival, ttft_ms, tokenizer, log))
            except Exception as exc:  # noqa: BLE001 - vLLM's side failing must not lose pddbench's figures
                tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.is_file() else []
                return {"unavailable": f"{type(exc).__name__} at {rate:g} req/s"
                                       + (f"; its last line: {tail[0][:300]}" if tail else "")}
    return {"results": results}


def held_schedule(res: dict, max_lag_ms: float) -> bool:
    lag = res["schedule_lag_ms"]["p99"]
    return res["failed"] == 0 and lag is not None and lag <= max_lag_ms


def describe(res: dict) -> str:
    """One terminal line per rate: TTFT error, schedule lag, the rate actually sent."""
    line = (f"{res['rate_rps']:g} req/s, {res['workers']} worker{'s' if res['workers'] > 1 else ''} "
            f"({res['requests']} requests, {res['failed']} failed): {_pcts(res)}; "
            f"sent {_rate(res['achieved_send_rate_rps'])} (the schedule: {_rate(res['scheduled_rate_rps'])})")
    if res["workers"] > 1:
        line += "".join(f"\n  worker {w['worker']} ({w['requests']} requests): {_pcts(w)}" for w in res["per_worker"])
    return line


def describe_side_by_side(report: dict) -> list[str]:
    """Our client and vLLM's tool at each rate, and the ratio of their TTFT error p99."""
    side = report.get("vllm_bench")
    if side is None:
        return []
    if "unavailable" in side:
        return [f"vllm bench serve could not run here: {side['unavailable']}"]
    ours = {r["rate_rps"]: r for r in report["results"] if r["workers"] == 1}
    lines = ["side by side, one client process each (TTFT error p99 / schedule lag p99 / rate sent):"]
    for theirs in side["results"]:
        mine = ours.get(theirs["rate_rps"])
        e_theirs = theirs["ttft_error_ms"]["p99"]
        line = (f"  {theirs['rate_rps']:g} req/s: vllm bench serve {_ms(e_theirs)} / not recorded / "
                f"{_rate(theirs['achieved_send_rate_rps'])} ({theirs['failed']} unmatched)")
        if mine:
            e_mine = mine["ttft_error_ms"]["p99"]
            line += (f"; pddbench {_ms(e_mine)} / {_ms(mine['schedule_lag_ms']['p99'])} / "
                     f"{_rate(mine['achieved_send_rate_rps'])}")
            if e_mine and e_theirs:
                line += f"; error p99 ratio {e_theirs / e_mine:.1f}x"
        lines.append(line)
    return lines


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} ms"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} req/s"


def _pcts(res: dict) -> str:
    def ms(d: dict, q: str) -> str:
        return "-" if d[q] is None else f"{d[q]:.2f}"
    e, lag = res["ttft_error_ms"], res["schedule_lag_ms"]
    return (f"TTFT error p50 {ms(e, 'p50')} / p99 {ms(e, 'p99')} ms; "
            f"schedule lag p50 {ms(lag, 'p50')} / p99 {ms(lag, 'p99')} ms")
