"""The simulator's records mean what docs/metrics.md says, the same as live runs: abort reasons,
bytes sent and saved, handoff modes, the handoff stall and the KV wait (small workloads)."""

import numpy as np

from pddbench.measure.runner import simulate_summary
from pddbench.schema.scenario import load_scenario
from tests.conftest import REPO

PAPER = REPO / "scenarios" / "paper"
# long, uncached prompts with short outputs: singular flows when the filter is on
LONG_SHORT = ["workload.source=fixed",
              "workload.fixed={requests: 30, input_tokens: 40960, output_tokens: 8, hit_rate: 0.0, rate_rps: 0.5}"]


def sim(name, *overrides):
    return simulate_summary(load_scenario(PAPER / f"{name}.yaml", list(overrides)))


def _kv_wait_is_first_token_minus_prefill_end(rec):
    ok = rec[~rec["failed"]]
    assert len(ok) and ok["kv_wait_ms"].notna().all()
    np.testing.assert_array_equal(ok["kv_wait_ms"], ok["first_token_ms"] - ok["prefill_end_ms"])


def test_singular_flow_record_and_its_own_summary_keys():
    rec, s = sim("pdd", *LONG_SHORT)
    assert rec["singular_flow"].all() and not rec["failed"].any()
    assert (rec["pipeline"] == "p_rld_md").all() and (rec["handoff_mode"] == "relay_finish").all()
    assert rec["transfer_aborted"].all() and (rec["transfer_abort_reason"] == "singular_flow").all()
    assert (rec["decode_cached_tokens"] == 0).all() and (rec["wan_kv_bytes"] == 0).all()
    assert (rec["wan_kv_bytes_saved"] > 0).all() and rec["handoff_stall_ms"].isna().all()
    assert s["aborted_transfers_by_reason"] == {"singular_flow": 30, "relay_finish": 0, "md_error": 0}
    assert s["wan_kv_bytes_saved_by_reason"]["singular_flow"] == s["wan_kv_bytes_saved"] > 0
    _kv_wait_is_first_token_minus_prefill_end(rec)


def test_relay_finish_stop_counts_sent_and_saved_bytes_and_drain_is_no_abort():
    rec, s = sim("pdd", *LONG_SHORT, "policy.singular_filter=false")
    assert not rec["singular_flow"].any() and (rec["handoff_mode"] == "relay_finish").all()
    stopped = rec[rec["transfer_aborted"]]
    assert len(stopped) == len(rec) and (stopped["transfer_abort_reason"] == "relay_finish").all()
    assert (stopped["wan_kv_bytes_saved"] > 0).all()
    drained, d = sim("pdd", *LONG_SHORT, "policy.singular_filter=false", "policy.relay_finish_stops_wan_kv=false")
    assert not drained["transfer_aborted"].any() and (drained["transfer_abort_reason"] == "").all()
    assert (drained["wan_kv_bytes_saved"] == 0).all()
    # what crossed + what was saved = the whole transfer, request by request
    np.testing.assert_array_equal(rec["wan_kv_bytes"] + rec["wan_kv_bytes_saved"], drained["wan_kv_bytes"])
    assert s["aborted_transfers_by_reason"] == {"singular_flow": 0, "relay_finish": 30, "md_error": 0}
    assert s["wan_kv_bytes_saved_by_reason"]["relay_finish"] == s["wan_kv_bytes_saved"]
    assert d["aborted_transfers"] == 0 and d["aborted_transfers_by_reason"]["relay_finish"] == 0


def test_handoff_mode_and_stall_per_pipeline():
    fixed = ["workload.source=fixed",
             "workload.fixed={requests: 60, input_tokens: 64512, output_tokens: 1024, hit_rate: 0.5, rate_rps: 0.5}"]
    rec, _ = sim("pdd-64k-1k-90hit", *fixed)
    took_over = rec["handoff_mode"].isin(["one_shot", "catch_up"])
    assert took_over.sum() > 10
    assert (rec.loc[rec["pipeline"] == "p_md", "handoff_mode"] == "none").all()
    assert (rec.loc[took_over, "pipeline"] == "p_rld_md").all()
    # one gap (MD's first token - the relay's last), NaN without a takeover, never above the largest ITL
    assert rec.loc[took_over, "handoff_stall_ms"].gt(0).all() and rec.loc[~took_over, "handoff_stall_ms"].isna().all()
    assert (rec.loc[took_over, "handoff_stall_ms"] <= rec.loc[took_over, "max_itl_ms"]).all()
    _kv_wait_is_first_token_minus_prefill_end(rec)
    ablation, _ = sim("pdd-relay-only-ablation", *fixed)
    assert (ablation["pipeline"] == "p_rld").all() and (ablation["handoff_mode"] == "none").all()
    assert not ablation["transfer_aborted"].any() and (ablation["decode_cached_tokens"] == 0).all()


def test_kv_wait_everywhere_including_the_skipped_relay():
    for name in ("same-dc-pd", "cross-dc-pd"):
        _kv_wait_is_first_token_minus_prefill_end(sim(name, "workload.synth.requests=200")[0])
    # the WAN (0.7 s) beats the relay's RDMA (2 s): MD starts the request, the relay never does
    rec, _ = sim("pdd", "workload.source=fixed",
                 "workload.fixed={requests: 10, input_tokens: 16384, output_tokens: 32, hit_rate: 0.0, rate_rps: 0.2}",
                 "network.rdma={delay_ms: 2000, rate_gbps: null}", "network.wan={delay_ms: 700, rate_gbps: null}")
    assert (rec["pipeline"] == "p_md").all() and (rec["relay_tokens"] == 0).all()
    assert (rec["rdma_kv_bytes"] > 0).all()  # the relay path was taken, then skipped
    assert (rec["kv_wait_ms"] >= 700).all()
    _kv_wait_is_first_token_minus_prefill_end(rec)
