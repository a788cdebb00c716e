"""`pddbench compare`: runs side by side, from their folders (summary.json + records.parquet)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pandas as pd

from pddbench.core.errors import InputError, UserError
from pddbench.core.io import atomic_path, write_json
from pddbench.core.loading import read_json
from pddbench.metrics.records import read_records

ROWS = [
    ("requests completed", lambda s: s["requests_completed"]),
    ("requests failed", lambda s: s["requests_failed"]),
    ("TTFT p50 (ms)", lambda s: s["ttft_ms"]["p50"]),
    ("TTFT p90 (ms)", lambda s: s["ttft_ms"]["p90"]),
    ("TTFT p99 (ms)", lambda s: s["ttft_ms"]["p99"]),
    ("TTFT mean (ms)", lambda s: s["ttft_ms"]["mean"]),
    ("TPOT p50 (ms)", lambda s: s["tpot_ms"]["p50"]),
    ("TPOT p90 (ms)", lambda s: s["tpot_ms"]["p90"]),
    ("TPOT p99 (ms)", lambda s: s["tpot_ms"]["p99"]),
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
    ("cost per 1M output tokens", lambda s: s["cost_per_hour"] / (s["output_tokens_per_s"] * 3600) * 1e6
     if s.get("output_tokens_per_s") else None),
]


def load_run(folder: Path) -> tuple[dict, pd.DataFrame]:
    """A run folder's summary and records; anything missing or broken is one UserError line."""
    if not (folder / "summary.json").is_file():
        raise UserError(f"{folder}: not a run folder (no summary.json); pass folders written by `pddbench run`")
    summary = read_json(folder / "summary.json", "summary file")
    if not isinstance(summary, dict):
        raise InputError(str(folder / "summary.json"), "is not a JSON object")
    return summary, load_records(folder)


def load_records(folder: Path) -> pd.DataFrame:
    path = folder / "records.parquet"
    if not path.is_file():
        raise UserError(f"{folder}: has no records.parquet (an unfinished or damaged run folder)")
    try:
        records = read_records(path)
    except Exception as exc:  # pyarrow raises many kinds for a damaged file
        raise InputError(str(path), f"is not a readable records file ({type(exc).__name__}: "
                         f"{' '.join(str(exc).split())[:120]})") from None
    missing = [c for c in ("request_id", "failed", "ttft_ms", "arrival_ms") if c not in records.columns]
    if missing:
        raise InputError(str(path), f"lacks the record fields {missing}")
    return records


# the summary values the rows and the figure titles read: each must be a finite number or null (no
# value); a string, boolean, mapping or non-finite number is refused (a "123" would otherwise be
# compared as a number, and a changed one reported as a +273 % change)
NUMBERS = ("requests_completed", "requests_failed", "ttft_ms.p50", "ttft_ms.p90", "ttft_ms.p99", "ttft_ms.mean",
           "tpot_ms.p50", "tpot_ms.p90", "tpot_ms.p99", "slo_attainment", "goodput_rps", "wan_kv_bytes",
           "wan_kv_bytes_saved", "aborted_transfers", "relay_token_share", "handoff_stall_ms.p99",
           "handoff_stall_ms.max", "relay_busy_ms.mean", "p_hit_rate", "decode_hit_rate", "cost_per_hour")
OPTIONAL_NUMBERS = ("output_tokens_per_s", "offered_rps", "sla.percentile", "sla.ttft_ms", "sla.tpot_ms")


def _check_numbers(summary: dict, folder: Path) -> None:
    """Every value compare reads is a finite number or null; one line naming the run folder and metric."""
    from pddbench.core.loading import why_not_number  # the gate's test too: one definition of "a finite number"

    where = str(folder / "summary.json")
    for name in NUMBERS + OPTIONAL_NUMBERS:
        node, found = summary, True
        for part in name.split("."):
            if not isinstance(node, dict) or part not in node:
                found = False
                break
            node = node[part]
        if not found:
            if name in NUMBERS:
                raise InputError(where, "is missing; compare needs it (not a pddbench summary, or from another "
                                 "version)", field=name)
            continue
        why = why_not_number(node)
        if why is not None:
            raise InputError(where, f"is {why}; compare needs a finite number (or null)", field=name)
    if summary.get("sla") is not None and not isinstance(summary["sla"], dict):
        raise InputError(where, "must be a mapping", field="sla")


