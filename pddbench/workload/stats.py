"""Trace analysis: sizes, arrival rate, prefix hit rates and the hit-rate bucket mix over time."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from pddbench.metrics.percentiles import distribution
from pddbench.workload.hitrate import BUCKET_LABELS, HIST_EDGES_PCT, buckets, hit_tokens, histogram
from pddbench.workload.trace import Request


def trace_stats(requests: Sequence[Request], block_size: int = 512, cache_blocks: int | None = None,
                window_s: float = 60.0) -> dict:
    if window_s <= 0:
        raise ValueError("window_s must be > 0")
    ts = np.fromiter((r.timestamp_ms for r in requests), dtype=np.int64, count=len(requests))
    inp = np.fromiter((r.input_length for r in requests), dtype=np.int64, count=len(requests))
    out = np.fromiter((r.output_length for r in requests), dtype=np.int64, count=len(requests))
    hit = hit_tokens(requests, block_size, cache_blocks)
    rate = hit / inp
    bucket_ids = buckets(hit, inp)

    duration_s = float(ts[-1] - ts[0]) / 1000.0
    windows = _windows(ts, rate, bucket_ids, window_s)
    sessions = {r.session_id for r in requests if r.session_id is not None}
    return {
        "requests": len(requests),
        "sessions": len(sessions) or None,
        "duration_s": duration_s,
        "arrival_rate_rps": len(requests) / duration_s if duration_s > 0 else None,
        "input_length": distribution(inp),
        "output_length": distribution(out),
        "input_tokens_total": int(inp.sum()),
        "output_tokens_total": int(out.sum()),
        "block_size": block_size,
        "cache": "ideal" if cache_blocks is None else f"lru:{cache_blocks}",
        "mean_hit_rate": float(rate.mean()),
        "token_weighted_hit_rate": float(hit.sum() / inp.sum()),
        "hit_rate_histogram": {
            "edges_pct": list(HIST_EDGES_PCT),
            "labels": list(BUCKET_LABELS),
            "fraction": histogram(bucket_ids),
            "count": np.bincount(bucket_ids, minlength=len(BUCKET_LABELS)).tolist(),
        },
        "window_s": window_s,
        "windows": windows,
        "_per_request_hit_rate": rate,  # for figures; dropped before JSON output
    }


def _windows(ts: np.ndarray, rate: np.ndarray, bucket_ids: np.ndarray, window_s: float) -> list[dict]:
    """The bucket mix per window that holds requests (empty windows are left out, so the cost is
    O(requests) whatever the trace's span)."""
    win_idx = (ts - ts[0]) // min(max(1, int(window_s * 1000)), 2**62)
    occupied, starts = np.unique(win_idx, return_index=True)
    bounds = list(starts) + [len(ts)]  # timestamps are sorted, so each window is a slice
    return [{"start_s": float(w * window_s), "requests": int(b - a), "mean_hit_rate": float(rate[a:b].mean()),
             "fraction": histogram(bucket_ids[a:b])}
            for w, a, b in zip(occupied.tolist(), bounds, bounds[1:])]


def public(stats: dict) -> dict:
    """The JSON-safe part of trace_stats()."""
    return {k: v for k, v in stats.items() if not k.startswith("_")}
