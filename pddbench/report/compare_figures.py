"""Side-by-side bars of the key metrics of several runs."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from pddbench.io import save_figure
from pddbench.report.plotting import pyplot

PANELS = ["TTFT p50 (ms)", "TTFT p90 (ms)", "TTFT p99 (ms)", "goodput (req/s)", "WAN KV (GB)",
          "relay token share", "handoff stall max (ms)", "relay busy mean (ms)"]


def compare_bars(table: pd.DataFrame, path: Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(2, 4, figsize=(16, 7))
    colors = plt.get_cmap("tab10").colors
    for ax, metric in zip(axes.flat, PANELS):
        vals = pd.to_numeric(table.loc[metric], errors="coerce").fillna(0)
        ax.bar(range(len(vals)), vals.to_numpy(), color=colors[: len(vals)])
        ax.set_xticks(range(len(vals)), table.columns, rotation=30, ha="right", fontsize="small")
        ax.set_title(metric, fontsize="medium")
    fig.tight_layout()
    save_figure(fig, path)
