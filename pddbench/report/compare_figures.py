"""Side-by-side bars of the key metrics of several runs."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from pddbench.core.io import save_figure
from pddbench.report.plotting import pyplot

PANELS = ["TTFT p50 (ms)", "TTFT p90 (ms)", "TTFT p99 (ms)", "TPOT p90 (ms)", "SLO attainment", "goodput (req/s)",
          "WAN KV (GB)", "relay token share", "handoff stall p99 (ms)", "relay busy mean (ms)", "cost per hour",
          "cost per 1M output tokens"]


def differing(table: pd.DataFrame) -> list[str]:
    """The panels whose values differ between the runs (identical panels say nothing)."""
    out = []
    for metric in PANELS:
        if metric not in table.index:
            continue
        vals = pd.to_numeric(table.loc[metric], errors="coerce")
        if vals.notna().any() and (vals.max() - vals.min()) > 1e-9 * max(1.0, abs(vals).max()):
            out.append(metric)
    return out


def compare_bars(table: pd.DataFrame, path: Path, title: str = "") -> None:
    plt = pyplot()
    panels = differing(table) or PANELS[:1]
    ncol = min(4, len(panels))
    nrow = -(-len(panels) // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(4 * ncol, 3.5 * nrow + 0.6), squeeze=False)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    if title:
        fig.suptitle(f"{title} (only the metrics that differ)", fontsize="small")
    colors = plt.get_cmap("tab10").colors
    for ax, metric in zip(axes.flat, panels):
        vals = pd.to_numeric(table.loc[metric], errors="coerce").fillna(0)
        ax.bar(range(len(vals)), vals.to_numpy(), color=colors[: len(vals)])
        ax.set_xticks(range(len(vals)), table.columns, rotation=30, ha="right", fontsize="small")
        ax.set_title(metric, fontsize="medium")
    fig.tight_layout()
    save_figure(fig, path)
