"""Figures and summary.md of a sweep: a line plot of each main metric against each axis, and a
heatmap of it over two axes when the sweep has two."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from pddbench.core.io import save_figure, write_text
from pddbench.sweep.spec import Sweep

MAIN_METRICS = {"capacity": ["capacity.throughput_within_sla_rps", "capacity.bcr"],
                "run": ["ttft_ms.p90", "tpot_ms.p90", "goodput_rps", "slo_attainment"]}


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def plotted_metrics(df: pd.DataFrame, sweep: Sweep) -> tuple[list[str], list[str]]:
    """(metrics drawn, metrics asked for that the table lacks)."""
    wanted = sweep.spec.plot or MAIN_METRICS[sweep.spec.measure]
    ok = df[df["status"] == "ok"] if len(df) else df
    have = [m for m in wanted if m in ok.columns and ok[m].notna().any()]
    return have, [m for m in wanted if m not in have]


def _varied(sweep: Sweep) -> list[str]:
    return [a for a in sweep.axis_names if len(sweep.axis_values[a]) > 1]


def figures(df: pd.DataFrame, sweep: Sweep, folder: Path) -> list[str]:
    from pddbench.report.plotting import pyplot
    import seaborn as sns

    ok = df[df["status"] == "ok"].copy()
    metrics, _ = plotted_metrics(df, sweep)
    axes = _varied(sweep)
    if ok.empty or not axes:
        return []
    plt = pyplot()
    made = []
    for m in metrics:
        ok[m] = ok[m].astype("float64")
        for a in axes:
            others = [o for o in axes if o != a]
            hue = others[0] if len(others) == 1 else None
            data = ok.assign(**{hue: ok[hue].astype(str)}) if hue else ok
            numeric = pd.api.types.is_numeric_dtype(ok[a])
            if not numeric:
                data = data.assign(**{a: data[a].astype(str)})
            fig, ax = plt.subplots(figsize=(7, 4))
            sns.lineplot(data=data, x=a, y=m, hue=hue, marker="o", errorbar="sd", sort=numeric, ax=ax)
            ax.set_title(f"{sweep.name}: {m} vs {a}" + (" (mean over other axes and repeats)" if len(others) > 1 else ""))
            name = f"{_safe(m)}-vs-{_safe(a)}.png"
            save_figure(fig, folder / name)
            made.append(name)
        if len(axes) == 2:
            y, x = axes
            grid = ok.pivot_table(index=y, columns=x, values=m, aggfunc="mean", sort=False)
            fig, ax = plt.subplots(figsize=(1.6 + 1.2 * len(grid.columns), 1.2 + 0.6 * len(grid.index)))
            sns.heatmap(grid, annot=True, fmt=".3g", cmap="viridis", ax=ax)
            ax.set_title(f"{sweep.name}: {m}")
            name = f"{_safe(m)}-heatmap.png"
            save_figure(fig, folder / name)
            made.append(name)
    return made


def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and v != v) or v is pd.NA:
        return ""
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def summary_md(df: pd.DataFrame, sweep: Sweep, state: str, made: list[str], executor: dict, skipped: int) -> str:
    metrics, missing = plotted_metrics(df, sweep)
    n_ok = int((df["status"] == "ok").sum()) if len(df) else 0
    n_failed = len(df) - n_ok
    lines = [f"# Sweep {sweep.name}" + ("" if state == "complete" else f" ({state.upper()})"), ""]
    if state != "complete":
        lines += [f"**{state}**: {len(df)} of {len(sweep.points)} points finished; "
                  f"resume with `pddbench sweep {sweep.path} --resume <this folder>`.", ""]
    lines += [f"- base: `{sweep.base}`", f"- measure: {sweep.spec.measure}", f"- repeats: {sweep.spec.repeats}",
              f"- points: {len(sweep.points)} ({n_ok} ok, {n_failed} failed, {skipped} kept from before a resume)",
              f"- executor: {executor.get('executor')} ({executor.get('workers')} workers)", "", "## Axes", ""]
    lines += [f"- `{a}`: {', '.join(map(str, sweep.axis_values[a]))}" for a in sweep.axis_names] or ["(none)"]
    ok = df[df["status"] == "ok"] if len(df) else df
    if len(ok) and metrics:
        keys = sweep.axis_names or ["point"]
        table = ok.groupby(keys, sort=False, dropna=False)[metrics].agg(lambda s: s.astype("float64").mean())
        lines += ["", "## Results" + (" (mean over repeats)" if sweep.spec.repeats > 1 else ""), "",
                  "| " + " | ".join(keys + metrics) + " |", "|" + " --- |" * len(keys) + " ---: |" * len(metrics)]
        for idx, row in table.iterrows():
            idx = idx if isinstance(idx, tuple) else (idx,)
            lines.append("| " + " | ".join([_fmt(i) for i in idx] + [_fmt(row[m]) for m in metrics]) + " |")
    if missing:
        lines += ["", f"Not in the table (no figure): {', '.join(missing)}"]
    failed = df[df["status"] != "ok"] if len(df) else df
    if len(failed):
        lines += ["", "## Failed points", "", "| point | repeat | axes | error |", "| ---: | ---: | --- | --- |"]
        for _, r in failed.iterrows():
            axes = ", ".join(f"{a}={r[a]}" for a in sweep.axis_names)
            lines.append(f"| {r['point']} | {r['repeat']} | {axes} | {str(r['error']).replace('|', '/')} |")
    if made:
        lines += ["", "## Figures", ""] + [f"![{m}]({m})" for m in made]
    lines += ["", "Every row: `points.parquet`; wall times: `timings.json`; resolved sweep and provenance: "
              "`sweep.json`; one file per finished point: `points/`."]
    return "\n".join(lines) + "\n"


def write_report(df: pd.DataFrame, sweep: Sweep, folder: Path, state: str, executor: dict, skipped: int) -> list[str]:
    made = figures(df, sweep, folder) if state == "complete" else []
    write_text(folder / "summary.md", summary_md(df, sweep, state, made, executor, skipped))
    return made
