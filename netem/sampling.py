"""Random processes of a link profile, shared by the simulator and the live delay line:
per-packet (or per-transfer) jitter, loss, and the outage schedule. All take a seeded RNG."""

from __future__ import annotations

import random

from netem.profile import Jitter, Loss, Outages


class JitterSampler:
    def __init__(self, jitter: Jitter, rng: random.Random):
        self.j, self.rng = jitter, rng

    def sample_ms(self) -> float:
        """A signed offset added to the base delay (callers clamp the total at >= 0)."""
        j, rng = self.j, self.rng
        if j.distribution == "none":
            return 0.0
        if j.distribution == "empirical":
            return rng.choice(j.samples_ms)
        if j.sd_ms == 0:
            return 0.0
        if j.distribution == "normal":
            return rng.gauss(0.0, j.sd_ms)
        if j.distribution == "uniform":
            return rng.uniform(-j.sd_ms, j.sd_ms)
        if j.distribution == "pareto":
            return j.sd_ms * (rng.paretovariate(j.pareto_shape) - 1.0)
        return rng.lognormvariate(0.0, 1.0) * j.sd_ms - j.sd_ms  # lognormal


class LossModel:
    """Bernoulli, or Gilbert-Elliott (good/bad states with their own loss) for bursts."""

    def __init__(self, loss: Loss, rng: random.Random):
        self.l, self.rng = loss, rng
        self.bad = False

    def lost(self) -> bool:
        l, rng = self.l, self.rng
        if l.model == "none":
            return False
        if l.model == "bernoulli":
            return rng.random() < l.p
        self.bad = (rng.random() >= l.r) if self.bad else (rng.random() < l.p)
        return rng.random() < (l.loss_bad if self.bad else l.loss_good)


class OutageSchedule:
    """Outage windows [start, end) in ms, a Poisson process of heavy-tailed (pareto) stalls,
    generated lazily and independent of traffic."""

    def __init__(self, outages: Outages, rng: random.Random):
        self.o, self.rng = outages, rng
        self.windows: list[tuple[float, float]] = []
        self._end = 0.0

    def window(self, i: int) -> tuple[float, float] | None:
        o = self.o
        if o.windows_ms:
            return tuple(o.windows_ms[i]) if i < len(o.windows_ms) else None  # type: ignore[return-value]
        if o.rate_per_s <= 0:
            return None
        while len(self.windows) <= i:
            start = self._end + self.rng.expovariate(o.rate_per_s) * 1e3
            dur = min(o.max_ms, o.min_ms * self.rng.paretovariate(o.pareto_shape))
            self._end = start + dur
            self.windows.append((start, start + dur))
        return self.windows[i]

    def covering(self, t_ms: float, start_index: int = 0) -> tuple[int, tuple[float, float] | None]:
        """(index of the first window not ended by t, that window if it covers t else None)."""
        i = start_index
        while (w := self.window(i)) is not None and w[1] <= t_ms:
            i += 1
        w = self.window(i)
        return i, (w if w is not None and w[0] <= t_ms else None)
