"""Trace figures: hit-rate bucket mix over time (the PDD article's Jan-Feb 2026 shape) and CDF."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pddbench.core.io import save_figure
from pddbench.report.plotting import pyplot


def bucket_mix_over_time(stats: dict, path: Path) -> None:
    plt = pyplot()
    windows = [w for w in stats["windows"] if w["requests"] > 0]
    x = np.array([w["start_s"] for w in windows]) / 60.0
    fractions = np.array([w["fraction"] for w in windows]).T * 100
    labels = stats["hit_rate_histogram"]["labels"]
    colors = plt.get_cmap("viridis")(np.linspace(0.05, 0.95, len(labels)))
    fig, ax = plt.subplots(figsize=(9, 4.5))
    ax.stackplot(x, fractions, labels=labels, colors=colors, step="post" if len(x) < 3 else None)
    ax.set_xlabel("time since trace start (min)")
    ax.set_ylabel("requests (%)")
    ax.set_ylim(0, 100)
    ax.set_title(f"Prefix hit-rate bucket mix per {stats['window_s']:g} s window ({stats['cache']} cache)")
    ax.legend(title="hit rate", loc="center left", bbox_to_anchor=(1.0, 0.5))
    save_figure(fig, path)


def hit_rate_cdf(rate: np.ndarray, path: Path, label: str = "") -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    xs = np.sort(rate) * 100
    ax.plot(xs, np.arange(1, len(xs) + 1) / len(xs) * 100, label=label or None)
    ax.set_xlabel("per-request prefix hit rate (%)")
    ax.set_ylabel("requests at or below (%)")
    ax.set_title("Hit-rate CDF")
    if label:
        ax.legend()
    save_figure(fig, path)
