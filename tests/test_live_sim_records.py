"""One small trace through the simulator and through the PDD router on real vLLM (P, RLD in dc-a,
MD in dc-b over the emulated WAN): each kind of request (a handoff, a P->MD request, a relay that
finishes first, a singular flow) must carry the same fields with the same meaning in both runtimes
(docs/metrics.md). Timings differ between the runtimes; labels and byte accounting must not."""

import json
import math
import os
import shutil

import pytest

from pddbench.live.engines import vllm_available
from pddbench.metrics.records import read_records
from tests.conftest import REPO, run_cli

pytestmark = [
    pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed (`make test` installs it)"),
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("iptables") is None, reason="needs root and iptables"),
]
KV_BYTES_PER_TOKEN = 2048  # the tiny model's (pddbench model tiny), as the twin states it

# 512-token blocks (live base). Spaced so each request meets an idle deployment. Three sessions,
# replayed by two client processes (live.replay_workers): session 1 on one, sessions 2 and 3 on
# the other (whole sessions, largest first).
TRACE = [
    # 0: low hit, long output: relayed, then handed over to MD once MD has the KV
    {"timestamp": 0, "input_length": 2048, "output_length": 800, "hash_ids": [1, 2, 3, 4], "session_id": 1, "turn": 0},
    # 1: the same prompt again: MD holds it, nothing to send -> P->MD
    {"timestamp": 12000, "input_length": 2048, "output_length": 16, "hash_ids": [1, 2, 3, 4], "session_id": 1,
     "turn": 1},
    # 2: low hit, two tokens out: the relay finishes long before the KV could reach MD
    {"timestamp": 15000, "input_length": 2048, "output_length": 2, "hash_ids": [10, 11, 12, 13], "session_id": 2,
     "turn": 0},
    # 3: long, uncached, two tokens out: a singular flow (live/pdd.yaml: >= 4096 in, <= 4 out)
    {"timestamp": 18000, "input_length": 4500, "output_length": 2, "hash_ids": list(range(20, 29)), "session_id": 3,
     "turn": 0},
]

