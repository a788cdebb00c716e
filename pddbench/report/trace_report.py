"""`pddbench trace stats`: a trace's statistics, and with an output folder, stats.json and figures."""

from __future__ import annotations

from pathlib import Path

from pddbench.io import write_json
from pddbench.report.trace_figures import bucket_mix_over_time, hit_rate_cdf
from pddbench.workload.stats import public, trace_stats
from pddbench.workload.trace import load_trace


def trace_report(file: Path, block_size: int, cache_blocks: int | None, window_s: float, out: Path | None) -> dict:
    """The public statistics of `file`; with `out`, also stats.json, hit_mix_over_time.png and
    hit_rate_cdf.png there."""
    stats = trace_stats(load_trace(file, block_size), block_size, cache_blocks, window_s)
    pub = public(stats)
    pub["trace"] = str(file)
    if out is not None:
        write_json(out / "stats.json", pub)
        bucket_mix_over_time(stats, out / "hit_mix_over_time.png")
        hit_rate_cdf(stats["_per_request_hit_rate"], out / "hit_rate_cdf.png", label=file.stem)
    return pub
