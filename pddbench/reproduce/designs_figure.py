"""The designs figure: each design at its best split, side by side: throughput within SLA, cost per
1,000 requests, P90 TTFT and WAN egress at the common load (bars: mean over seeds; whiskers: the
95 % interval)."""

from __future__ import annotations

from pathlib import Path

from pddbench.core.io import save_figure
from pddbench.report.plotting import pyplot

PANELS = (("throughput_within_sla_rps", "throughput within SLA (req/s)", 1.0),
          ("cost_per_1k_requests_usd", "$ per 1,000 requests at capacity", 1.0),
          ("ttft_p90_ms", "P90 TTFT at the common load (s)", 1e-3),
          ("wan_egress_gbps", "WAN egress at the common load (Gbit/s)", 1.0))


def designs_figure(result: dict, path: Path) -> Path:
    plt = pyplot()
    names = list(result["designs"])
    fig, axs = plt.subplots(1, len(PANELS), figsize=(4.4 * len(PANELS), 0.5 * len(names) + 2.2), sharey=True)
    colors = plt.get_cmap("tab10").colors
    for ax, (key, xlabel, k) in zip(axs, PANELS):
        for i, n in enumerate(names):
            iv = result["designs"][n]["metrics"][key]
            if iv["mean"] is None:
                continue
            err = None
            if iv["ci95"]:
                err = [[(iv["mean"] - iv["ci95"][0]) * k], [(iv["ci95"][1] - iv["mean"]) * k]]
            ax.barh(i, iv["mean"] * k, xerr=err, color=colors[i % len(colors)], capsize=3)
        ax.set_xlabel(xlabel, fontsize="small")
    axs[0].set_yticks(range(len(names)), [f"{n}\n{result['designs'][n]['best']['label']}" for n in names],
                      fontsize="small")
    axs[0].invert_yaxis()
    spec = result["spec"]
    fig.suptitle(f"{result['name']}: each design at its best split ({spec['requests']:,} requests, {spec['seeds']} "
                 f"seeds, 95 % interval); common load {result['common_load_rps']:.3g} req/s", fontsize="medium")
    save_figure(fig, path)
    return path