SIM_TWIN = """\
extends: {pdd}
name: records-twin-pdd
runtime: sim
model:
  name: tiny-llama-random
  params_total_b: 0.0037
  params_active_b: 0.0037
  layers: 4
  hidden_size: 256
  weight_bytes_per_param: 2.0
  kv_bytes_per_token: {kv}
chips:
  cpu: {{peak_tflops: 0.1, memory_gb: 1.2, memory_bw_tbps: 0.02, interconnect_gbps: 10, price_per_hour: 0}}
deployment:
  prefill: {{chip: cpu, instances: 1, chips_per_instance: 1, chunk_tokens: 4096}}
  relay: {{chip: cpu, instances: 1, chips_per_instance: 1, max_batch_seqs: 8}}
  main: {{chip: cpu, instances: 1, chips_per_instance: 1}}
latency:
  kind: calibrated
  calibration_csv: {csv}
live: {{engines: null}}   # the simulator refuses a scenario that declares live engines
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model):
    """(sim records, live records, live run folder)."""
    tmp = tmp_path_factory.mktemp("records")
    trace = tmp / "trace.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in TRACE))
    common = ["--set", "workload.source=trace", "--set", f"workload.trace={trace}"]
    twin = tmp / "twin.yaml"
    twin.write_text(SIM_TWIN.format(pdd=REPO / "scenarios" / "live" / "pdd.yaml", kv=KV_BYTES_PER_TOKEN,
                                    csv=REPO / "scenarios" / "live" / "engine_calibration.example.csv"))
    res = run_cli("run", twin, *common, "--out", tmp / "sim")
    assert res.returncode == 0, res.stderr[-3000:]
    res = run_cli("run", "live/pdd", *common, "--set", f"live.model_dir={tiny_model}", "--set", "live.load=null",
                  "--set", "live.time_scale=1", "--set", "live.calibrate_probes=10", "--set", "live.replay_workers=2",
                  "--out", tmp / "live", timeout=1200)
    assert res.returncode == 0, res.stderr[-3000:]
    return read_records(tmp / "sim" / "records.parquet"), read_records(tmp / "live" / "records.parquet"), tmp / "live"


@pytest.fixture(scope="module")
def both(runs):
    return runs[:2]


LABELS = ["pipeline", "handoff_mode", "singular_flow", "transfer_aborted", "transfer_abort_reason", "failed"]


def test_each_request_kind_is_labelled_alike(both):
    sim, live = both
    assert len(sim) == len(live) == len(TRACE)
    expected = [("p_rld_md", {"one_shot", "catch_up"}), ("p_md", {"none"}), ("p_rld_md", {"relay_finish"}),
                ("p_rld_md", {"relay_finish"})]
    for rid, (pipeline, modes) in enumerate(expected):
        s, lv = sim.iloc[rid], live.iloc[rid]
        assert s["pipeline"] == pipeline and s["handoff_mode"] in modes, (rid, s.to_dict())
        for col in LABELS:
            assert s[col] == lv[col], (rid, col, s[col], lv[col])


def test_byte_accounting_and_derived_times_mean_the_same(both):
    for frame in both:
        handoff, direct, relay_finish, singular = (frame.iloc[i] for i in range(4))
        # the singular flow: nothing crossed the WAN, all of it counted as saved, MD took no part
        assert singular["wan_kv_bytes"] == 0 and singular["decode_cached_tokens"] == 0
        assert singular["wan_kv_bytes_saved"] == 4608 * KV_BYTES_PER_TOKEN  # whole 128-token blocks
        assert singular["transfer_abort_reason"] == "singular_flow"
        # P->MD: MD held the prompt, so only the partial block... here none: nothing crossed
        assert direct["decode_cached_tokens"] == direct["input_tokens"] and direct["relay_tokens"] == 0
        # the handoff: one stall gap at the switch, token ids on the WAN, the KV crossed
        assert math.isfinite(handoff["handoff_stall_ms"]) and handoff["handoff_stall_ms"] >= 0
        assert handoff["wan_token_id_bytes"] > 0 and handoff["wan_kv_bytes"] == 2048 * KV_BYTES_PER_TOKEN
        assert handoff["relay_tokens"] > 0 and handoff["main_tokens"] > 0
        for row in (direct, relay_finish, singular):
            assert math.isnan(row["handoff_stall_ms"]), row.to_dict()
        for row in (handoff, direct, relay_finish, singular):
            assert row["relay_tokens"] + row["main_tokens"] == row["output_tokens"]
            # kv_wait_ms: prefill end -> first token, in both runtimes
            assert math.isclose(row["kv_wait_ms"], row["first_token_ms"] - row["prefill_end_ms"], abs_tol=1e-6)
        # a relay that finished first: aborted for that reason; the bytes saved are those that did
        # not cross (the simulator stops the transfer; vLLM cannot stop a NIXL read, so live saves 0)
        assert relay_finish["transfer_abort_reason"] == "relay_finish"
        assert relay_finish["wan_kv_bytes"] + relay_finish["wan_kv_bytes_saved"] == 2048 * KV_BYTES_PER_TOKEN


def test_two_replay_workers_send_whole_sessions_in_order(runs):
    """Through the PDD router with two client processes: each session's turns left from one
    worker in the trace's order, on the trace's schedule, and the records are those of one replay."""
    _, live, folder = runs
    summary = json.loads((folder / "summary.json").read_text())
    accounts = summary["replay_workers"]
    assert [(a["worker"], a["state"], a["requests"], a["sessions"]) for a in accounts] == [(0, "done", 2, 1),
                                                                                      (1, "done", 2, 2)]
    assert live["request_id"].tolist() == [0, 1, 2, 3]
    assert live["session_id"].tolist() == [1, 1, 2, 3] and live["turn"].tolist() == [0, 1, 0, 0]
    intended_ms = (live["arrival_ms"] - live["schedule_lag_ms"]).tolist()
    assert intended_ms == pytest.approx([r["timestamp"] for r in TRACE], abs=1e-3)
    assert not live["failed"].any()


def test_the_pdd_calibration_feeds_the_pdd_twin(runs, tmp_path):
    """The live run above also calibrated PDD's parts (the scenario's live.calibrate_engine): P -> MD
    over the WAN, P -> RLD beside MD's pull, the busy checks and RLD/MD core sharing. `pddbench
    fidelity` builds the PDD twin from every one of them."""
    from pddbench.core.loading import read_number_table
    from pddbench.live.engine_calibration import TRANSFER_TOKENS

    folder = runs[2]
    table = lambda name, label=None: read_number_table(folder / name, "calibration", label)
    relay = table("kv_transfer_relay_calibration.csv")
    assert len(relay) == 3 * len(TRANSFER_TOKENS) and set(relay[0]) == {"tokens", "kv_bytes", "transfer_ms"}
    share = [r["state"] for r in table("core_share_check.csv", "state")]
    assert sorted(set(share)) == ["idle", "md_decode", "md_pull"] and len(share) == 9
    busy = {r["state"] for r in table("kv_transfer_busy_check.csv", "state")}
    assert busy == {"idle", "p_busy", "d_busy", "rld_idle", "rld_busy"}
    res = run_cli("fidelity", folder, "--out", tmp_path / "fid", timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    fid = json.loads((tmp_path / "fid" / "fidelity.json").read_text())
    assert fid["twin_scenario"].endswith("sim-twin-pdd.yaml") and fid["requests_paired"] == len(TRACE)
    link = fid["kv_link_fitted"]
    assert {"relay", "relay_busy", "core_share", "busy"} <= set(link), link
    # MD's pull is asked from dc-a: the request, NIXL's read and the token back cross the WAN
    # (live-narrow-wan: 25 ms each way), four crossings at least
    wan = [r["transfer_ms"] for r in table("kv_transfer_calibration.csv")]
    assert len(wan) == 3 * len(TRANSFER_TOKENS) and min(wan) > 2 * 25, wan
