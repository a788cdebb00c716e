"""netem logic without a network: scheduling on a fake clock, netlink encodings, profiles."""

import statistics
import struct

import pytest

from netem import load_profile
from netem.kernel_netem import NETEM_DIST_SCALE, TABLE_SIZE, U32, netem_options, parse_qdisc_message, qdisc_message
from netem.nfqueue import NF_ACCEPT, config_messages, parse_packet_ids, verdict_message
from netem.profile import PROFILE_DIR, Jitter, LinkProfile, Loss, Outages
from netem.scheduler import DelayScheduler
from netem.shaping import burst_bytes
from pddbench.core.errors import InputError


def releases(sched, arrivals):
    return [sched.release_time(t) for t in arrivals]


def test_fixed_delay_in_order():
    s = DelayScheduler(LinkProfile(delay_ms=30))
    assert releases(s, [0, 1, 2.5]) == [30, 31, 32.5]


def test_fifo_without_reorder_and_overtaking_with_it():
    prof = dict(delay_ms=30, jitter=Jitter(distribution="normal", sd_ms=10))
    fifo = releases(DelayScheduler(LinkProfile(**prof)), [i * 0.5 for i in range(400)])
    assert fifo == sorted(fifo)
    prof["jitter"] = Jitter(distribution="normal", sd_ms=10, reorder=True)
    free = releases(DelayScheduler(LinkProfile(**prof)), [i * 0.5 for i in range(400)])
    assert free != sorted(free)
    delays = [r - i * 0.5 for i, r in enumerate(free)]
    assert statistics.pstdev(delays) == pytest.approx(10, rel=0.15)
    assert statistics.fmean(delays) == pytest.approx(30, abs=1.5)


def test_bernoulli_loss_rate_and_seed():
    prof = LinkProfile(delay_ms=1, loss=Loss(model="bernoulli", p=0.01), seed=7)
    a = releases(DelayScheduler(prof), range(20000))
    b = releases(DelayScheduler(prof), range(20000))
    assert a == b
    lost = sum(r is None for r in a)
    assert 140 < lost < 260  # 200 expected, > 5 sd margin
    other = releases(DelayScheduler(prof.model_copy(update={"seed": 8})), range(20000))
    assert other != a


def test_gilbert_elliott_loss_is_bursty():
    prof = LinkProfile(loss=Loss(model="gilbert_elliott", p=0.01, r=0.2, loss_good=0.0, loss_bad=1.0))
    lost = [r is None for r in releases(DelayScheduler(prof), range(50000))]
    runs, cur = [], 0
    for x in lost:
        if x:
            cur += 1
        elif cur:
            runs.append(cur)
            cur = 0
    assert statistics.fmean(runs) > 3  # mean burst 1/r = 5; Bernoulli would give ~1


def test_outage_holds_packets_until_it_ends():
    prof = LinkProfile(delay_ms=10, outages=Outages(windows_ms=[(100, 5100)]))
    s = DelayScheduler(prof)
    assert releases(s, [50, 100, 3000, 5100, 6000]) == [60, 5100, 5100, 5110, 6010]
    assert s.held == 2


def test_per_direction_overrides():
    prof = LinkProfile(delay_ms=10, reverse={"delay_ms": 2, "loss": {"model": "bernoulli", "p": 1.0}})
    assert DelayScheduler(prof, "forward").release_time(0) == 10
    assert DelayScheduler(prof, "reverse").release_time(0) is None


def test_kernel_netem_message_round_trip():
    prof = LinkProfile(delay_ms=30, jitter=Jitter(distribution="normal", sd_ms=10), rate_gbps=1.0,
                       loss=Loss(model="bernoulli", p=0.01), seed=42)
    msg = parse_qdisc_message(qdisc_message(7, netem_options(prof)))
    assert msg["kind"] == "netem" and msg["ifindex"] == 7 and msg["parent"] == 0xFFFFFFFF
    assert msg["latency_ns"] == 30_000_000 and msg["jitter_ns"] == 10_000_000
    assert msg["rate_bytes_per_s"] == 125_000_000
    assert msg["loss_u32"] == round(0.01 * U32)
    assert msg["seed"] == 42
    table = msg["dist"]
    assert len(table) == TABLE_SIZE
    assert statistics.fmean(table) == pytest.approx(0, abs=20)
    assert statistics.pstdev(table) == pytest.approx(NETEM_DIST_SCALE, rel=0.02)


def test_kernel_netem_gilbert_elliott_and_no_table_without_jitter():
    prof = LinkProfile(delay_ms=5, loss=Loss(model="gilbert_elliott", p=0.1, r=0.5, loss_good=0.0, loss_bad=0.8))
    msg = parse_qdisc_message(qdisc_message(1, netem_options(prof)))
    assert "dist" not in msg
    p, r, h, k1 = msg["ge"]
    assert (p, r) == (round(0.1 * U32), round(0.5 * U32))
    assert h == round(0.2 * U32) and k1 == 0  # netem: loss in bad state when rand > h


