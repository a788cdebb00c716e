"""The prfaas deployment kind (Prefill-as-a-Service): its policy, and whole simulated runs of the
shipped PrfaaS scenarios (small workloads), checked against what the design must do."""

import json

import pandas as pd
import pytest

from pddbench.measure.runner import simulate_summary
from pddbench.policy.prfaas import REASONS, choose_prefill_site, streamed_kv_arrival_ms
from pddbench.schema.scenario import LIVE_KINDS, load_scenario
from tests.conftest import REPO, run_cli

PRFAAS = REPO / "scenarios" / "prfaas"
SMALL = ["workload.synth.requests=600"]
NO_LINE_LIMIT = "policy.offload_wan_budget_fraction=1000000"


def sim(name, *overrides):
    return simulate_summary(load_scenario(PRFAAS / f"{name}.yaml", [*SMALL, *overrides]))


def site(uncached, predicted_ms, threshold=1000, sla=5000.0, fraction=0.5):
    return choose_prefill_site(uncached_local_tokens=uncached, threshold_tokens=threshold,
                               predicted_wan_kv_ms=predicted_ms, ttft_sla_ms=sla, wan_budget_fraction=fraction)


def test_the_policy_offloads_only_long_uncached_prefills_that_the_line_can_carry():
    assert site(1000, 0.0) == "short_uncached"          # at the threshold: local
    assert site(1001, 2500.0) == "offloaded"            # just long enough, the line just in budget
    assert site(1001, 2500.1) == "line_busy"            # the line would be late: local
    assert site(10**9, 0.0, fraction=0.0) == "offloaded"  # an empty line delivers in no time
    assert site(999, 10**9) == "short_uncached"         # the line is not asked about a short one
    assert set(REASONS) == {"offloaded", "short_uncached", "line_busy"}


def test_a_streamed_kv_arrives_when_both_the_line_and_the_prefill_are_done():
    # the line carried everything during the prefill: only the last layer crosses afterwards
    assert streamed_kv_arrival_ms(prefill_end_ms=1000.0, line_done_ms=400.0, last_layer_ms=16.0) == 1016.0
    # the line is the bottleneck: the prefill's end does not matter
    assert streamed_kv_arrival_ms(prefill_end_ms=1000.0, line_done_ms=3000.0, last_layer_ms=16.0) == 3000.0


@pytest.fixture(scope="module")
def runs():
    return {"prfaas": sim("prfaas"), "never": sim("prfaas", "policy.offload_threshold_tokens=100000000"),
            "always": sim("prfaas", "policy.offload_threshold_tokens=0", NO_LINE_LIMIT, "network.wan=cross-city-10g"),
            "same_dc": sim("prfaas", "deployment.kind=same_dc_pd", "deployment.remote_prefill=null")}


def test_every_request_is_accounted_and_says_where_it_was_prefilled_and_why(runs):
    rec, s = runs["prfaas"]
    assert s["requests_completed"] + s["requests_failed"] == 600 and s["requests_failed"] == 0
    assert set(rec["offload_reason"]) <= set(REASONS)
    offloaded = rec["offload_reason"] == "offloaded"
    assert 0 < offloaded.sum() < 600  # the shipped threshold splits this workload
    assert (rec.loc[offloaded, "pipeline"] == "pr_d").all() and (rec.loc[~offloaded, "pipeline"] == "p_d").all()
    assert s["offload_reasons"] == {k: int(v) for k, v in rec["offload_reason"].value_counts().sort_index().items()}
    # an offloaded prompt's KV crosses the WAN, a local one's the RDMA fabric
    assert (rec.loc[offloaded, "wan_kv_bytes"] > 0).all() and (rec.loc[offloaded, "rdma_kv_bytes"] == 0).all()
    assert (rec.loc[~offloaded, "wan_kv_bytes"] == 0).all()
    assert s["wan_kv_bytes"] == int(rec["wan_kv_bytes"].sum()) > 0
    busy = {name: v["busy_ms"] for name, v in s["instances"].items()}
    assert busy["PR0"] > 0 and any(busy[f"P{i}"] > 0 for i in range(2))  # both clusters prefill


def test_with_nothing_offloaded_prfaas_is_its_local_pd_cluster(runs):
    """A threshold no prompt reaches leaves the remote cluster idle: the records are the same-DC
    PD run's of the same local pools, field for field, but for the offload reason."""
    never, _ = runs["never"]
    same, _ = runs["same_dc"]
    assert (never["offload_reason"] == "short_uncached").all() and (same["offload_reason"] == "").all()
    pd.testing.assert_frame_equal(never.drop(columns="offload_reason"), same.drop(columns="offload_reason"))


