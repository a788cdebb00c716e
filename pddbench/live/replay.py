"""`pddbench replay`: a trace against any OpenAI-compatible server, into a run folder with the
same records and summary as the simulator."""

from __future__ import annotations

import bisect
import re
import socket
from pathlib import Path
from typing import Callable

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from pddbench.core.io import write_json
from pddbench.live.client import LiveRequest, ReplayClient, keep_sent, outcome_record, run_sync
from pddbench.live.prompts import prompt_tokens
from pddbench.live.schedule import ARRIVALS, at_rate, from_trace
from pddbench.metrics.summary import summarize
from pddbench.metrics.records import to_frame, write_records
from pddbench.workload.trace import Request

console = Console(stderr=True)


def build_requests(trace: list[Request], block_size: int, vocab: tuple[int, int], schedule: list[float]) -> list[LiveRequest]:
    return [LiveRequest(i, t, prompt_tokens(r.hash_ids, r.input_length, block_size, *vocab), max(1, r.output_length),
                        r.hash_ids, -1 if r.session_id is None else r.session_id, -1 if r.turn is None else r.turn)
            for i, (r, t) in enumerate(zip(trace, schedule))]


def make_schedule(trace: list[Request], time_scale: float | None, rate: float | None, arrival: str,
                  seed: int, duration_s: float | None) -> list[float]:
    sched = at_rate(len(trace), rate, arrival, seed) if rate else from_trace(trace, time_scale or 1.0)
    if duration_s is not None:
        sched = [t for t in sched if t <= duration_s]
    return sched


def replay(endpoint: str, model: str, trace: list[Request], out: Path, *, block_size: int = 512,
           vocab: tuple[int, int] = (16, 1024), time_scale: float | None = None, rate: float | None = None,
           arrival: str = "poisson", concurrency: int | None = None, duration_s: float | None = None,
           seed: int = 0, timeout_s: float = 600.0, lag_tolerance_ms: float = 10.0,
           sla: tuple[float, float, float] = (2000.0, 100.0, 90.0), pipeline: str = "colocated",
           workers: int = 1, ray: str | None = None, datacenter: str | None = None) -> dict:
    """Replay into `out` from this process, `workers` processes, or (`ray`: "" for $RAY_ADDRESS's
    cluster or a local runtime, else a cluster address) `workers` Ray actors."""
    schedule = make_schedule(trace, time_scale, rate, arrival, seed, duration_s)
    reqs = build_requests(trace[: len(schedule)], block_size, vocab, schedule)
    with Progress(TextColumn("[bold]replay[/] {task.description}"), BarColumn(),
                  TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(), console=console) as bar:
        on_progress = _progress(bar, bar.add_task("", total=len(reqs)))
        if ray is not None:
            from pddbench.live.ray_shards import replay_on_ray

            records, accounts, interrupted = replay_on_ray(
                endpoint, model, reqs, workers, ray or None, concurrency=concurrency, timeout_s=timeout_s,
                pipeline=pipeline, on_progress=on_progress, datacenter=datacenter)
        elif workers > 1:
            from pddbench.live.shards import replay_sharded

            records, accounts, interrupted = replay_sharded(
                endpoint, model, reqs, workers, out / ".shards", concurrency=concurrency, timeout_s=timeout_s,
                pipeline=pipeline, on_progress=on_progress)
        else:
            records, accounts, interrupted = _replay_here(endpoint, model, reqs, concurrency, timeout_s, pipeline,
                                                         on_progress)
    write_records(out / "records.parquet", records)
    summary = summarize(records, deployment=pipeline, sla_ttft_ms=sla[0], sla_tpot_ms=sla[1], sla_percentile_q=sla[2])
    lag_p99 = _lag_p99(records)
    summary.update({"runtime": "live", "endpoint": endpoint, "seed": seed, "schedule_lag_p99_ms": lag_p99,
                    "schedule_ok": concurrency is not None or lag_p99 <= lag_tolerance_ms,
                    "replay_workers": _with_lag(accounts, records, reqs, workers)})
    summary["interrupted"] = interrupted
    write_json(out / "summary.json", summary)
    if interrupted:
        raise KeyboardInterrupt
    lost = [a for a in accounts if a["state"] == "lost"]
    if lost:
        why = "; ".join(f"worker {a['worker']}: {a['lost_because']}" for a in lost)
        console.print(f"[bold red]{len(lost)} of {len(accounts)} replay workers lost[/] ({escape(why)}): their "
                      f"{sum(a['requests'] for a in lost)} requests are failed records (worker_lost)")
    if not summary["schedule_ok"]:
        console.print(f"[bold red]schedule lag p99 {lag_p99:.1f} ms exceeds {lag_tolerance_ms} ms[/]: "
                      "the client fell behind; latencies are not trustworthy")
    return summary


