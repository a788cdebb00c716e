"""The one WAN model (netem/link_model.py) on hand-checkable numbers, and the simulator's link
predicting through it."""

import pytest

from netem.link_model import (effective_delay_ms, effective_rate_gbps, fifo_free_at, predict_transfer_ms)
from netem.profile import LinkProfile
from pddbench.sim.engine import EventLoop
from pddbench.sim.link import Link

# 8 Gbit/s = 1e6 B/ms: a 1e6 B transfer alone on the line takes 1 ms.
PROF = LinkProfile(delay_ms=5, rate_gbps=8, rate_scale=4, forward={"delay_ms": 7}, reverse={"rate_gbps": 2})


def test_rate_lines_scale_and_direction():
    assert effective_rate_gbps(PROF) == 8
    assert effective_rate_gbps(PROF, lines=3) == 24
    assert effective_rate_gbps(PROF, emulated=True) == 2  # netem shapes rate / rate_scale
    assert effective_rate_gbps(PROF, lines=2, emulated=True) == 4
    assert effective_rate_gbps(PROF, direction="reverse") == 2  # the override replaces the rate
    assert effective_rate_gbps(PROF, direction="reverse", emulated=True) == 0.5
    assert effective_rate_gbps(LinkProfile(rate_scale=4), lines=2, emulated=True) is None  # unlimited
    with pytest.raises(ValueError):
        effective_rate_gbps(PROF, direction="sideways")


def test_delay_direction_override():
    assert effective_delay_ms(PROF) == 7
    assert effective_delay_ms(PROF, direction="reverse") == 5
    assert effective_delay_ms(LinkProfile(delay_ms=3, reverse={"delay_ms": 0})) == 3
    assert effective_delay_ms(LinkProfile(delay_ms=3, reverse={"delay_ms": 0}), direction="reverse") == 0


def test_fair_and_fifo_predictions():
    fair = dict(rate_gbps=8, delay_ms=5, sharing="fair")
    assert predict_transfer_ms(1e6, **fair) == 1 + 5
    assert predict_transfer_ms(1e6, in_flight=2, **fair) == 3 + 5  # a third of the rate
    assert predict_transfer_ms(1e6, backlog_ms=100, **fair) == 1 + 5  # fair ignores a fifo backlog
    fifo = dict(rate_gbps=8, delay_ms=5, sharing="fifo")
    assert predict_transfer_ms(1e6, backlog_ms=4, **fifo) == 4 + 1 + 5  # waits, then the whole rate
    assert predict_transfer_ms(1e6, in_flight=9, **fifo) == 1 + 5
    for sharing in ("fair", "fifo"):  # unlimited: the delay alone
        assert predict_transfer_ms(1e9, rate_gbps=None, delay_ms=5, sharing=sharing, in_flight=3, backlog_ms=9) == 5


def test_fifo_booking():
    assert fifo_free_at(10.0, 0.0, 2e6, 8) == 12.0  # line idle: starts now
    assert fifo_free_at(10.0, 15.0, 2e6, 8) == 17.0  # behind what was booked
    assert fifo_free_at(10.0, 15.0, 2e6, None) == 15.0  # unlimited adds nothing


@pytest.mark.parametrize("sharing", ["fair", "fifo"])
@pytest.mark.parametrize("lines", [1, 3])
def test_sim_link_predicts_with_the_model(sharing, lines):
    """In several states (idle, busy, partly served, after a cancel) the simulator's link predicts
    what link_model does from the same rate, delay, transfers in flight and backlog, worked out by
    hand here. Times are scaled by 1/lines so each state holds the same bytes whatever the lines."""
    prof = LinkProfile(delay_ms=5, rate_gbps=8, rate_scale=7, sharing=sharing, forward={"delay_ms": 3})
    loop = EventLoop()
    link = Link(loop, prof, "wan", lines)
    rate = effective_rate_gbps(prof, lines=lines)
    assert rate == 8 * lines  # the simulator models the real line: rate_scale is for emulation only
    seen = []

    def check(in_flight, backlog_bytes):
        model = predict_transfer_ms(5e5, rate_gbps=rate, delay_ms=3, sharing=sharing, in_flight=in_flight,
                                    backlog_ms=backlog_bytes / (1e6 * lines))
        seen.append((link.predict_ms(5e5), model))

    check(0, 0)
    trs = [link.send(n, lambda: None) for n in (3e6, 1e6, 2e6)]
    check(3, 6e6)
    loop.at(0.5 / lines, lambda: check(3, 5.5e6))
    loop.at(1.5 / lines, lambda: link.cancel(trs[2]))  # fair: 0.5e6 B of it sent; fifo: never started
    loop.at(2.2 / lines, lambda: check(2, 4e6 - 2.2e6))
    loop.run()
    assert len(seen) == 4
    for got, want in seen:
        assert got == pytest.approx(want, rel=1e-12)
    assert seen[0][0] == 0.5 / lines + 3  # idle: the whole rate and the forward delay


def test_unlimited_sim_link_predicts_the_delay():
    link = Link(EventLoop(), LinkProfile(delay_ms=4, rate_scale=3), "wan", 2)
    link.send(1e9, lambda: None)
    assert link.predict_ms(1e9) == predict_transfer_ms(1e9, rate_gbps=None, delay_ms=4, sharing="fair") == 4
