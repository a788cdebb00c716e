"""Replay client pieces and the client against real local HTTP servers (loopback sockets)."""

import asyncio
import importlib.util
import json
import math

import pytest
from aiohttp import web

from pddbench.live.client import LiveRequest, ReplayClient, outcome_record, run_sync
from pddbench.live.net import free_port, wait_port
from pddbench.live.prompts import block_tokens, prompt_tokens
from pddbench.live.schedule import at_rate, from_trace
from pddbench.live.sse import DONE, SSEError, SSEParser
from pddbench.metrics.records import to_frame
from pddbench.workload.trace import Request


def test_prompt_builder_shares_exactly_what_the_trace_shares():
    a = prompt_tokens([1, 2, 3], 1300, 512, 10, 1000)
    b = prompt_tokens([1, 2, 9], 1400, 512, 10, 1000)
    assert len(a) == 1300 and len(b) == 1400
    assert a[:1024] == b[:1024]            # same ids -> same tokens
    assert a[1024:1300] != b[1024:1300]    # sibling ids -> different tokens
    assert all(10 <= t < 1000 for t in a)
    assert block_tokens(5, 64, 0, 50).tolist() == block_tokens(5, 64, 0, 50).tolist()
    assert block_tokens(5, 64, 0, 50).tolist() != block_tokens(6, 64, 0, 50).tolist()
    with pytest.raises(ValueError):
        prompt_tokens([1], 600, 512, 0, 10)


def test_sse_parser_edge_cases():
    p = SSEParser()
    events = []
    stream = b': keep-alive\r\ndata: {"a": 1}\r\n\r\ndata: {"b"' + b': 2}\n\ndata: [DONE]\n\n'
    for i in range(0, len(stream), 3):  # split anywhere
        events += p.feed(stream[i:i + 3])
    assert events == [{"a": 1}, {"b": 2}, DONE] and p.done
    p2 = SSEParser()
    assert p2.feed(b'data: {"x": 1}') == [] and p2.close() == [{"x": 1}]
    with pytest.raises(SSEError):
        SSEParser().feed(b"data: {nope\n\n")


def test_schedules():
    c = at_rate(5, 10.0, "constant")
    assert c == pytest.approx([0, 0.1, 0.2, 0.3, 0.4])
    p1, p2 = at_rate(2000, 50.0, "poisson", seed=1), at_rate(2000, 50.0, "poisson", seed=1)
    assert p1 == p2 and p1 != at_rate(2000, 50.0, "poisson", seed=2)
    assert 2000 / p1[-1] == pytest.approx(50, rel=0.1)
    g = at_rate(2000, 50.0, "gamma", seed=1, gamma_shape=0.5)
    assert 2000 / g[-1] == pytest.approx(50, rel=0.15)
    reqs = [Request(1000, 1, 1, [1]), Request(3000, 1, 1, [1])]
    assert from_trace(reqs, 2.0) == [0.0, 1.0]


async def _serve(handler, port):
    app = web.Application()
    app.router.add_post("/v1/completions", handler)
    async def models(_request):
        return web.json_response({"data": []})

    app.router.add_get("/v1/models", models)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


UVLOOP_TIMER_MS = 1.0  # libuv's timer granularity


def _stream_handler(n_tokens=3, delay_s=0.0, malformed=False, status=200):
    async def handler(request):
        body = await request.json()
        if status != 200:
            return web.Response(status=status, text="busy")
        resp = web.StreamResponse()
        await resp.prepare(request)
        await asyncio.sleep(delay_s)
        for i in range(n_tokens):
            await resp.write(f'data: {json.dumps({"choices": [{"text": "t", "token_ids": [7 + i]}]})}\n\n'.encode())
        if malformed:
            await resp.write(b"data: {broken\n\n")
        usage = {"prompt_tokens": len(body["prompt"]), "prompt_tokens_details": {"cached_tokens": 512}}
        await resp.write(f'data: {json.dumps({"choices": [], "usage": usage})}\n\n'.encode())
        await resp.write(b"data: [DONE]\n\n")
        return resp
    return handler


def _run_against(handler, reqs, timeout_s=10.0, kill_after_s=None):
    port = free_port()

    async def main():
        runner = await _serve(handler, port)
        client = ReplayClient(f"http://127.0.0.1:{port}", "m", timeout_s=timeout_s)
        if kill_after_s is not None:
            async def kill():
                await asyncio.sleep(kill_after_s)
                await runner.cleanup()
            asyncio.get_running_loop().create_task(kill())
        try:
            return await client.run(reqs)
        finally:
            await runner.cleanup()
    return run_sync(main())


