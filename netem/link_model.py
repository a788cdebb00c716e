"""One WAN model: the rate and delay a link profile gives a direction, and how long a transfer
takes on it. The simulator's links, the live PDD router's prediction and the netem backends all
call these, so what is simulated, predicted and emulated cannot drift apart.

Times in ms, rates in Gbit/s (None = unlimited), sizes in bytes. Pure functions.
"""

from __future__ import annotations

from typing import Literal

from netem.profile import LinkProfile

DirectionName = Literal["forward", "reverse"]  # forward = dc-a -> dc-b


def _override(profile: LinkProfile, direction: str):
    if direction not in ("forward", "reverse"):
        raise ValueError(f"direction must be 'forward' or 'reverse', not {direction!r}")
    return getattr(profile, direction)


def effective_rate_gbps(profile: LinkProfile, *, lines: int = 1, direction: DirectionName = "forward",
                        emulated: bool = False) -> float | None:
    """The line rate after the direction's override, times `lines` (the simulator's
    network.wan_lines); with `emulated`, divided by rate_scale: what netem shapes and what a live
    router sees. None = unlimited."""
    rate = _override(profile, direction).rate_gbps or profile.rate_gbps
    if rate is None:
        return None
    rate = rate * lines
    return rate / profile.rate_scale if emulated else rate


def effective_delay_ms(profile: LinkProfile, *, direction: DirectionName = "forward") -> float:
    """The one-way base delay after the direction's override (jitter not included)."""
    over = _override(profile, direction).delay_ms
    return over if over is not None else profile.delay_ms


def bytes_per_ms(rate_gbps: float) -> float:
    # The one conversion; its operation order is the simulator's, kept for identical records.
    return rate_gbps * 1e9 / 8 / 1e3


def predict_transfer_ms(nbytes: float, *, rate_gbps: float | None, delay_ms: float,
                        sharing: Literal["fair", "fifo"], in_flight: int = 0, backlog_ms: float = 0.0) -> float:
    """How long a transfer of nbytes started now takes if nothing else changes.

    fair: it gets 1/(in_flight + 1) of the rate (in_flight = transfers already being served);
    fifo: it first waits backlog_ms (until the bytes booked ahead have crossed), then gets the
    whole rate. Plus the one-way delay. An unlimited rate takes the delay alone."""
    if rate_gbps is None:
        return delay_ms
    rate = bytes_per_ms(rate_gbps)
    if sharing == "fifo":
        return backlog_ms + nbytes / rate + delay_ms
    return nbytes * (in_flight + 1) / rate + delay_ms


def fifo_free_at(now_ms: float, free_at_ms: float, nbytes: float, rate_gbps: float | None) -> float:
    """fifo booking: when the line is free again after nbytes sent at now_ms queue behind what was
    booked up to free_at_ms. A prediction's backlog_ms is then max(0, free_at_ms - now_ms)."""
    start = max(now_ms, free_at_ms)
    return start if rate_gbps is None else start + nbytes / bytes_per_ms(rate_gbps)
