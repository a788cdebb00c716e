"""Modelling biases of issue 14, each pinned by a test that would have caught it."""

import pytest

from pddbench.policy import pdd as policy
from pddbench.schema.scenario import load_scenario
from pddbench.sim.run import simulate
from pddbench.workload.trace import Request
from tests.conftest import REPO

PAPER = REPO / "scenarios" / "paper"


def _scenario(name, *overrides):
    return load_scenario(PAPER / f"{name}.yaml", list(overrides))


# -- 1. the decode-side prefix cache (DRC) holds a prompt from admission on ----------------------

@pytest.mark.parametrize("name", ["cross-dc-pd", "pdd"])
def test_concurrent_request_sharing_a_prefix_ships_only_its_miss(name):
    """Two requests share 8 blocks; the second arrives while the first is still decoding on the
    only decode instance. The first's prompt KV is there, so the second ships only its one new
    block over the WAN. (With insertion at finish, it shipped all 9 blocks.)"""
    pool = "main" if name == "pdd" else "decode"
    sc = _scenario(name, f"deployment.{pool}.instances=1")
    shared = list(range(100, 108))
    reqs = [Request(0, 8 * 512, 2000, shared, 0, 0),
            Request(3000, 9 * 512, 50, [*shared, 999], 1, 0)]
    rec, _ = simulate(sc, reqs)
    second = rec.iloc[1]
    assert not second["failed"]
    assert second["decode_cached_tokens"] == 8 * 512
    assert second["wan_kv_bytes"] == policy.kv_transfer_bytes(512, sc.model.kv_bytes_per_token,
                                                               sc.deployment.kv_block_tokens)
    # the first request was still running when the second was routed
    assert rec.iloc[0]["finish_ms"] > second["prefill_end_ms"]


# -- 2. decode routing slack is a setting ---------------------------------------------------------

def _peak_batches(slack):
    sc = _scenario("same-dc-pd", "workload.synth.requests=600", f"deployment.decode_routing_slack_seqs={slack}")
    _, facts = simulate(sc)
    return [v["peak_batch"] for k, v in facts["instances"].items() if k.startswith("D")]


def test_decode_routing_slack_sets_the_peak_batch_spread():
    """A slack of 64 sequences in favour of cache affinity piles sessions onto a few decoders
    (hot instances set the P90 TPOT); a small slack spreads the load. The setting must act."""
    tight, loose = _peak_batches(0), _peak_batches(64)
    assert max(tight) - min(tight) < max(loose) - min(loose)
    assert max(tight) < max(loose)
    assert _scenario("same-dc-pd").deployment.decode_routing_slack_seqs == 16  # the measured default


# -- 4. MoE expert coverage of a decode step -----------------------------------------------------

def _lat(name="pdd", pool="main", *overrides):
    from pddbench.sim.cluster import latency_model
    sc = _scenario(name, *overrides)
    return sc, latency_model(sc, getattr(sc.deployment, pool))


def test_moe_decode_step_reads_only_the_experts_its_tokens_hit():
    sc, lat = _lat()
    m, chip = sc.model, sc.chips[sc.deployment.main.chip]
    e, k, shared = m.experts_total, m.experts_active, m.params_shared_b * 1e9
    total = m.params_total_b * 1e9
    b = 32
    coverage = e * (1 - (1 - k / e) ** b)  # experts per layer some token of the batch routes to
    weights = (shared + coverage / e * (total - shared)) * m.weight_bytes_per_param
    bw = sc.deployment.main.chips_per_instance * chip.memory_bw_tbps * 1e12 * sc.latency.memory_efficiency
    assert lat.expert_weight_bytes(b) == pytest.approx(weights)
    fixed = m.layers * (sc.latency.layer_overhead_us + 2 * sc.latency.allreduce_latency_us) / 1e3  # 8 chips
    expected = weights / bw * 1e3 + lat.comm_ms(b) + sc.latency.decode_overhead_ms + fixed  # memory-bound at b = 32
    assert lat.decode_ms(b, 0) == pytest.approx(expected)
    constant = lat.comm_ms(b) + sc.latency.decode_overhead_ms + fixed  # what reading fewer experts cannot shorten
    all_experts = total * m.weight_bytes_per_param / bw * 1e3
    assert lat.decode_ms(b, 0) - constant < 0.7 * all_experts
    # one token reads exactly the active parameters; the step time grows smoothly with the batch
    assert lat.expert_weight_bytes(1) == pytest.approx(m.params_active_b * 1e9 * m.weight_bytes_per_param, rel=1e-4)
    steps = [lat.decode_ms(n, 0) for n in (16, 17, 18, 24)]
    assert steps == sorted(steps) and steps[1] - steps[0] < 0.5


