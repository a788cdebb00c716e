"""The one percentile definition used everywhere: numpy's linear interpolation (type 7)."""

from __future__ import annotations

from typing import Iterable

import numpy as np

QUANTILES = (50, 90, 99)


def distribution(values: Iterable[float] | np.ndarray) -> dict[str, float | None]:
    """p50/p90/p99/mean/max of the values; None for each when there are none."""
    arr = np.asarray(values, dtype=float)
    arr = arr[~np.isnan(arr)]
    if arr.size == 0:
        return {**{f"p{q}": None for q in QUANTILES}, "mean": None, "max": None}
    ps = np.percentile(arr, QUANTILES)
    out: dict[str, float | None] = {f"p{q}": round(float(p), 6) for q, p in zip(QUANTILES, ps)}
    out["mean"] = round(float(arr.mean()), 6)
    out["max"] = round(float(arr.max()), 6)
    return out
