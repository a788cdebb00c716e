"""`pddbench trace stats`: a trace's statistics, and with an output folder, stats.json and figures."""

from __future__ import annotations

from pathlib import Path

from pddbench.core.io import check_out_place, run_folder, write_json
from pddbench.report.trace_figures import bucket_mix_over_time, hit_rate_cdf
from pddbench.workload.stats import public, trace_stats
from pddbench.workload.trace import load_trace


def trace_report(file: Path, block_size: int, cache_blocks: int | None, window_s: float, out: Path | None) -> dict:
    """The public statistics of `file`; with `out`, also stats.json, hit_mix_over_time.png and
    hit_rate_cdf.png there."""
    if out is not None:
        check_out_place(out)
    stats = trace_stats(load_trace(file, block_size), block_size, cache_blocks, window_s)
    pub = public(stats)
    pub["trace"] = str(file)
    if out is not None:
        with run_folder(out, out, "") as folder:
            write_json(folder.path / "stats.json", pub)
            bucket_mix_over_time(stats, folder.path / "hit_mix_over_time.png")
            hit_rate_cdf(stats["_per_request_hit_rate"], folder.path / "hit_rate_cdf.png", label=file.stem)
    return pub
