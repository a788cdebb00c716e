"""Backend 3: an application-level transfer-time injector.

Per-packet delays of seconds break TCP (retransmission storms), so the article's "1-20 s per
request" WAN KV latencies are replayed at the transfer layer instead: the live KV path asks for
the next target latency, does the real transfer, then waits out the difference. The profile's
`transfer_latency_ms` list is replayed in order (cycled), exactly as the simulator's Link does.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Awaitable, Callable, TypeVar

from netem.profile import LinkProfile

T = TypeVar("T")


class TransferLatencyInjector:
    def __init__(self, profile: LinkProfile):
        if not profile.transfer_latency_ms:
            raise ValueError(f"profile {profile.name!r} has no transfer_latency_ms to replay")
        self._targets = itertools.cycle(profile.transfer_latency_ms)
        self.injected_ms: list[float] = []

    def next_target_ms(self) -> float:
        return float(next(self._targets))

    def remaining_ms(self, target_ms: float, elapsed_ms: float) -> float:
        """Extra wait so the transfer takes target_ms in all (never negative: a real transfer
        slower than its target is not shortened)."""
        extra = max(0.0, target_ms - elapsed_ms)
        self.injected_ms.append(extra)
        return extra

    async def transfer(self, do_transfer: Callable[[], Awaitable[T]]) -> T:
        target = self.next_target_ms()
        start = time.monotonic()
        result = await do_transfer()
        await asyncio.sleep(self.remaining_ms(target, (time.monotonic() - start) * 1000) / 1000)
        return result
