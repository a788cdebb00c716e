"""Common-load figure: the baseline and PDD at their best splits against the same offered loads:
TTFT mean and p90, TPOT p90 and SLO attainment, mean over seeds with the min..max as a band."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from pddbench.core.io import save_figure
from pddbench.report.plotting import pyplot

PANELS = (("ttft_mean_ms", "mean TTFT (s)", 1e-3), ("ttft_p90_ms", "P90 TTFT (s)", 1e-3),
          ("tpot_p90_ms", "P90 TPOT (ms)", 1.0), ("slo_attainment", "SLO attainment (%)", 100.0))


def common_load_figure(tab: pd.DataFrame, labels: dict[str, str], title: str, sla: dict, path: Path) -> Path:
    """`labels`: deployment name in `tab` -> legend text (its split); `title`: scenario and loads."""
    plt = pyplot()
    fig, axs = plt.subplots(1, 4, figsize=(17, 4.2))
    colors = plt.get_cmap("tab10").colors
    for ax, (key, ylabel, k) in zip(axs, PANELS):
        for c, (dep, text) in zip(colors, labels.items()):
            g = tab[tab.deployment == dep].groupby("load_rps")[key]
            mean, lo, hi = g.mean() * k, g.min() * k, g.max() * k
            ax.plot(mean.index, mean.values, marker="o", color=c, label=text)
            ax.fill_between(mean.index, lo.values, hi.values, color=c, alpha=0.2)
        if key == "ttft_p90_ms":
            ax.axhline(sla["ttft_ms"] / 1000, color="grey", ls="--", lw=1, label="TTFT SLA")
        if key == "tpot_p90_ms":
            ax.axhline(sla["tpot_ms"], color="grey", ls="--", lw=1, label="TPOT SLA")
        ax.set_xlabel("offered load (req/s), same on both sides")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize="x-small")
    fig.suptitle(f"{title}\nSLA P{sla.get('percentile', 90):g} TTFT {sla['ttft_ms'] / 1000:g} s / TPOT "
                 f"{sla['tpot_ms']:g} ms (line: mean over seeds, band: min..max)", fontsize="medium")
    save_figure(fig, path)
    return path
