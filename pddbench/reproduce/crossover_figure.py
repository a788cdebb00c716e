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
        if name == cx.MODEL_AXIS:
            _model_panel(ax, [i for i in items if i["axis"] == name])
            continue
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


def _model_panel(ax, items: list[dict]) -> None:
    """The model axis: each model's throughput gain along the WAN line rate (its bisection's probes)."""
    for it in items:
        pts = sorted((p["value"], p["advantage_pct"]) for p in it["rate"]["probes"] if p["advantage_pct"] is not None)
        if pts:
            ax.plot(*zip(*pts), marker="o", label=it["model"])
        if it["rate"]["value"] is not None:
            ax.axvline(it["rate"]["value"], color=ax.lines[-1].get_color() if ax.lines else "black", ls="--", lw=1)
    ax.axvline(cx.AXES[cx.RATE_AXIS].shipped, color="grey", ls=":", lw=1, label="shipped line")
    ax.set_xscale("log")
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xlabel("WAN line rate (Gbit/s), per model", fontsize="small")
    ax.set_ylabel("PDD's throughput gain (%), best vs best", fontsize="small")
    ax.legend(fontsize="xx-small")


def frontier_figure(front: dict, title: str, path: Path) -> Path:
    """The 2-D frontier: every probe of each row (blue: PDD wins, red: loses) and the crossover
    line through the rows that change sign."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.6))
    ax_x, ax_y = cx.AXES[front["x"]], cx.AXES[front["y"]]
    for row in front["rows"]:
        for p in row["probes"]:
            if p["advantage_pct"] is not None:
                ax.scatter(p["value"], row["y"], color="tab:blue" if p["advantage_pct"] > 0 else "tab:red", s=28)
    line = [(r["value"], r["y"]) for r in front["rows"] if r["value"] is not None]
    if line:
        ax.plot(*zip(*line), color="black", marker="x", label="crossover (PDD's throughput gain = 0)")
    ax.scatter([], [], color="tab:blue", label="PDD wins")
    ax.scatter([], [], color="tab:red", label="PDD loses")
    ax.axvline(ax_x.shipped, color="grey", ls=":", lw=1)
    ax.axhline(ax_y.shipped, color="grey", ls=":", lw=1, label="shipped values")
    if ax_x.log:
        ax.set_xscale("log")
    if ax_y.log:
        ax.set_yscale("log")
    ax.set_xlabel(ax_x.label)
    ax.set_ylabel(ax_y.label)
    ax.legend(fontsize="x-small")
    ax.set_title(title, fontsize="small")
    save_figure(fig, path)
    return path
