"""Unit tests of the simulator's parts on hand-checkable numbers."""

from pathlib import Path

import pytest

from netem.profile import LinkProfile, Outages
from pddbench.core.errors import InputError
from pddbench.sim.decode import DecodeInstance, DecodeJob
from pddbench.sim.engine import EventLoop
from pddbench.sim.latency import Calibrated
from pddbench.sim.link import Link


class Req:
    def __init__(self, hash_ids=(1,)):
        self.hash_ids = list(hash_ids)


class ConstLatency:
    def __init__(self, step_ms=10.0, per_extend_ms=1.0):
        self.step_ms, self.per_extend_ms = step_ms, per_extend_ms

    def prefill_ms(self, tokens, attn_pairs):
        return tokens * 0.01

    def decode_ms(self, batch, kv_tokens, extend_tokens=0):
        return self.step_ms + self.per_extend_ms * extend_tokens


def test_event_loop_orders_ties_by_insertion():
    loop, seen = EventLoop(), []
    for name in "abc":
        loop.at(5.0, seen.append, name)
    loop.at(1.0, seen.append, "first")
    loop.run()
    assert seen == ["first", "a", "b", "c"] and loop.now == 5.0


def _link(**kw):
    loop = EventLoop()
    return loop, Link(loop, LinkProfile(**kw), "wan")


def test_link_shares_bandwidth_equally():
    # 8 Gbit/s = 1e6 B/ms; two 1e6 B transfers together take 2 ms, plus 5 ms delay
    loop, link = _link(rate_gbps=8, delay_ms=5)
    done = {}
    link.send(1e6, lambda: done.setdefault("a", loop.now))
    link.send(1e6, lambda: done.setdefault("b", loop.now))
    loop.run()
    assert done["a"] == pytest.approx(7.0) and done["b"] == pytest.approx(7.0)


def test_link_late_joiner_and_cancel():
    loop, link = _link(rate_gbps=8)
    done = {}
    tr_a = link.send(2e6, lambda: done.setdefault("a", loop.now))
    loop.at(1.0, lambda: link.send(1e6, lambda: done.setdefault("b", loop.now)))
    saved = {}
    loop.at(1.5, lambda: saved.setdefault("a", link.cancel(tr_a)))
    loop.run()
    # a alone for 1 ms (1e6 B), then shared: by 1.5 ms a has 1.25e6 B; b then runs alone
    assert saved["a"] == pytest.approx(0.75e6)
    assert "a" not in done
    assert done["b"] == pytest.approx(1.5 + 0.75)


def test_fifo_link_serves_one_transfer_at_a_time():
    # 1e6 B/ms, 5 ms delay: a, b, c sent together; a cancelled midway hands the line to b at once
    loop, link = _link(rate_gbps=8, delay_ms=5, sharing="fifo")
    done, saved = {}, {}
    tr = {n: link.send(1e6 if n != "a" else 2e6, lambda n=n: done.setdefault(n, loop.now)) for n in "abcd"}
    assert link.predict_ms(1e6) == pytest.approx((5e6 + 1e6) / 1e6 + 5)  # behind the 5e6 B already sent
    loop.at(1.0, lambda: saved.setdefault("a", link.cancel(tr["a"])))
    loop.at(1.5, lambda: saved.setdefault("d", link.cancel(tr["d"])))
    loop.run()
    assert saved == {"a": pytest.approx(1e6), "d": 1e6}  # a half sent; d never started
    assert done == {"b": pytest.approx(1 + 1 + 5), "c": pytest.approx(1 + 2 + 5)}


def test_link_outage_stretches_transfer():
    prof = dict(rate_gbps=8, outages=Outages(rate_per_s=0.5, min_ms=1000, pareto_shape=50, max_ms=1000))
    loop, link = _link(**prof)
    first_outage = link._outage(0)
    done = {}
    loop.at(first_outage[0] - 1, lambda: link.send(2e6, lambda: done.setdefault("t", loop.now)))
    loop.run()
    # 1 ms before the outage, 1e6 B remain when it starts; they go after it ends
    assert done["t"] == pytest.approx(first_outage[1] + 1.0, rel=1e-9)
    assert first_outage[1] - first_outage[0] == pytest.approx(1000, rel=0.02)


def test_link_replays_transfer_latencies():
    loop, link = _link(rate_gbps=1, transfer_latency_ms=[100, 2000])
    done = []
    for _ in range(3):
        link.send(1e9, lambda: done.append(loop.now))
    loop.run()
    assert done == [100, 100, 2000]


def test_decode_tokens_and_finish_time():
    loop = EventLoop()
    d = DecodeInstance(loop, "D0", ConstLatency(10.0), kv_capacity_tokens=10_000, max_batch=8, cache=None, block_size=512)
    out = {}
    job = DecodeJob(Req(), 100, 5, 0, lambda j: out.setdefault("first", j.first_token_ms),
                    lambda j, t: out.setdefault("finish", t))
    d.submit(job)
    loop.run()
    assert out == {"first": 10.0, "finish": 50.0}


