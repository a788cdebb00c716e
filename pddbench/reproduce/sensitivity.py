"""The sensitivity map as a reader sees it: where a claim holds, in words generated from the map
(never written by hand), and heatmaps of its sign and size faceted by the other axes."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pandas as pd

from pddbench.core.io import save_figure
from pddbench.report.plotting import pyplot

SHORT = {"sla.tpot_ms": "TPOT SLA (ms)", "network.wan": "WAN line", "model.kv_bytes_per_token": "KV bytes/token",
         "workload.synth.output_median_tokens": "output median (tokens)", "chips.B.memory_bw_tbps": "chip B mem BW (TB/s)",
         "workload.synth.target_hist": "hit mix"}


def _name(axis: str) -> str:
    return SHORT.get(axis, axis)


def _order(v):
    """Numbers by value, then anything else by its text."""
    try:
        return (0, float(v), "")
    except (TypeError, ValueError):
        return (1, 0.0, str(v))


def _cond(axis: str, value) -> str:
    return f"{_name(axis)} = {value}"


def describe_map(df: pd.DataFrame, axes: list[str], metric: str, subject: str, good: str = "positive",
                 crossovers: list[dict] | None = None) -> str:
    """Sentences that say where `metric` is positive and where negative: the count and range, then
    each axis value on which the sign never changes (the conditions under which the claim holds or
    fails), then the single axes that decide the sign alone, if any. `good` names the article's
    direction ("positive" or "negative"). `crossovers`: the crossover search's items; those of the
    same claim inside the map's range of an axis are said last (reproduce/map_crossovers.py), and
    the map's points then never read as the whole map ("everywhere on the map")."""
    from pddbench.reproduce.map_crossovers import clause, inside

    d = df.dropna(subset=[metric])
    if d.empty:
        return f"{subject}: no point of the map could be measured."
    found = inside(d, axes, metric, crossovers)
    beyond = f"Beyond the map's points, {clause(found)}." if found else ""
    v = d[metric]
    pos, neg = int((v > 0).sum()), int((v < 0).sum())
    n = len(d)
    out = [f"{subject} is positive at {pos} of {n} points and negative at {neg} (from {v.min():+.1f} % to "
           f"{v.max():+.1f} %; the article's direction is {good})."]
    if pos == n or neg == n:
        out.append(f"It is {'positive' if pos == n else 'negative'} "
                   + ("at every point of the map." if found else "everywhere on the map."))
        return " ".join(out + [beyond] if found else out)
    always_pos, always_neg, decisive = [], [], []
    for axis in axes:
        if axis not in d.columns or d[axis].nunique() < 2:
            continue
        signs = {}
        for value, grp in d.groupby(axis, sort=True):
            g = grp[metric]
            if (g > 0).all():
                always_pos.append(_cond(axis, value))
                signs[value] = "+"
            elif (g < 0).all():
                always_neg.append(_cond(axis, value))
                signs[value] = "-"
            else:
                signs[value] = "mixed"
        if "mixed" not in signs.values() and len(set(signs.values())) == 2:
            plus = ", ".join(str(k) for k, s in signs.items() if s == "+")
            minus = ", ".join(str(k) for k, s in signs.items() if s == "-")
            decisive.append(f"{_name(axis)} alone decides the sign: positive at {plus}, negative at {minus}")
    if always_pos:
        out.append(f"It is positive wherever {' or '.join(always_pos)}.")
    if always_neg:
        out.append(f"It is negative wherever {' or '.join(always_neg)}.")
    if decisive:
        out.append("; ".join(decisive) + ".")
    varied = [x for x in axes if x in d.columns and d[x].nunique() > 1]
    for sign, single, test in (("positive", always_pos, lambda g: (g > 0).all()), ("negative", always_neg, lambda g: (g < 0).all())):
        if single or not (pos if sign == "positive" else neg):
            continue
        pairs = [f"{_cond(a, va)} and {_cond(b, vb)}" for a, b in itertools.combinations(varied, 2)
                 for (va, vb), grp in d.groupby([a, b], sort=True) if test(grp[metric])]
        out.append(f"No single axis value makes it {sign}; it is {sign} wherever {' or '.join(pairs)}." if pairs else
                   f"No single axis value or pair of values makes it {sign} throughout.")
    return " ".join(out + [beyond] if found else out)


def map_heatmaps(df: pd.DataFrame, axes: list[str], metric: str, title: str, path: Path) -> Path:
    """Heatmaps of `metric` (a change in %, diverging around 0) over the first two axes, one panel
    per combination of the others (at most 36 panels), each cell annotated with its value."""
    plt = pyplot()
    axes = [a for a in axes if a in df.columns]
    if len(axes) < 2 or df.empty:
        fig, ax = plt.subplots(figsize=(6, 3))
        ax.text(0.5, 0.5, "map has fewer than two axes or no points", ha="center", va="center")
        ax.set_title(title)
        save_figure(fig, path)
        return path
    x, y, rest = axes[0], axes[1], axes[2:]
    groups = list(df.groupby(rest, sort=True)) if rest else [((), df)]
    groups = groups[:36]
    ncol = min(4, len(groups))
    nrow = -(-len(groups) // ncol)
    fig, axs = plt.subplots(nrow, ncol, figsize=(4.2 * ncol, 3.4 * nrow + 0.8), squeeze=False)
    finite = df[metric].replace([np.inf, -np.inf], np.nan).dropna()
    lim = max(1.0, float(finite.abs().max()) if len(finite) else 1.0)
    xs, ys = sorted(df[x].unique(), key=_order), sorted(df[y].unique(), key=_order)
    im = None
    for ax, (key, grp) in zip(axs.flat, groups):
        grid = np.full((len(ys), len(xs)), np.nan)
        for _, r in grp.iterrows():
            grid[ys.index(r[y]), xs.index(r[x])] = r[metric]
        im = ax.imshow(grid, cmap="RdBu", vmin=-lim, vmax=lim, aspect="auto", origin="lower")
        for (i, j), val in np.ndenumerate(grid):
            dark = not np.isnan(val) and abs(val) > 0.6 * lim  # white on the deep colours
            ax.text(j, i, "-" if np.isnan(val) else f"{val:+.0f}", ha="center", va="center", fontsize="small",
                    color="white" if dark else "black")
        ax.set_xticks(range(len(xs)), [str(v) for v in xs], fontsize="x-small")
        ax.set_yticks(range(len(ys)), [str(v) for v in ys], fontsize="x-small")
        ax.set_xlabel(_name(x), fontsize="small")
        ax.set_ylabel(_name(y), fontsize="small")
        key = key if isinstance(key, tuple) else (key,)
        ax.set_title("\n".join(f"{_name(a)}={v}" for a, v in zip(rest, key)) or "all points", fontsize="x-small")
        ax.grid(False)
    for ax in list(axs.flat)[len(groups):]:
        ax.axis("off")
    height_in = fig.get_size_inches()[1]
    # the colour bar gets its own strip right of the panels (placed by the grid, it covered the last column)
    fig.subplots_adjust(wspace=0.6, hspace=0.6, right=0.88, top=1 - 1.5 / height_in)
    if im is not None:
        fig.colorbar(im, cax=fig.add_axes([0.91, 0.3, 0.015, 0.4]), label=f"{metric} (blue: positive)")
    fig.suptitle(title, y=1 - 0.3 / height_in)
    save_figure(fig, path)
    return path
