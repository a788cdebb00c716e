"""Capacity search figure: SLA percentile latencies against offered rate."""

from __future__ import annotations

from pathlib import Path

from pddbench.core.io import save_figure
from pddbench.report.plotting import pyplot


def capacity_figure(result: dict, path: Path) -> None:
    plt = pyplot()
    probes = result["probes"]
    x = [p["offered_rps"] for p in probes]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(x, [p["ttft_p90_ms"] for p in probes], "o-", label="TTFT p90 (ms)")
    ax.axhline(result["sla"]["ttft_ms"], color="grey", ls="--", lw=1, label="TTFT bound")
    ax.axvline(result["throughput_within_sla_rps"], color="green", ls=":", label="throughput within SLA")
    ax.set_yscale("log")
    ax.set_xlabel("offered rate (req/s)")
    ax.set_ylabel("ms")
    ax.set_title(f"Capacity search: {result['scenario']}")
    ax.legend()
    save_figure(fig, path)