def _two_decoders_on_one_core(step_factor: float = 2.0):
    """(loop, core, A, B): two decoders of 10 ms steps sharing one core."""
    from pddbench.sim.decode import CoreShare

    loop = EventLoop()
    core = CoreShare(step_factor)
    a, b = (DecodeInstance(loop, name, ConstLatency(10.0), 10_000, 8, None, 512) for name in ("A", "B"))
    for inst in (a, b):
        inst.core = core
        core.members.append(inst)
    return loop, core, a, b


def test_decoders_sharing_a_core_divide_it_while_both_are_busy():
    """A decodes 10 tokens alone at 10 ms a step; B (a 3-token job) joins at 25 ms: from A's next
    step end (30 ms) both step at 20 ms until B finishes, then A is back to 10 ms."""
    loop, core, a, b = _two_decoders_on_one_core()
    fin = {}
    a.submit(DecodeJob(Req(), 100, 10, 0, None, lambda j, t: fin.setdefault("a", t)))
    loop.at(25.0, lambda: b.submit(DecodeJob(Req(), 100, 3, 0, None, lambda j, t: fin.setdefault("b", t))))
    loop.run()
    # B: admitted at 25 ms into a shared core, 3 steps of 20 ms -> 85 ms
    # A: 3 steps alone (30 ms), 3 shared steps to 90 ms (B idles at 85, A's step under way keeps its pace),
    #    then 4 steps alone -> 130 ms
    assert fin == {"b": 85.0, "a": 130.0}
    assert core.busy() == 0
    # alone, the same two jobs do not slow each other
    loop2 = EventLoop()
    solo = DecodeInstance(loop2, "A", ConstLatency(10.0), 10_000, 8, None, 512)
    solo.submit(DecodeJob(Req(), 100, 10, 0, None, lambda j, t: fin.setdefault("solo", t)))
    loop2.run()
    assert fin["solo"] == 100.0


def test_a_pull_into_a_core_sharer_slows_the_other_by_the_step_factor():
    """A decodes 10 tokens at 10 ms a step; B, on A's core, receives a KV pull from 25 to 55 ms
    without decoding. With step_factor 3, A's steps from the end of the one under way (30 ms)
    take 30 ms until the step in which the pull ends is over (60 ms), then 10 ms again."""
    loop, core, a, b = _two_decoders_on_one_core(step_factor=3.0)
    fin = {}
    a.submit(DecodeJob(Req(), 100, 10, 0, None, lambda j, t: fin.setdefault("a", t)))
    loop.at(25.0, b.pull_started)
    loop.at(55.0, b.pull_ended)
    loop.run()
    # A: 3 steps alone (30 ms), 1 slowed step to 60 ms (the pull ends inside it), 6 alone
    assert fin == {"a": 120.0}
    assert core.busy() == 0 and b.receiving == 0


def test_relay_step_factor_scales_only_the_relays_decode_steps():
    from pddbench.schema.scenario import load_scenario
    from pddbench.sim.cluster import build_cluster

    pdd = Path(__file__).resolve().parent.parent / "scenarios" / "paper" / "pdd.yaml"
    c = build_cluster(load_scenario(pdd, ["twin_calibration.relay_step_factor=2.5"]), EventLoop())
    plain = build_cluster(load_scenario(pdd), EventLoop())
    assert c.relay[0].latency.decode_ms(4, 1000) == pytest.approx(2.5 * plain.relay[0].latency.decode_ms(4, 1000))
    assert c.relay[0].latency.prefill_ms(512, 1e5) == plain.relay[0].latency.prefill_ms(512, 1e5)
    assert c.decode[0].latency.decode_ms(4, 1000) == plain.decode[0].latency.decode_ms(4, 1000)


def test_decode_admission_waits_for_kv_capacity():
    loop = EventLoop()
    d = DecodeInstance(loop, "D0", ConstLatency(10.0), kv_capacity_tokens=150, max_batch=8, cache=None, block_size=512)
    fin = {}
    for name in "ab":
        d.submit(DecodeJob(Req(), 100, 3, 0, None, lambda j, t, n=name: fin.setdefault(n, t)))
    loop.run()
    assert fin["a"] == 30.0 and fin["b"] == 60.0  # b waited for a's KV to be released


def test_decode_stop_counts_produced_tokens():
    loop = EventLoop()
    d = DecodeInstance(loop, "D0", ConstLatency(10.0), kv_capacity_tokens=10_000, max_batch=8, cache=None, block_size=512)
    job = DecodeJob(Req(), 100, 50, 0, None, lambda j, t: None)
    d.submit(job)
    got = {}
    loop.at(35.0, lambda: got.setdefault("stop", d.stop(job)))
    loop.run()
    assert got["stop"] == (4, 40.0)  # the step in progress at 35 ms completes at 40 ms


