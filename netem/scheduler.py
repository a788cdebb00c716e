"""Per-packet delay-line decisions, free of I/O so they can be tested on a fake clock.

For a packet entering the line at time t (ms): drop it (loss), or release it at
t + delay + jitter; a packet entering during an outage is held until the outage ends. Without
reordering, releases are kept in arrival order (FIFO), as netem does when reordering is off.
"""

from __future__ import annotations

import random

from netem.link_model import effective_delay_ms
from netem.profile import LinkProfile
from netem.sampling import JitterSampler, LossModel, OutageSchedule


class DelayScheduler:
    def __init__(self, profile: LinkProfile, direction: str = "forward", start_ms: float = 0.0):
        if direction not in ("forward", "reverse"):
            raise ValueError("direction must be 'forward' or 'reverse'")
        over = getattr(profile, direction)
        self.delay_ms = effective_delay_ms(profile, direction=direction)
        seed = f"{profile.seed}:{direction}"
        jitter = over.jitter or profile.jitter
        self.jitter = JitterSampler(jitter, random.Random(seed + ":jitter"))
        self.loss = LossModel(over.loss or profile.loss, random.Random(seed + ":loss"))
        self.outages = OutageSchedule(profile.outages, random.Random(seed + ":outages"))
        self.reorder = jitter.reorder
        self.start_ms = start_ms  # outage schedule time zero
        self._last_release = float("-inf")
        self._outage_idx = 0
        self.dropped = 0
        self.held = 0

    def release_time(self, t_ms: float) -> float | None:
        """When a packet entering at t_ms leaves the line; None when it is lost."""
        if self.loss.lost():
            self.dropped += 1
            return None
        due = t_ms + max(0.0, self.delay_ms + self.jitter.sample_ms())
        self._outage_idx, window = self.outages.covering(t_ms - self.start_ms, self._outage_idx)
        if window is not None:
            self.held += 1
            due = max(due, window[1] + self.start_ms)
        if not self.reorder:
            due = max(due, self._last_release)
            self._last_release = due
        return due
