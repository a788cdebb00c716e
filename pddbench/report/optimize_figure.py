"""Optimize figure: capacity (throughput within SLA) per candidate split, best marked."""

from __future__ import annotations

from pathlib import Path

from pddbench.core.io import save_figure
from pddbench.report.plotting import pyplot


def optimize_figure(result: dict, path: Path) -> None:
    plt = pyplot()
    # the measured splits only: a pruned search lists hundreds more, which have no capacity to draw
    rows = [r for r in result["candidates"] if r.get("coarse") or r.get("full") or r.get("check")]
    x = range(len(rows))
    fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(rows) + 2), 4))
    coarse = [(r["coarse"] or {}).get("throughput_within_sla_rps") for r in rows]
    full = [(r["full"] or {}).get("throughput_within_sla_rps") for r in rows]
    if any(c is not None for c in coarse):
        ax.bar([i - 0.2 for i in x], [c or 0 for c in coarse], width=0.4, color="lightgrey", label="coarse trace")
    colors = ["green" if r["label"] == result["best"]["label"] else "steelblue" for r in rows]
    ax.bar([i + 0.2 for i in x], [f or 0 for f in full], width=0.4, color=colors, label="full trace (green: best)")
    # a checked split (pddbench/sweep/checked_search.py): failed where the best first failed, so below that rate
    checked = [i for i, r in enumerate(rows) if r.get("full") is None and r.get("check")]
    if checked:
        ax.bar([i + 0.2 for i in checked], [rows[i]["check"]["offered_rps"] for i in checked], width=0.4,
               color="none", edgecolor="grey", hatch="//", label="checked: below this (failed there)")
    ax.set_xticks(list(x))
    ax.set_xticklabels([r["label"] for r in rows], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("throughput within SLA (req/s)")
    budget = ", ".join(f"{k}={v}" for k, v in result["budget"].items())
    ax.set_title(f"{result['scenario']}: best split at budget {budget}")
    ax.legend(fontsize=8)
    save_figure(fig, path)