def _progress(bar: Progress, task) -> Callable[[bool, float | None], None]:
    counts, ttfts = {"done": 0, "failed": 0}, []

    def on_progress(failed: bool, ttft_ms: float | None) -> None:
        counts["failed" if failed else "done"] += 1
        if ttft_ms is not None:
            bisect.insort(ttfts, ttft_ms)
        p50 = ttfts[len(ttfts) // 2] if ttfts else 0
        p90 = ttfts[int(len(ttfts) * 0.9)] if ttfts else 0
        bar.update(task, advance=1, description=f"done {counts['done']} failed {counts['failed']} "
                                                f"TTFT p50 {p50:.0f} p90 {p90:.0f} ms")
    return on_progress


def _replay_here(endpoint: str, model: str, reqs: list, concurrency: int | None, timeout_s: float, pipeline: str,
                 on_progress) -> tuple:
    """One client in this process: (records, [its account], interrupted)."""
    from pddbench.live.shards import session_key

    client = ReplayClient(endpoint, model, timeout_s=timeout_s)
    outcomes: list = []
    interrupted = False

    def on_done(o) -> None:
        ok = not o.failure and bool(o.token_times_s)
        on_progress(not ok, (o.token_times_s[0] - o.send_s) * 1000 if ok else None)
    try:
        run_sync(client.run(reqs, concurrency, on_done, outcomes))
    except KeyboardInterrupt:  # keep what was measured; requests in flight are failed as interrupted
        interrupted = True
        outcomes = keep_sent(outcomes)
    account = {"worker": 0, "requests": len(reqs), "sessions": len({session_key(r) for r in reqs}), "state": "done",
               "interrupted": interrupted, "clock_offset_ms": 0.0, "clock_rtt_ms": 0.0, "lost_because": "",
               "node": socket.gethostname()}
    return to_frame([outcome_record(o, pipeline) for o in outcomes]), [account], interrupted


def _lag_p99(records) -> float:
    sent = records.loc[records["failure_reason"] != "worker_lost", "schedule_lag_ms"]
    return round(float(sent.quantile(0.99)), 3) if len(sent) else 0.0


def _with_lag(accounts: list[dict], records, reqs: list, workers: int) -> list[dict]:
    """Each worker's account with its own schedule lag p99 (its requests' records)."""
    from pddbench.live.shards import assign_sessions

    owner = assign_sessions(reqs, workers)
    by_worker = dict(zip((r.request_id for r in reqs), owner))
    worker_of = records["request_id"].map(by_worker)
    return [{**a, "schedule_lag_p99_ms": _lag_p99(records[worker_of == a["worker"]])} for a in accounts]


def replay_trace(endpoint: str, model: str, trace_path: Path, out: Path | None, results: Path,
                 **options) -> tuple[dict, Path]:
    """`pddbench replay`: check the endpoint, the load options and the output place, load the
    trace, claim the run folder (`out`, new or empty, or a new RESULTS/replay/<run-id>/) and
    replay; `options` are replay()'s keywords. Exit 1 (RunFailed) when every request failed."""
    from pddbench.core.errors import RunFailed, UserError, is_interrupt
    from pddbench.core.io import run_folder
    from pddbench.core.io import check_out_options
    from pddbench.core.ray_cluster import check_ray_option
    from pddbench.workload.trace import load_trace

    check_endpoint(endpoint, "--endpoint")
    if not model.strip():
        raise UserError(f"--model {model!r}: give the model name the server serves (its /v1/models), e.g. --model tiny")
    lo, hi = options.get("vocab", (16, 1024))
    if not 0 <= lo < hi:
        raise UserError(f"--vocab-lo {lo} --vocab-hi {hi}: prompts draw token ids from --vocab-lo up to --vocab-hi, "
                        "so give 0 <= --vocab-lo < --vocab-hi (e.g. 16 and the model's vocabulary size)")
    if sum(options.get(k) is not None for k in ("time_scale", "rate", "concurrency")) > 1:
        raise UserError("choose one of --time-scale, --rate, --concurrency")
    if options.get("arrival", "poisson") not in ARRIVALS:
        raise UserError(f"--arrival '{options['arrival']}': choose {', '.join(ARRIVALS)}")
    _check_workers(options.get("workers", 1), options.get("concurrency"))
    dc = options.get("datacenter")
    if dc is not None and (options.get("ray") is None or not re.fullmatch(r"[A-Za-z0-9_]+", dc)):
        raise UserError(f"--datacenter {dc}: places Ray actors (give --ray too) by a datacenter name of letters, "
                        "digits and _ (the nodes carry the resource dc_<name>)")
    check_out_options(out, results)
    check_ray_option(options.get("ray"))
    reqs = load_trace(trace_path, options.get("block_size", 512))
    with run_folder(out, results, "replay") as folder:
        try:
            summary = replay(endpoint, model, reqs, folder.path, **options)
        except BaseException as exc:
            if is_interrupt(exc) and (folder.path / "summary.json").is_file():
                folder.interrupted("the requests sent so far (summary interrupted: true; in-flight ones failed "
                                   "as 'interrupted')")
            raise
    if summary["requests_total"] and not summary["requests_completed"]:
        reasons = ", ".join(f"{k} x{v}" for k, v in summary["failure_reasons"].items())
        raise RunFailed(f"every request failed ({reasons}); records and summary in {folder.path}")
    return summary, folder.path


def _check_workers(workers: int, concurrency: int | None) -> None:
    from pddbench.core.errors import UserError
    from pddbench.live.shards import MAX_WORKERS

    if not 1 <= workers <= MAX_WORKERS:
        raise UserError(f"--workers {workers}: give 1 to {MAX_WORKERS}")
    if concurrency is not None and concurrency < workers:
        raise UserError(f"--concurrency {concurrency} is shared among --workers {workers}: give at least one "
                        "request in flight per worker, or fewer workers")


def check_endpoint(url: str, option: str) -> None:
    """An http(s) URL with a host, refused in one line before anything starts."""
    from urllib.parse import urlsplit

    from pddbench.core.errors import UserError

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError as exc:
        raise UserError(f"{option} '{url}': not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError(f"{option} '{url}': expected an http(s) URL with a host, e.g. http://127.0.0.1:8000")
    if parts.port == 0:
        raise UserError(f"{option} '{url}': port 0 is no server's port; give the port it listens on (1 to 65535), "
                        "e.g. http://127.0.0.1:8000")
