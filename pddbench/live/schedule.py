"""When to send: intended send offsets (s from run start). Pure, seeded, trivially testable."""

from __future__ import annotations

import random
from typing import Literal

from pddbench.workload.trace import Request


def from_trace(reqs: list[Request], time_scale: float = 1.0) -> list[float]:
    """The trace's own timestamps, compressed by time_scale (2.0 = twice as fast)."""
    t0 = reqs[0].timestamp_ms
    return [(r.timestamp_ms - t0) / 1000.0 / time_scale for r in reqs]


ARRIVALS = ("constant", "poisson", "gamma")


def at_rate(n: int, rate_rps: float, arrival: Literal["constant", "poisson", "gamma"] = "poisson",
            seed: int = 0, gamma_shape: float = 0.5) -> list[float]:
    """n arrivals at mean rate: 'constant' is exactly evenly spaced (not random), 'poisson' has
    exponential gaps, 'gamma' gaps with the given shape (burstier below 1)."""
    if rate_rps <= 0:
        raise ValueError("rate must be > 0")
    if arrival not in ARRIVALS:
        raise ValueError(f"arrival {arrival!r}: choose {', '.join(ARRIVALS)}")
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        out.append(t)
        if arrival == "constant":
            t += 1.0 / rate_rps
        elif arrival == "poisson":
            t += rng.expovariate(rate_rps)
        else:
            t += rng.gammavariate(gamma_shape, 1.0 / (rate_rps * gamma_shape))
    return out