def test_nfqueue_messages():
    bind, params = config_messages(3, 500)
    assert struct.unpack_from("=H", bind, 4)[0] == (3 << 8) | 2
    v = verdict_message(3, 99, NF_ACCEPT)
    assert struct.unpack_from("!II", v, 24) == (NF_ACCEPT, 99)
    # a PACKET message carrying packet id 1234 in NFQA_PACKET_HDR
    attr = struct.pack("=HH", 11, 1) + struct.pack("!IHB", 1234, 0x0800, 3) + b"\0"
    body = struct.pack("=BBH", 2, 0, 0) + attr
    pkt = struct.pack("=IHHII", 16 + len(body), (3 << 8) | 0, 0, 0, 0) + body
    assert parse_packet_ids(pkt + pkt) == [1234, 1234]
    err = struct.pack("=IHHII", 36, 2, 0, 0, 0) + struct.pack("=i", -1) + b"\0" * 16
    with pytest.raises(OSError):
        parse_packet_ids(err)
    # with the kernel's receive time (NFQA_TIMESTAMP: be64 seconds, be64 microseconds)
    from netem.nfqueue import parse_packets

    stamp = struct.pack("=HH", 20, 4) + struct.pack("!QQ", 1_700_000_000, 250_000)
    body2 = body + stamp
    pkt2 = struct.pack("=IHHII", 16 + len(body2), (3 << 8) | 0, 0, 0, 0) + body2
    assert parse_packets(pkt2 + pkt) == [(1234, 1_700_000_000.25), (1234, None)]


def test_shipped_profiles_load_and_bad_profile_is_clear(tmp_path):
    names = sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))
    assert {"fixed-30ms", "cross-city-10g", "cross-city-100g", "lossy-wan", "stall-1-20s", "same-dc-rdma"} <= set(names)
    fixed = load_profile("fixed-30ms")
    assert (fixed.delay_ms, fixed.rate_gbps, fixed.jitter.distribution, fixed.loss.model) == (15, 1.0, "none", "none")
    bad = tmp_path / "bad.yaml"
    bad.write_text("delay_ms: -1\n")
    with pytest.raises(InputError) as exc:
        load_profile(bad)
    assert exc.value.field == "delay_ms"
    with pytest.raises(InputError):
        load_profile("no-such-profile")


def test_burst_rule():
    assert burst_bytes(0.1) == 131072
    assert burst_bytes(10) == 1_250_000


def test_transfer_injector_replays_and_waits_out_the_difference():
    import asyncio

    from netem.injector import TransferLatencyInjector

    prof = load_profile("replay-1-20s")
    assert all(1000 <= v <= 20000 for v in prof.transfer_latency_ms)
    inj = TransferLatencyInjector(LinkProfile(transfer_latency_ms=[30, 5]))
    assert [inj.next_target_ms() for _ in range(3)] == [30, 5, 30]
    assert inj.remaining_ms(30, 12) == 18 and inj.remaining_ms(5, 9) == 0

    async def real():
        return "kv"

    inj2 = TransferLatencyInjector(LinkProfile(transfer_latency_ms=[20]))
    import time as _t
    t = _t.monotonic()
    assert asyncio.run(inj2.transfer(real)) == "kv"
    assert _t.monotonic() - t >= 0.019
    with pytest.raises(ValueError):
        TransferLatencyInjector(LinkProfile())


def test_up_interrupted_midway_leaves_nothing(monkeypatch):
    import os

    if os.geteuid() != 0 or __import__("shutil").which("iptables") is None:
        pytest.skip("needs root and iptables")
    from netem import manager
    from netem.topology import our_namespaces

    manager.down()

    def boom(_ns):
        raise KeyboardInterrupt  # Ctrl-C after namespaces, rules and delay lines exist

    monkeypatch.setattr(manager, "read_tcp_settings", boom)
    with pytest.raises(KeyboardInterrupt):
        manager.up(load_profile("fixed-30ms"))
    assert our_namespaces() == []
    assert not manager.STATE_DIR.exists()
    import subprocess

    assert subprocess.run(["pgrep", "-f", "netem.delayline"], capture_output=True).returncode == 1


def test_rtt_check_rejects_a_wrong_delay():
    """netem.calibrate.rtt_explained (test_netem_live's RTT check) cannot be met by a link with
    the wrong delay, however late its lines say they were, nor by an excess that the lines' own
    lateness does not explain."""
    from netem import calibrate

    def cal(p50, p99, late, valid=True):
        return {"rtt_ms": {"p50": p50, "p99": p99}, "valid": valid, "probes": {"lost": 0},
                "lateness_ms": {"per_direction": {"forward": {"p99": late}, "reverse": {"p99": late}}}}
    assert calibrate.rtt_explained(cal(30.6, 32.0, 0.1), 30)
    assert calibrate.rtt_explained(cal(30.9, 36.5, 2.0), 30)          # excess 6.5 <= 3 + 2 x 2.0
    assert not calibrate.rtt_explained(cal(30.9, 36.5, 0.2), 30)      # excess not explained by the line
    assert not calibrate.rtt_explained(cal(33.0, 34.0, 4.0), 30)      # p50 off: the delay is wrong
    assert not calibrate.rtt_explained(cal(25.0, 26.0, 0.1), 30)
    assert not calibrate.rtt_explained(cal(30.5, 31.0, 6.0, valid=False), 30)


def test_link_profile_with_a_duplicate_key_is_refused_in_one_line(tmp_path):
    from netem.errors import InputError
    from netem.profile import load_profile

    path = tmp_path / "dup.yaml"
    path.write_text("delay_ms: 5\nrate_gbps: 1\ndelay_ms: 6\n")
    with pytest.raises(InputError) as exc:
        load_profile(path)
    assert "duplicate key 'delay_ms'" in str(exc.value) and ":3:" in str(exc.value) and "\n" not in str(exc.value)
