"""Steady state: the SLA judged after warm-up, and whether the run was stable at all.

Throughput within SLA is a steady-state figure. A short trace at an overloaded rate can end before
its queue has grown enough to break P90 (a 4,000-request trace overstated a decode-bound capacity
2x against 12,000), so a probe must (1) meet the SLA on the requests after warm-up and (2) show no
rising latency trend. Both are read from the records alone, so sim and live judge alike.

- Warm-up: the first WARMUP_FRACTION of arrivals (by arrival order) are left out. A fixed share,
  not "until the queue first drains": an overloaded run never drains, and every probe of a search
  then judges the same requests.
- Trend: the window's arrivals are cut in thirds; the last third's median TTFT (and TPOT) is
  compared with the middle third's. It is unstable when it grew by more than GROWTH_TOLERANCE
  and by more than FLOOR_OF_BOUND of the SLA bound (the floor keeps noise on tiny service times
  from counting). A failed request counts as an infinite latency, so a rising failure rate is a
  rising median too. Fewer than MIN_TREND_REQUESTS in the window: no trend is judged.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

WARMUP_FRACTION = 0.15
GROWTH_TOLERANCE = 0.25
FLOOR_OF_BOUND = 0.10
MIN_TREND_REQUESTS = 30


def _ok_fraction(values: pd.Series, done: pd.Series, bound: float) -> float:
    return float((done & (values <= bound)).mean()) if len(values) else 0.0


def _median(values: np.ndarray) -> float | None:
    return float(np.median(values)) if values.size else None


def _trend(values: np.ndarray, bound: float) -> dict:
    """Medians of the middle and last thirds of the window (arrival order) and whether it rose."""
    third = len(values) // 3
    mid, last = _median(values[third:2 * third]), _median(values[2 * third:])
    rising = (mid is not None and last is not None and last > mid * (1 + GROWTH_TOLERANCE)
              and last - mid > FLOOR_OF_BOUND * bound)
    return {"median_mid_ms": _finite(mid), "median_last_ms": _finite(last), "rising": bool(rising)}


def _finite(v: float | None) -> float | None:
    # JSON has no infinity: a median that is a failed request reads as null
    return round(v, 6) if v is not None and np.isfinite(v) else None


def steady_state(df: pd.DataFrame, ttft_ms: float, tpot_ms: float, percentile: float) -> dict:
    """The SLA after warm-up and the stability check; `holds` is what capacity searches on."""
    order = df.sort_values("arrival_ms", kind="mergesort")
    skip = int(len(order) * WARMUP_FRACTION)
    win = order.iloc[skip:]
    done = ~win["failed"]
    ttft = win["ttft_ms"].where(done, np.inf)
    tpot = win["tpot_ms"].fillna(0.0).where(done, np.inf)
    need = percentile / 100.0 - 1e-12
    ok = {"ttft": _ok_fraction(ttft, done, ttft_ms), "tpot": _ok_fraction(tpot, done, tpot_ms)}
    failing = [c for c in ("ttft", "tpot") if ok[c] < need]
    judged = len(win) >= MIN_TREND_REQUESTS
    trend = {"ttft": _trend(ttft.to_numpy(float), ttft_ms), "tpot": _trend(tpot.to_numpy(float), tpot_ms)}
    rising = [c for c in ("ttft", "tpot") if judged and trend[c]["rising"]]
    sla_ok = bool(len(win)) and not failing
    return {
        "warmup_fraction": WARMUP_FRACTION,
        "window": {"requests": int(len(win)), "warmup_requests": skip,
                   "first_arrival_ms": float(win["arrival_ms"].iloc[0]) if len(win) else None,
                   "last_arrival_ms": float(win["arrival_ms"].iloc[-1]) if len(win) else None},
        "ttft_ok_fraction": round(ok["ttft"], 6),
        "tpot_ok_fraction": round(ok["tpot"], 6),
        "sla_holds": sla_ok,
        "sla_failing": failing,
        "trend": {**trend, "judged": judged, "growth_tolerance": GROWTH_TOLERANCE, "floor_of_bound": FLOOR_OF_BOUND},
        "stable": None if not judged else not rising,
        "unstable_on": rising,
        "holds": sla_ok and not rising,
    }