def test_client_records_tokens_cached_and_latencies():
    reqs = [LiveRequest(i, i * 0.01, [1] * 600, 3) for i in range(5)]
    outcomes, _ = _run_against(_stream_handler(3, delay_s=0.05), reqs)
    df = to_frame([outcome_record(o) for o in outcomes])
    assert not df["failed"].any()
    assert (df["output_tokens"] == 3).all() and (df["p_cached_tokens"] == 512).all()
    # the stand-in's 50 ms sleep runs on the client's uvloop, whose timers count whole ms from a
    # loop time cached per iteration: they can fire up to 1 ms early by time.monotonic (49.7 seen)
    assert (df["ttft_ms"] >= 50 - UVLOOP_TIMER_MS).all() and (df["e2e_ms"] >= df["ttft_ms"]).all()
    assert outcomes[0].token_ids == [7, 8, 9]
    assert (df["schedule_lag_ms"] >= 0).all()


def test_client_failure_modes_become_failed_records():
    reqs = [LiveRequest(0, 0.0, [1], 3)]
    assert _run_against(_stream_handler(status=503), reqs)[0][0].failure == "http_503"
    assert _run_against(_stream_handler(malformed=True), reqs)[0][0].failure == "malformed_stream"
    slow = _run_against(_stream_handler(delay_s=2.0), reqs, timeout_s=0.5)[0][0]
    assert slow.failure == "timeout"
    rec = outcome_record(slow)
    assert rec["failed"] and rec["failure_reason"] == "timeout"


def test_server_killed_midway_keeps_what_was_measured():
    reqs = [LiveRequest(i, i * 0.1, [1], 2) for i in range(10)]
    outcomes, _ = _run_against(_stream_handler(2), reqs, timeout_s=5, kill_after_s=0.45)
    done = [o for o in outcomes if not o.failure]
    failed = [o for o in outcomes if o.failure]
    assert done and failed
    assert {o.failure for o in failed} <= {"connection_error", "no_tokens", "client_error:ServerDisconnectedError",
                                           "client_error:ClientOSError"}
    df = to_frame([outcome_record(o) for o in outcomes])
    assert df["failed"].sum() == len(failed)


def test_replay_bench_runs_against_fixed_endpoint():
    from pddbench.live.precision import measure

    res = measure(rate_rps=50, duration_s=1.0, arrival="constant", ttft_ms=20, itl_ms=2, tokens=3)
    assert res["requests"] == 50 and res["failed"] == 0
    # the client's TTFT includes the server's: the error is the client's own overhead (>= ~0)
    assert res["ttft_error_ms"]["p50"] > -1.0
    assert res["schedule_lag_ms"]["p50"] >= 0.0