def test_model_without_experts_keeps_the_old_bound():
    sc, lat = _lat("pdd", "main", "model.experts_total=null", "model.experts_active=null", "model.params_shared_b=null")
    m = sc.model
    assert lat.experts_total == 0
    bw = sc.deployment.main.chips_per_instance * sc.chips["B"].memory_bw_tbps * 1e12 * sc.latency.memory_efficiency
    expected = m.params_total_b * 1e9 * m.weight_bytes_per_param / bw * 1e3  # min(total, active x 32) = total
    fixed = m.layers * (sc.latency.layer_overhead_us + 2 * sc.latency.allreduce_latency_us) / 1e3  # 8 chips
    assert lat.decode_ms(32, 0) == pytest.approx(expected + lat.comm_ms(32) + sc.latency.decode_overhead_ms + fixed)


# -- 6. tensor-parallel communication inside an instance ------------------------------------------

def test_bigger_instance_pays_more_communication_per_step():
    _, one = _lat("pdd", "main", "deployment.main.chips_per_instance=1")
    _, eight = _lat("pdd", "main")
    _, sixteen = _lat("pdd", "main", "deployment.main.chips_per_instance=16")
    assert one.comm_ms(64) == 0
    assert 0 < eight.comm_ms(64) < sixteen.comm_ms(64)
    # the formula: 2 all-reduces per layer of tokens x hidden x 2 B, ring 2(n-1)/n, over interconnect_gbps
    sc = _scenario("pdd")
    m, gbps = sc.model, sc.chips["B"].interconnect_gbps
    assert eight.comm_ms(64) == pytest.approx(2 * m.layers * 64 * m.hidden_size * 2 * 2 * 7 / 8 / (gbps * 1e9 / 8) * 1e3)
    # it is part of the step: a slower interconnect makes a prefill step longer
    _, slow = _lat("pdd", "prefill", "chips.A.interconnect_gbps=100")
    _, fast = _lat("pdd", "prefill")
    assert slow.prefill_ms(8192, 0) - fast.prefill_ms(8192, 0) == pytest.approx(slow.comm_ms(8192) - fast.comm_ms(8192))
    assert slow.prefill_ms(8192, 0) > fast.prefill_ms(8192, 0)


# -- 5. the P->MD vs P->RLD->MD choice sees the relay's load --------------------------------------

def test_policy_falls_back_to_p_md_when_every_relay_is_busy():
    kw = dict(predicted_wan_kv_ms=3000, ttft_sla_ms=5000, budget_fraction=0.1)
    assert policy.choose_pipeline(**kw) == "p_rld_md"  # older callers: load ignored
    assert policy.choose_pipeline(**kw, relay_utilisation=0.5, relay_busy_fraction=0.8) == "p_rld_md"
    assert policy.choose_pipeline(**kw, relay_utilisation=0.8, relay_busy_fraction=0.8) == "p_md"
    assert policy.choose_pipeline(predicted_wan_kv_ms=10, ttft_sla_ms=5000, budget_fraction=0.1,
                                  relay_utilisation=0.0, relay_busy_fraction=0.8) == "p_md"


def test_saturated_relay_sends_low_hit_requests_p_md():
    """Uncached long prompts arrive faster than a 2-sequence relay can take them: once the
    relay is full, the rest go P->MD instead of queueing at the relay."""
    sc = _scenario("pdd", "deployment.relay.max_batch_seqs=2", "policy.singular_filter=false")
    reqs = [Request(i * 50, 16 * 512, 400, list(range(1000 * i, 1000 * i + 16)), i, 0) for i in range(20)]
    rec, _ = simulate(sc, reqs)
    assert not rec["failed"].any()
    pipes = rec["pipeline"].value_counts()
    assert pipes.get("p_rld_md", 0) >= 2 and pipes.get("p_md", 0) >= 4
    # never more relay-path requests on the relay at once than its batch (+ the 0.8 margin)
    sc_off = _scenario("pdd", "deployment.relay.max_batch_seqs=2", "policy.singular_filter=false",
                       "policy.relay_busy_fraction=1.0")
    assert (simulate(sc_off, reqs)[0]["pipeline"] == "p_md").sum() <= pipes.get("p_md", 0)