def _row_values(summary: dict, folder: Path) -> dict:
    import math

    values = {}
    for name, fn in ROWS:
        try:
            value = fn(summary)
        except (KeyError, TypeError, OverflowError):
            raise InputError(str(folder / "summary.json"), f"lacks what '{name}' needs (not a pddbench summary, "
                             "or from another version)") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise InputError(str(folder / "summary.json"), f"gives '{name}' = {value} (not finite)")
        values[name] = value
    return values


def _comparable(summary: dict, folder: Path, warn: Callable[[str], None]) -> None:
    """Refuse a run in which nothing completed; warn about an interrupted one."""
    if summary.get("requests_total") and not summary.get("requests_completed"):
        raise UserError(f"{folder}: no request completed (failure reasons {summary.get('failure_reasons')}); "
                        "nothing to compare")
    if summary.get("interrupted"):
        warn(f"warning: {folder} was interrupted (Ctrl-C): its figures cover a partial run")


def load_runs(folders: list[Path], warn: Callable[[str], None] = lambda _m: None) -> list[tuple[str, dict, pd.DataFrame]]:
    if not folders:
        raise UserError("compare needs at least one run folder")
    runs, seen = [], set()
    for f in folders:
        s, r = load_run(f)
        _check_numbers(s, f)
        _row_values(s, f)  # a summary that lacks a row's figures is refused before anything is written
        _comparable(s, f, warn)
        label = str(s.get("scenario", f.name)) + (" (interrupted)" if s.get("interrupted") else "")
        if label in seen:
            label = f"{label} ({f.name})"
        seen.add(label)
        runs.append((label, s, r))
    return runs


def compare_runs(folders: list[Path], out: Path, baseline: str | None = None) -> pd.DataFrame:
    return write_comparison(load_runs(folders), out, baseline)


def with_deltas(table: pd.DataFrame, baseline: str | None) -> pd.DataFrame:
    """The table with a "<column> vs <baseline> (%)" column after each other run: the relative
    change against the baseline column (the first when None); refuses an unknown name."""
    if table.shape[1] < 2:
        return table
    base = baseline or str(table.columns[0])
    if base not in table.columns:
        raise UserError(f"--baseline {base}: not one of the compared runs ({', '.join(map(str, table.columns))})")
    num = table.apply(pd.to_numeric, errors="coerce")
    out = {base: table[base]}
    for col in table.columns:
        if col == base:
            continue
        out[col] = table[col]
        b = num[base].where(num[base] != 0)
        out[f"{col} vs {base} (%)"] = ((num[col] / b - 1) * 100).round(1)
    return pd.DataFrame(out)


def write_comparison(runs: list[tuple[str, dict, pd.DataFrame]], out: Path, baseline: str | None = None) -> pd.DataFrame:
    table = pd.DataFrame({label: _row_values(s, out) for label, s, _ in runs})
    if baseline is not None and baseline not in table.columns:
        raise UserError(f"--baseline {baseline}: not one of the compared runs ({', '.join(map(str, table.columns))})")
    bars = table
    table = with_deltas(table, baseline)
    with atomic_path(out / "comparison.csv") as tmp:
        table.to_csv(tmp)
    write_json(out / "comparison.json", {label: s for label, s, _ in runs})
    from pddbench.report.run_figures import ttft_cdf
    from pddbench.report.compare_figures import compare_bars

    s0 = runs[0][1]
    sla = s0.get("sla") or {}
    what = (f"{', '.join(label for label, _, _ in runs)}; {s0.get('offered_rps') or 0:.1f} req/s, SLA P"
            f"{sla.get('percentile', 90):g} TTFT {sla.get('ttft_ms', 0) / 1000:g} s / TPOT {sla.get('tpot_ms', 0):g} ms")
    ttft_cdf({label: r for label, _, r in runs}, out / "ttft_cdf.png", sla.get("ttft_ms"), title=f"TTFT CDF: {what}")
    compare_bars(bars, out / "comparison.png", title=what)
    return table


def run_compare(folders: list[Path], out: Path | None, results: Path,
                warn: Callable[[str], None] = lambda _m: None, baseline: str | None = None) -> tuple[pd.DataFrame, Path]:
    """`pddbench compare`: check the output place, read every run, then claim the folder (`out`
    or a new RESULTS/compare/<run-id>/) and write the comparison."""
    from pddbench.core.io import run_folder
    from pddbench.core.io import check_out_options

    check_out_options(out, results)
    runs = load_runs(folders, warn)
    labels = [label for label, _, _ in runs]
    if baseline is not None and baseline not in labels:
        raise UserError(f"--baseline {baseline}: not one of the compared runs ({', '.join(labels)})")
    with run_folder(out, results, "compare") as folder:
        table = write_comparison(runs, folder.path, baseline)
    return table, folder.path