def test_extend_pauses_the_batch():
    loop = EventLoop()
    d = DecodeInstance(loop, "D0", ConstLatency(10.0, per_extend_ms=1.0), 10_000, 8, None, 512)
    fin = {}
    d.submit(DecodeJob(Req(), 100, 10, 0, None, lambda j, t: fin.setdefault("a", t)))
    loop.at(25.0, lambda: d.submit(DecodeJob(Req(), 100, 2, 20, None, lambda j, t: fin.setdefault("b", t))))
    loop.run()
    # b joins at 30 ms after a 20 ms extend pause: tokens at 60, 70; a is delayed by 20 ms
    assert fin == {"b": 70.0, "a": 120.0}


def test_calibrated_fit_recovers_coefficients(tmp_path):
    rows = ["phase,tokens,attn_pairs,batch,kv_tokens,step_ms"]
    for t in (128, 1024, 4096, 8192):
        for a in (0, 1e6, 4e6):
            rows.append(f"prefill,{t},{a},,,{5 + 0.1 * t + 2e-6 * a}")
    for b in (1, 8, 32):
        for kv in (1000, 50000):
            rows.append(f"decode,,,{b},{kv},{3 + 0.2 * b + 1e-4 * kv}")
    path = tmp_path / "cal.csv"
    path.write_text("\n".join(rows) + "\n")
    m = Calibrated.fit_csv(path)
    assert m.prefill_ms(2000, 2e6) == pytest.approx(5 + 200 + 4, rel=1e-6)
    assert m.decode_ms(16, 20000) == pytest.approx(3 + 3.2 + 2, rel=1e-6)


def test_calibration_csv_errors_name_line(tmp_path):
    path = tmp_path / "cal.csv"
    path.write_text("phase,tokens,attn_pairs,batch,kv_tokens,step_ms\nprefill,1,0,,,1\nwarmup,1,0,,,1\n")
    with pytest.raises(InputError) as exc:
        Calibrated.fit_csv(path)
    assert exc.value.line == 3 and exc.value.field == "phase"


def test_records_frame_equals_the_per_request_records():
    # records_frame builds the columns with numpy; they must equal record() + to_frame() bit for bit
    import math
    import random

    import pandas as pd

    from pddbench.metrics.records import to_frame
    from pddbench.sim.request import SimRequest, records_frame

    rng, reqs = random.Random(5), []
    for i in range(400):
        r = SimRequest(i, rng.uniform(0, 1e5), rng.randint(1, 9000), rng.choice([1, 2, 300]), [i], rng.choice([None, 3]),
                       rng.choice([None, 0, 4]))
        r.done = rng.random() < 0.9
        r.failure_reason = rng.choice(["", "", "", "kv_exceeds_MD_capacity"])
        if rng.random() < 0.95:
            r.prefill_start_ms = r.arrival_ms + rng.uniform(0, 50)
            r.prefill_end_ms = r.prefill_start_ms + rng.uniform(0, 900)
            r.first_token_ms = r.prefill_end_ms + rng.uniform(0, 500)
            r.finish_ms = r.first_token_ms + rng.uniform(0, 9000)
        r.max_itl_ms = rng.choice([0.0, rng.uniform(0, 80)])
        if rng.random() < 0.5:
            r.pipeline, r.handoff_mode, r.relay_tokens = "p_rld_md", "catch_up", rng.randint(0, r.output_tokens)
            r.relay_start_ms, r.relay_end_ms = r.prefill_end_ms + 1.5, r.prefill_end_ms + rng.uniform(2, 99)
            r.handoff_start_ms, r.md_first_ms = r.relay_start_ms + 3.25, r.relay_end_ms + rng.uniform(0, 40)
            r.handoff_stall_ms = rng.choice([math.nan, rng.uniform(0, 120)])
        r.wan_kv_ms = rng.choice([math.nan, rng.uniform(1, 3000)])
        r.wan_kv_bytes, r.transfer_aborted = rng.randint(0, 10**9), rng.random() < 0.2
        reqs.append(r)
    pd.testing.assert_frame_equal(records_frame(reqs), to_frame([r.record() for r in reqs]), check_exact=True)
    assert len(records_frame([])) == 0


@pytest.mark.parametrize("enabled_before", [True, False])
def test_simulate_pauses_the_cycle_collector_and_restores_it(enabled_before, monkeypatch):
    import gc

    from pddbench.schema.scenario import load_scenario
    from pddbench.sim import run

    seen = []
    real = run._simulate
    monkeypatch.setattr(run, "_simulate", lambda *a: (seen.append(gc.isenabled()), real(*a))[1])
    sc = load_scenario("scenarios/paper/pdd.yaml", ["workload.synth.requests=50"])
    (gc.enable if enabled_before else gc.disable)()
    try:
        records, _ = run.simulate(sc)
        assert gc.isenabled() is enabled_before
    finally:
        gc.enable()
    assert seen == [False] and len(records) == 50
