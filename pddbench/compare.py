"""`pddbench compare`: runs side by side, from their folders (summary.json + records.parquet)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from pddbench.errors import UserError
from pddbench.io import atomic_path, write_json
from pddbench.records import read_records

ROWS = [
    ("requests completed", lambda s: s["requests_completed"]),
    ("requests failed", lambda s: s["requests_failed"]),
    ("TTFT p50 (ms)", lambda s: s["ttft_ms"]["p50"]),
    ("TTFT p90 (ms)", lambda s: s["ttft_ms"]["p90"]),
    ("TTFT p99 (ms)", lambda s: s["ttft_ms"]["p99"]),
    ("TTFT mean (ms)", lambda s: s["ttft_ms"]["mean"]),
    ("TPOT p90 (ms)", lambda s: s["tpot_ms"]["p90"]),
    ("SLO attainment", lambda s: s["slo_attainment"]),
    ("goodput (req/s)", lambda s: s["goodput_rps"]),
    ("WAN KV (GB)", lambda s: s["wan_kv_bytes"] / 1e9),
    ("WAN KV saved (GB)", lambda s: s["wan_kv_bytes_saved"] / 1e9),
    ("aborted transfers", lambda s: s["aborted_transfers"]),
    ("relay token share", lambda s: s["relay_token_share"]),
    ("handoff stall p99 (ms)", lambda s: s["handoff_stall_ms"]["p99"]),
    ("handoff stall max (ms)", lambda s: s["handoff_stall_ms"]["max"]),
    ("relay busy mean (ms)", lambda s: s["relay_busy_ms"]["mean"]),
    ("P hit rate", lambda s: s["p_hit_rate"]),
    ("decode-side hit rate", lambda s: s["decode_hit_rate"]),
    ("cost per hour", lambda s: s["cost_per_hour"]),
]


def load_run(folder: Path) -> tuple[dict, pd.DataFrame]:
    summary_path = folder / "summary.json"
    if not summary_path.is_file():
        raise UserError(f"{folder}: not a run folder (no summary.json); pass folders written by `pddbench run`")
    summary = json.loads(summary_path.read_text())
    return summary, read_records(folder / "records.parquet")


def compare_runs(folders: list[Path], out: Path) -> pd.DataFrame:
    if not folders:
        raise UserError("compare needs at least one run folder")
    labels, summaries, records = [], [], {}
    for f in folders:
        s, r = load_run(f)
        label = s.get("scenario", f.name)
        if label in records:
            label = f"{label} ({f.name})"
        labels.append(label)
        summaries.append(s)
        records[label] = r
    table = pd.DataFrame({lab: {name: fn(s) for name, fn in ROWS} for lab, s in zip(labels, summaries)})
    with atomic_path(out / "comparison.csv") as tmp:
        table.to_csv(tmp)
    write_json(out / "comparison.json", {lab: s for lab, s in zip(labels, summaries)})
    from pddbench.report.run_figures import ttft_cdf
    from pddbench.report.compare_figures import compare_bars

    ttft_cdf(records, out / "ttft_cdf.png", summaries[0]["sla"]["ttft_ms"])
    compare_bars(table, out / "comparison.png")
    return table