def test_offloading_everything_streams_every_kv_over_the_line_overlapped_with_its_prefill(runs):
    rec, s = runs["always"]
    assert (rec["offload_reason"] == "offloaded").all() and s["pipelines"] == {"pr_d": 600}
    sc = load_scenario(PRFAAS / "prfaas.yaml", [*SMALL, "network.wan=cross-city-10g"])
    line = sc.network.wan_profile()
    ok = rec[~rec["failed"]]
    # wan_kv_ms runs from the prefill's first step, when the first layer's KV leaves
    after_prefill = ok["prefill_start_ms"] + ok["wan_kv_ms"] - ok["prefill_end_ms"]
    # no KV beats the propagation delay after its prefill (its last layer is computed last) ...
    assert (after_prefill >= line.delay_ms - 5 * line.jitter.sd_ms).all()
    # ... but the transfer ran with the prefill: what is left after it is less than sending the
    # whole KV then, for every prompt whose prefill took longer than its KV's transfer
    send_ms = ok["wan_kv_bytes"] * 8 / (line.rate_gbps * 1e6)
    hidden = (ok["prefill_end_ms"] - ok["prefill_start_ms"] > send_ms) & (send_ms > 10)
    assert hidden.sum() > 50
    assert (after_prefill[hidden] < line.delay_ms + 5 * line.jitter.sd_ms + send_ms[hidden]).all()
    assert after_prefill[hidden].median() < line.delay_ms + 5  # the last layer only, queueing aside


def test_a_line_too_slow_for_the_budget_keeps_long_prefills_local():
    rec, s = sim("prfaas", "network.wan={delay_ms: 15, rate_gbps: 0.05}", "policy.offload_wan_budget_fraction=0.1")
    long_ = rec["offload_reason"] != "short_uncached"
    assert long_.any() and (rec.loc[long_, "offload_reason"] == "line_busy").mean() > 0.5
    # bandwidth-aware: what was offloaded met the budget when it was predicted; the line's queue
    # then stays short (the naive design would queue every long prompt behind the others)
    assert s["offload_reasons"].get("line_busy", 0) == int((rec["offload_reason"] == "line_busy").sum())


def test_the_same_seed_gives_the_same_records_and_the_hardware_cost_counts_every_cluster(runs):
    rec, s = runs["prfaas"]
    again, _ = sim("prfaas")
    pd.testing.assert_frame_equal(rec, again)
    sc = load_scenario(PRFAAS / "prfaas.yaml", SMALL)
    chips = {role: p.instances * p.chips_per_instance * sc.chips[p.chip].price_per_hour
             for role, p in sc.deployment.pools().items()}
    assert set(chips) == {"prefill", "decode", "remote_prefill"}
    assert s["cost_per_hour"] == pytest.approx(sum(chips.values()))


@pytest.mark.parametrize("overrides, says", [
    (["deployment.remote_prefill=null"], "deployment kind prfaas needs a 'remote_prefill' pool"),
    (["deployment.remote_prefill.chip=H100"], "deployment.remote_prefill.chip 'H100' is not among chips"),
])
def test_an_impossible_prfaas_scenario_is_refused_in_one_line(tmp_path, overrides, says):
    args = [a for o in overrides for a in ("--set", o)]
    res = run_cli("run", PRFAAS / "prfaas.yaml", *args, "--out", tmp_path / "r")
    assert res.returncode == 2 and says in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert not (tmp_path / "r").exists()


def test_a_live_prfaas_run_is_refused_in_one_line(tmp_path):
    scenario = tmp_path / "live-prfaas.yaml"
    scenario.write_text("runtime: live\ndeployment: {kind: prfaas}\n")
    res = run_cli("run", scenario, "--out", tmp_path / "r")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "deployment kind prfaas runs in the simulator only" in res.stderr and "live-prfaas.yaml" in res.stderr
    assert not (tmp_path / "r").exists()


def test_live_kinds_are_the_live_runtimes_placements():
    from pddbench.live.placement import PLACEMENTS

    assert set(LIVE_KINDS) == set(PLACEMENTS)


def test_optimize_splits_every_prfaas_pool_over_the_sizes_that_hold_the_model(tmp_path):
    """The best-split search knows the remote cluster as a role of its own (PR), and an instance
    too small for the model's weights (1 TB on 8 x 96 GB H20) is no candidate, not a crash."""
    res = run_cli("optimize", PRFAAS / "prfaas.yaml", "--budget", "H20=64,H200=32", "--sizes", "8,16",
                  "--set", "workload.synth.requests=300", "--iterations", "2", "--json", "--out", tmp_path / "o")
    assert res.returncode == 0, res.stderr[-2000:]
    result = json.loads(res.stdout)
    splits = [c["split"] for c in result["candidates"]]
    assert splits and all(set(sp) == {"prefill", "decode", "remote_prefill"} for sp in splits)
    assert all(sp[r]["chips_per_instance"] == 16 for sp in splits for r in ("prefill", "decode"))
    assert {sp["remote_prefill"]["chips_per_instance"] for sp in splits} == {8, 16}
    assert all(sum(sp[r]["instances"] * sp[r]["chips_per_instance"] for r in ("prefill", "decode")) <= 64
               and sp["remote_prefill"]["instances"] * sp["remote_prefill"]["chips_per_instance"] <= 32 for sp in splits)
    small = run_cli("optimize", PRFAAS / "prfaas.yaml", "--budget", "H20=64,H200=32", "--sizes", "8",
                    "--out", tmp_path / "small")
    assert small.returncode == 2 and "Traceback" not in small.stderr
    assert "no size in --sizes 8 holds the model's weights on deployment.prefill (H20" in small.stderr
    assert not (tmp_path / "small").exists()