def test_replay_bench_with_workers_reports_each_and_the_rates_held(tmp_path):
    """--workers 1 --workers 2: every rate at both counts, the two workers' requests adding up to
    the merged ones, and the highest rate held per count consistent with the results."""
    from tests.conftest import run_cli

    res = run_cli("replay-bench", "--rate", "20", "--rate", "40", "--duration-s", "1", "--arrival", "constant",
                  "--ttft-ms", "5", "--workers", "2", "--workers", "1", "--max-lag-ms", "1000", "--out", tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    report = json.loads(res.stdout.strip().splitlines()[-1])
    assert report == json.loads((tmp_path / "replay_bench.json").read_text())
    assert [(r["workers"], r["rate_rps"]) for r in report["results"]] == [(1, 20), (1, 40), (2, 20), (2, 40)]
    for r in report["results"]:
        assert r["failed"] == 0 and r["requests"] == r["rate_rps"]
        assert len(r["per_worker"]) == r["workers"]
        assert sum(w["requests"] for w in r["per_worker"]) == r["requests"]
        assert all(w["schedule_lag_ms"]["p99"] is not None for w in r["per_worker"])
        assert r["ttft_error_ms"]["p50"] > -1.0  # the client's TTFT includes the server's
    assert report["highest_rate_held_rps"] == {"1": 40, "2": 40}  # a 1 s lag tolerance: every rate held
    bad = run_cli("replay-bench", "--arrival", "uniform", "--out", tmp_path / "bad")
    assert bad.returncode == 2 and "--arrival" in bad.stderr and "Traceback" not in bad.stderr
    assert not (tmp_path / "bad").exists()


def test_send_rate_counts_gaps_first_to_last():
    from pddbench.live.precision import send_rate

    assert send_rate([0.0, 0.01, 0.02, 0.03]) == pytest.approx(100.0)
    assert send_rate([5.0, 3.0, 4.0]) == pytest.approx(1.0)  # order does not matter
    assert send_rate([1.0]) is None and send_rate([]) is None and send_rate([2.0, 2.0]) is None


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed (`make test` installs it)")
def test_replay_bench_against_vllm_bench_side_by_side(tmp_path):
    """vLLM's own tool at the same rate on the same endpoint: every one of its requests matched to
    the server's timing, its send rate near the asked one, both tools printed side by side."""
    from tests.conftest import run_cli

    res = run_cli("replay-bench", "--rate", "40", "--duration-s", "1", "--ttft-ms", "5", "--against-vllm-bench",
                  "--out", tmp_path, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    report = json.loads((tmp_path / "replay_bench.json").read_text())
    [theirs] = report["vllm_bench"]["results"]
    assert theirs["tool"] == "vllm bench serve" and theirs["requests"] == 40 and theirs["failed"] == 0
    assert 20 <= theirs["achieved_send_rate_rps"] <= 80
    assert theirs["ttft_error_ms"]["p50"] > -1.0 and theirs["schedule_lag_ms"] is None
    [ours] = report["results"]
    assert ours["tool"] == "pddbench" and ours["achieved_send_rate_rps"] == pytest.approx(40, rel=0.2)
    assert "side by side" in res.stderr and "vllm bench serve" in res.stderr.split("side by side")[1]


def test_vllm_bench_side_says_why_it_cannot_run(monkeypatch):
    import importlib.util as util

    from pddbench.live import precision

    real = util.find_spec
    monkeypatch.setattr(util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    side = precision._vllm_bench_side([10.0], 1.0, "poisson", 5.0, None)
    assert side == {"unavailable": "vLLM is not installed (`make test` installs it)"}
    lines = precision.describe_side_by_side({"results": [], "vllm_bench": side})
    assert lines == ["vllm bench serve could not run here: vLLM is not installed (`make test` installs it)"]


@pytest.mark.parametrize("failure", [ValueError("bad json"), OSError(28, "No space left on device"), KeyError("p99")])
def test_any_failure_on_vllms_side_is_reported_not_raised(monkeypatch, failure):
    """vLLM's tool failing in any way must not lose pddbench's own figures of the same run."""
    from pddbench.live import precision, vllm_bench

    from pddbench.live import tiny_model

    monkeypatch.setattr(vllm_bench, "unavailable", lambda: None)
    monkeypatch.setattr(tiny_model, "build_tiny_model_subprocess", lambda path: path)

    def fails(*_args, **_kwargs):
        raise failure
    monkeypatch.setattr(precision, "measure_vllm_bench", fails)
    side = precision._vllm_bench_side([10.0, 20.0], 1.0, "poisson", 5.0, None)
    assert list(side) == ["unavailable"] and side["unavailable"].startswith(f"{type(failure).__name__} at 10 req/s")


def test_a_rate_is_held_only_on_schedule_and_without_failures():
    from pddbench.live.precision import held_schedule

    def res(p99, failed=0):
        return {"schedule_lag_ms": {"p99": p99}, "failed": failed}
    assert held_schedule(res(0.5), 1.0) and held_schedule(res(1.0), 1.0)
    assert not held_schedule(res(1.01), 1.0)
    assert not held_schedule(res(0.1, failed=1), 1.0)  # a failed request was never measured
    assert not held_schedule(res(None), 1.0)  # nothing sent


def test_replay_cli_against_fixed_endpoint(tmp_path):
    import subprocess
    import sys

    from tests.conftest import run_cli

    port = free_port()
    srv = subprocess.Popen([sys.executable, "-m", "pddbench.live.fixed_server", "--port", str(port),
                            "--ttft-ms", "5", "--itl-ms", "1"])
    try:
        wait_port("127.0.0.1", port, timeout_s=10)
        trace = tmp_path / "t.jsonl"
        trace.write_text("".join(json.dumps({"timestamp": i * 50, "input_length": 600, "output_length": 4,
                                             "hash_ids": [1, 2 + i]}) + "\n" for i in range(10)))
        res = run_cli("replay", "--endpoint", f"http://127.0.0.1:{port}", "--trace", trace, "--out", tmp_path / "r")
        assert res.returncode == 0, res.stderr
        summary = json.loads((tmp_path / "r" / "summary.json").read_text())
        assert summary["requests_completed"] == 10 and summary["runtime"] == "live" and summary["schedule_ok"]
        bad = run_cli("replay", "--endpoint", "http://127.0.0.1:1", "--trace", trace, "--rate", "5", "--concurrency", "2")
        assert bad.returncode == 2 and "choose one of" in bad.stderr
    finally:
        srv.terminate()
        srv.wait()


def test_ctrl_c_keeps_the_requests_measured_so_far(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    from pddbench.metrics.records import read_records

    port = free_port()
    srv = subprocess.Popen([sys.executable, "-m", "pddbench.live.fixed_server", "--port", str(port),
                            "--ttft-ms", "5", "--itl-ms", "1", "--log-requests"], stdout=subprocess.PIPE, text=True)
    try:
        wait_port("127.0.0.1", port, timeout_s=10)
        trace = tmp_path / "t.jsonl"
        trace.write_text("".join(json.dumps({"timestamp": i * 200, "input_length": 100, "output_length": 4,
                                             "hash_ids": [1 + i]}) + "\n" for i in range(100)))
        out = tmp_path / "r"
        # a shell's background job starts with SIGINT ignored, which Python would keep: restore it
        rep = subprocess.Popen([sys.executable, "-m", "pddbench", "replay", "--endpoint", f"http://127.0.0.1:{port}",
                                "--trace", trace, "--out", out, "--model", "fixed"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        # interrupt once the replay has demonstrably served a few requests; "served" is printed as the
        # server writes a response's end, before the client has read it: two more make the first five
        # (sent 200 ms apart) surely recorded on a loaded machine too
        for _ in range(7):
            assert srv.stdout.readline().strip() == "served"
        rep.send_signal(signal.SIGINT)
        _, err = rep.communicate(timeout=60)
        assert rep.returncode == 130, err[-2000:]
        rec = read_records(out / "records.parquet")
        assert 5 <= len(rec) < 100 and (~rec["failed"]).sum() >= 5
        assert json.loads((out / "summary.json").read_text())["interrupted"] is True
        assert b"Traceback" not in err
    finally:
        srv.terminate()
        srv.wait()


def test_router_account_becomes_the_shared_record_meanings():
    """The stall is the one gap at the switch (relay's last token -> MD's first), not a later
    larger gap; kv_wait = first token - (arrival + the front's prefill_ms); the abort reason is
    copied, "" when the front does not give one."""
    from pddbench.live.client import Outcome

    o = Outcome(LiveRequest(0, 0.0, [1] * 10, 5), send_s=0.0, token_times_s=[0.100, 0.110, 0.150, 0.160, 0.400])
    o.server = {"pipeline": "p_rld_md", "handoff_mode": "one_shot", "relay_tokens": 2, "main_tokens": 3,
                "prefill_ms": 60.0, "transfer_aborted": False, "transfer_abort_reason": ""}
    rec = outcome_record(o, "pdd")
    assert rec["handoff_stall_ms"] == pytest.approx(40.0) and rec["max_itl_ms"] == pytest.approx(240.0)
    assert rec["prefill_end_ms"] == pytest.approx(60.0) and rec["kv_wait_ms"] == pytest.approx(40.0)
    assert rec["ttft_ms"] == pytest.approx(rec["prefill_end_ms"] - rec["arrival_ms"] + rec["kv_wait_ms"])
    o.server = {"pipeline": "p_rld_md", "handoff_mode": "relay_finish", "relay_tokens": 5, "main_tokens": 0,
                "prefill_ms": 60.0, "transfer_aborted": True, "transfer_abort_reason": "singular_flow",
                "singular_flow": True, "wan_kv_bytes": 0, "wan_kv_bytes_saved": 4096}
    rec = outcome_record(o, "pdd")
    assert rec["transfer_abort_reason"] == "singular_flow" and rec["transfer_aborted"]
    assert math.isnan(rec["handoff_stall_ms"]) and rec["wan_kv_bytes_saved"] == 4096
    o.server = {"pipeline": "p_d", "prefill_ms": 60.0}  # the PD proxy's account: no abort fields
    rec = outcome_record(o, "p_d")
    assert rec["transfer_abort_reason"] == "" and not rec["transfer_aborted"] and rec["kv_wait_ms"] == pytest.approx(40.0)
    o.server = {}  # one engine: no prefill end, no KV wait
    rec = outcome_record(o)
    assert math.isnan(rec["kv_wait_ms"]) and rec["transfer_abort_reason"] == ""
    assert to_frame([rec])["transfer_abort_reason"].tolist() == [""]
