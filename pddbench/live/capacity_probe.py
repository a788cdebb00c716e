"""The offered load of a live run relative to what the engines sustain on the machine at hand
(`live.load`): a short closed-loop probe after the engines and the front are up, before the
replay; the replay's arrival rate is then `load x capacity_rps`.

What is probed: `live.probe_requests` requests drawn from the scenario's own trace, stratified by
the prompt tokens each would compute in the replay (its input minus its ideal prefix-cache hit,
`pddbench/workload/hitrate.py`, in trace order): the trace's requests sorted by those tokens,
one taken at the middle of each of k equal strata, so the probe's mix of long and short prefills
(a few 4-6K-token singular flows among mostly cached turns) is the trace's, without sampling
noise. Each probe prompt is that many fresh tokens (hash ids no trace request has, distinct per
probe request: the probe leaves nothing in the prefix caches the replay could hit) and asks for
the request's output length. They go through the deployment's own front, `live.probe_concurrency`
in flight at a time, in a seeded shuffled order.

capacity_rps = probe requests / makespan (first send -> last completion): the throughput of the
whole deployment kept busy, so whichever of prefill, transfer or decode limits it is measured.
Known biases, both towards a lower capacity (so a stated load is an upper bound on the true
utilisation): the makespan includes the last requests' drain (about one request's latency), and
with `probe_concurrency` too small for the deployment's pipelining a stage can idle. Ignored, in
the other direction: a cached request's new tokens also attend over its cached context, which
the probe's fresh prompts do not have."""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import replace
from pathlib import Path

import numpy as np

from pddbench.workload.trace import Request

METHOD = "closed_loop_stratified"


def uncached_tokens(trace: list[Request], block_size: int) -> np.ndarray:
    """Per request, the prompt tokens it computes in the replay: input minus ideal prefix hit."""
    from pddbench.workload.hitrate import hit_tokens

    inputs = np.array([r.input_length for r in trace], dtype=np.int64)
    return inputs - hit_tokens(trace, block_size)


def probe_requests(trace: list[Request], block_size: int, k: int, seed: int) -> list[Request]:
    """k requests standing for the trace (see the module doc): stratified by uncached tokens,
    fresh prompts of that length (at least one token), the trace's output lengths, shuffled."""
    if not trace:
        raise ValueError("empty trace")
    unc = uncached_tokens(trace, block_size)
    order = np.argsort(unc, kind="stable")
    n = len(trace)
    picks = [int(order[min(n - 1, int((j + 0.5) * n / k))]) for j in range(k)]
    base = 1 + max((h for r in trace for h in r.hash_ids), default=0)
    out = []
    for j, i in enumerate(picks):
        length = max(1, int(unc[i]))
        blocks = -(-length // block_size)
        ids = [base + j * 10_000 + b for b in range(blocks)]  # 10,000 blocks: far above any context
        out.append(replace(trace[i], timestamp_ms=0, input_length=length, hash_ids=ids, session_id=None, turn=None))
    random.Random(seed).shuffle(out)
    return out


def capacity_rps(send_s: list[float], done_s: list[float]) -> float:
    """Requests / makespan (first send -> last completion) of a closed-loop run."""
    if not send_s or len(send_s) != len(done_s):
        raise ValueError("need one send and one completion time per request")
    span = max(done_s) - min(send_s)
    if span <= 0:
        raise ValueError("makespan must be positive")
    return len(send_s) / span


def replay_rate(load: float, capacity: float) -> float:
    """The replay's mean arrival rate for a load stated as a fraction of the measured capacity."""
    if load <= 0 or capacity <= 0:
        raise ValueError("load and capacity must be positive")
    return load * capacity


def main(argv: list[str] | None = None) -> None:
    """Runs as its own process where the replay client sits (dc-a across datacenters)."""
    from pddbench.live.client import ReplayClient, run_sync
    from pddbench.live.replay import build_requests
    from pddbench.workload.trace import load_trace

    p = argparse.ArgumentParser(description="Closed-loop capacity probe of a running deployment.")
    p.add_argument("--endpoint", required=True)
    p.add_argument("--trace", required=True, help="the probe requests (JSONL trace)")
    p.add_argument("--model", default="tiny")
    p.add_argument("--block-size", type=int, default=512)
    p.add_argument("--vocab", type=int, nargs=2, default=(16, 1024), metavar=("LO", "HI"))
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--timeout-s", type=float, default=600.0)
    p.add_argument("--out", required=True, help="probe.json")
    a = p.parse_args(argv)
    trace = load_trace(Path(a.trace), a.block_size)
    reqs = build_requests(trace, a.block_size, tuple(a.vocab), [0.0] * len(trace))
    outcomes, _ = run_sync(ReplayClient(a.endpoint, a.model, timeout_s=a.timeout_s).run(reqs, a.concurrency))
    failed = [o.failure for o in outcomes if o.failure or not o.token_times_s]
    rows = [{"input_tokens": len(o.req.prompt), "output_tokens": o.req.output_tokens,
             "send_s": o.send_s, "first_token_s": o.token_times_s[0] if o.token_times_s else None,
             "done_s": o.token_times_s[-1] if o.token_times_s else None, "failure": o.failure} for o in outcomes]
    result = {"method": METHOD, "requests": len(reqs), "concurrency": a.concurrency, "failed": len(failed),
              "rows": rows}
    if not failed:
        send = [r["send_s"] for r in rows]
        done = [r["done_s"] for r in rows]
        result.update(makespan_s=max(done) - min(send), capacity_rps=capacity_rps(send, done),
                      mean_probe_input_tokens=float(np.mean([r["input_tokens"] for r in rows])))
    Path(a.out).write_text(json.dumps(result, indent=1))
    if failed:
        raise SystemExit(f"capacity probe: {len(failed)} of {len(reqs)} requests failed: {sorted(set(failed))}")


if __name__ == "__main__":
    main()
