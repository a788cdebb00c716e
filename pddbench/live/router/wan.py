"""The router's account of its KV pulls on the WAN, for predicting the next one's time with the
one WAN model (netem/link_model.py) the simulator's links use. Pulls carry P's KV from dc-a to
MD in dc-b (the forward direction) at the emulated rate (rate_gbps / rate_scale)."""

from __future__ import annotations

import time
from typing import Callable

from netem.link_model import effective_delay_ms, effective_rate_gbps, fifo_free_at, predict_transfer_ms
from netem.profile import LinkProfile


class WanBook:
    def __init__(self, profile: LinkProfile, clock: Callable[[], float] = time.monotonic):
        self.rate_gbps = effective_rate_gbps(profile, direction="forward", emulated=True)
        self.delay_ms = effective_delay_ms(profile, direction="forward")
        self.sharing = profile.sharing
        self.clock = clock        # seconds
        self.inflight = 0
        self.free_at_ms = 0.0     # fifo: when the bytes booked so far will have crossed

    def predict_ms(self, nbytes: int) -> float:
        """What a pull of nbytes started now would take if nothing else changes."""
        backlog_ms = max(0.0, self.free_at_ms - self.clock() * 1000)
        return predict_transfer_ms(nbytes, rate_gbps=self.rate_gbps, delay_ms=self.delay_ms, sharing=self.sharing,
                                   in_flight=self.inflight, backlog_ms=backlog_ms)

    def book(self, nbytes: int) -> None:
        """A pull starts: its bytes queue behind those booked before (vLLM cannot stop a pull,
        so a booking stands even when the router gives up on it)."""
        self.inflight += 1
        self.free_at_ms = fifo_free_at(self.clock() * 1000, self.free_at_ms, nbytes, self.rate_gbps)

    def release(self) -> None:
        """A pull ended (done, failed or given up)."""
        self.inflight -= 1
