"""Figures of one run and of several runs side by side, made from records only."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from pddbench.core.io import interrupted_title, save_figure
from pddbench.report.plotting import pyplot

# The legs of TTFT, in order: where the time to first token went.
LEGS = [
    ("queue + prefill (DC A)", "arrival_ms", "prefill_end_ms"),
    ("KV wait: transfer (RDMA / WAN) + first decode step", "prefill_end_ms", "first_token_ms"),  # kv_wait_ms
]


def leg_table(records: pd.DataFrame) -> pd.DataFrame:
    """Mean ms of each TTFT leg per pipeline (completed requests)."""
    ok = records[~records["failed"]]
    rows = {}
    for pipeline, grp in ok.groupby("pipeline"):
        rows[pipeline] = {name: float((grp[b] - grp[a]).mean()) for name, a, b in LEGS}
    return pd.DataFrame(rows).T


def hit_rates_over_time(records: pd.DataFrame, window_s: float = 60.0) -> pd.DataFrame:
    """Token-weighted prefix hit rate on the prefill side and the decode side per arrival window."""
    w = (records["arrival_ms"] // (window_s * 1000)).astype(int)
    g = records.groupby(w)
    return pd.DataFrame({
        "minute": g["arrival_ms"].min() / 60000.0,
        "prefill": g["p_cached_tokens"].sum() / g["input_tokens"].sum(),
        "decode": g["decode_cached_tokens"].sum() / g["input_tokens"].sum(),
    })


def ttft_cdf(runs: dict[str, pd.DataFrame], path: Path, sla_ms: float | None = None, title: str = "TTFT CDF") -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for index, (label, rec) in enumerate(runs.items()):
        x = np.sort(rec.loc[~rec["failed"], "ttft_ms"].to_numpy())
        if len(x):
            line, = ax.plot(x / 1000, np.arange(1, len(x) + 1) / len(x) * 100, label=label)
            for q, marker in ((50, "o"), (90, "s"), (99, "^")):  # p50/p90/p99 marked and labelled
                v = float(np.percentile(x, q)) / 1000
                ax.plot(v, q, marker=marker, color=line.get_color(), ms=5)
                ax.annotate(f"p{q} {v:.2f}s", (v, q), textcoords="offset points", xytext=(4, -9 - 8 * index),
                            fontsize="x-small", color=line.get_color())
    plotted = bool(ax.lines)
    if sla_ms and plotted:
        ax.axvline(sla_ms / 1000, color="grey", ls="--", lw=1, label="TTFT SLA")
    if plotted:
        ax.set_xscale("log")
    else:
        ax.text(0.5, 0.5, "no request completed", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("TTFT (s, log scale)")
    ax.set_ylabel("requests at or below (%)")
    ax.set_title(title)
    if plotted:
        ax.legend()
    save_figure(fig, path)


def latency_legs(records: pd.DataFrame, path: Path, title: str) -> None:
    plt = pyplot()
    table = leg_table(records)
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.6 * max(1, len(table))))
    left = np.zeros(len(table))
    if table.empty:
        ax.text(0.5, 0.5, "no request completed", ha="center", va="center", transform=ax.transAxes)
    for name, _, _ in ([] if table.empty else LEGS):
        vals = table[name].fillna(0).to_numpy()
        ax.barh(table.index, vals, left=left, label=name)
        left += vals
    ax.set_xlabel("mean ms to first token")
    ax.set_title(f"Where TTFT goes, per pipeline: {title}")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=3, fontsize="small")
    save_figure(fig, path)


def hit_rate_drift(records: pd.DataFrame, path: Path, title: str) -> None:
    plt = pyplot()
    h = hit_rates_over_time(records)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(h["minute"], h["prefill"] * 100, label="prefill side (P)")
    ax.plot(h["minute"], h["decode"] * 100, label="decode side (D / MD)")
    ax.set_xlabel("minute")
    ax.set_ylabel("token-weighted prefix hit (%)")
    ax.set_ylim(0, 100)
    ax.set_title(f"Prefix hit rate over time: {title}")
    ax.legend()
    save_figure(fig, path)


def run_figures(records: pd.DataFrame, summary: dict, out: Path) -> None:
    name = summary.get("scenario", summary["deployment"])
    sla = summary.get("sla") or {}
    load = (f"{summary.get('offered_rps') or 0:.1f} req/s, SLA P{sla.get('percentile', 90):g} TTFT "
            f"{sla.get('ttft_ms', 0) / 1000:g} s / TPOT {sla.get('tpot_ms', 0):g} ms")
    title = interrupted_title(f"{name} ({load})", bool(summary.get("interrupted")))
    ttft_cdf({name: records}, out / "ttft_cdf.png", summary["sla"]["ttft_ms"],
             interrupted_title(f"TTFT CDF: {name}, {load}", bool(summary.get("interrupted"))))
    latency_legs(records, out / "ttft_legs.png", title)
    hit_rate_drift(records, out / "hit_rate_over_time.png", title)
