"""The crossovers as a reader sees them: one panel per axis, PDD's advantage at every probe of
each claim's search, the zero line, the crossover (dashed) and the shipped value (dotted)."""

from __future__ import annotations

from pathlib import Path

from pddbench.core.io import save_figure
from pddbench.reproduce import crossovers as cx
from pddbench.report.plotting import pyplot


def crossover_figure(result: dict, title: str, path: Path) -> Path:
    plt = pyplot()
    items = result["crossovers"]
    axes = list(dict.fromkeys(i["axis"] for i in items))
    ncol = min(3, max(1, len(axes)))
    nrow = -(-max(1, len(axes)) // ncol)
    fig, axs = plt.subplots(nrow, ncol, figsize=(5.2 * ncol, 3.6 * nrow + 0.8), squeeze=False)
    colors = dict(zip(cx.CLAIMS, plt.get_cmap("tab10").colors))
    for ax, name in zip(axs.flat, axes):
        for it in (i for i in items if i["axis"] == name):
            pts = sorted((p["value"], p["advantage_pct"]) for p in it["probes"] if p["advantage_pct"] is not None)
            if pts:
                ax.plot(*zip(*pts), marker="o", color=colors[it["claim"]], label=cx.CLAIMS[it["claim"]])
            if it["value"] is not None:
                ax.axvline(it["value"], color=colors[it["claim"]], ls="--", lw=1)
        if name in cx.AXES:
            ax.axvline(cx.AXES[name].shipped, color="grey", ls=":", lw=1, label="shipped value")
            if cx.AXES[name].log:
                ax.set_xscale("log")
        ax.axhline(0, color="black", lw=0.8)
        ax.set_xlabel(cx.axis_label(name), fontsize="small")
        ax.set_ylabel("PDD's advantage (%), >0: PDD wins", fontsize="small")
        ax.legend(fontsize="x-small")
    for ax in list(axs.flat)[len(axes):]:
        ax.axis("off")
    fig.suptitle(title, fontsize="medium")
    fig.tight_layout()
    save_figure(fig, path)
    return path
