"""live.load: the capacity probe's request choice and the rate derivation (no engines)."""

import numpy as np
import pytest

from pddbench.core.errors import InputError
from pddbench.live.capacity_probe import capacity_rps, probe_requests, replay_rate, uncached_tokens
from pddbench.schema.scenario import load_scenario
from pddbench.workload.source import workload_requests
from pddbench.workload.trace import Request


def test_rate_is_load_times_the_closed_loop_throughput():
    # 4 requests, first sent at 1.0 s, last done at 3.0 s: 2 req/s sustained
    cap = capacity_rps([1.0, 1.0, 1.5, 2.0], [1.5, 2.0, 2.5, 3.0])
    assert cap == pytest.approx(2.0)
    assert replay_rate(0.5, cap) == pytest.approx(1.0)
    assert replay_rate(1.0, cap) == pytest.approx(cap)
    with pytest.raises(ValueError):
        replay_rate(0.0, cap)
    with pytest.raises(ValueError):
        capacity_rps([1.0], [1.0])


def test_probe_stands_for_the_trace_and_shares_nothing_with_it():
    sc = load_scenario("live/pdd", ["workload.synth.requests=300"])
    trace = workload_requests(sc)
    probe = probe_requests(trace, 512, 24, seed=0)
    assert len(probe) == 24
    unc = uncached_tokens(trace, 512)
    # one request per stratum of uncached tokens: the probe's mean sits near the trace's, and its
    # largest prompt comes from the trace's heavy tail (the singular flows)
    lengths = np.array([r.input_length for r in probe])
    assert 0.5 * unc.mean() < lengths.mean() < 2 * unc.mean()
    assert lengths.max() >= np.percentile(unc, 95)
    trace_ids = {h for r in trace for h in r.hash_ids}
    probe_ids = [h for r in probe for h in r.hash_ids]
    assert not trace_ids & set(probe_ids) and len(probe_ids) == len(set(probe_ids))
    assert all(len(r.hash_ids) * 512 >= r.input_length >= 1 for r in probe)
    assert probe == probe_requests(trace, 512, 24, seed=0)  # deterministic


def test_uncached_tokens_follow_the_ideal_prefix_cache():
    trace = [Request(0, 1024, 4, [1, 2]), Request(1, 1500, 4, [1, 2, 3]), Request(2, 100, 4, [9])]
    assert uncached_tokens(trace, 512).tolist() == [1024, 1500 - 1024, 100]


def test_load_and_a_fixed_rate_are_refused_together_in_one_line():
    with pytest.raises(InputError, match="live.load and live.rate_rps both set") as err:
        load_scenario("live/pdd", ["live.rate_rps=2"])
    assert "\n" not in str(err.value).strip()
    assert load_scenario("live/pdd", ["live.rate_rps=2", "live.load=null"]).live.rate_rps == 2
    assert load_scenario("live/pdd").live.load == 0.5


def test_probe_process_measures_a_known_server(tmp_path):
    """Against a server that answers every request in 40 ms + 2 ms per further token whatever
    the load, a closed loop of 4 measures about 4 / (per-request latency)."""
    import json
    import subprocess
    import sys

    from pddbench.live.net import free_port, wait_port
    from pddbench.workload.trace import write_trace

    port = free_port()
    srv = subprocess.Popen([sys.executable, "-m", "pddbench.live.fixed_server", "--port", str(port),
                            "--ttft-ms", "40", "--itl-ms", "2"])
    try:
        wait_port("127.0.0.1", port, timeout_s=10)
        probe = [Request(0, 100, 6, [10_000 + i]) for i in range(16)]
        write_trace(tmp_path / "probe.jsonl", probe)
        res = subprocess.run([sys.executable, "-m", "pddbench.live.capacity_probe", "--endpoint", f"http://127.0.0.1:{port}",
                              "--trace", str(tmp_path / "probe.jsonl"), "--concurrency", "4", "--out",
                              str(tmp_path / "probe.json")], capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr[-2000:]
    finally:
        srv.terminate()
        srv.wait()
    out = json.loads((tmp_path / "probe.json").read_text())
    assert out["requests"] == 16 and out["failed"] == 0 and out["concurrency"] == 4
    ideal = 4 / ((40 + 5 * 2) / 1000)  # 80 req/s
    assert 0.5 * ideal < out["capacity_rps"] <= 1.05 * ideal, out["capacity_rps"]
