"""The answer first: at most twelve lines, generated from the ledger rows and the sensitivity map,
that open report.md, report.html and the terminal summary: whether the article's headline gains
hold under the shipped assumptions, what they rest on (model, latency model and its error against
real GPU measurements), where on the map they hold, which assumptions move them most, and how
sure the run is. Every word comes from the data; nothing here knows the article's numbers
beyond the claims table."""

from __future__ import annotations

import pandas as pd

from pddbench.reproduce.ledger import Row, fmt
from pddbench.reproduce.sensitivity import SHORT

MAX_LINES = 12
# the headline claims, in the order a reader asks them (the first of each pair that has a value)
HEADLINE = (("throughput_change_best", "throughput_change"), ("ttft_change_best", "ttft_change"),
            ("bcr_change",), ("cost_per_token_change",))
MAP_METRICS = (("throughput_change_pct", "PDD's throughput-within-SLA gain", "positive"),
               ("ttft_change_pct", "PDD's mean TTFT change", "negative"))


def _axis_name(axis: str) -> str:
    return SHORT.get(axis, axis)


def headline_line(row: Row) -> str:
    c = row.claim
    figure = c.figure[:1].upper() + c.figure[1:]
    spread = ""
    if row.spread and len(row.values) > 1 and row.spread[0] != row.spread[1]:
        spread = f" ({fmt(row.spread[0], c.unit)} .. {fmt(row.spread[1], c.unit)} over {len(row.values)} seeds)"
    if row.mean is None:
        return f"- {figure}: not measured ({row.note or 'no value'})."
    why = f", because {row.unsteady.split(';')[0]}" if row.verdict == "inconclusive" and row.unsteady else ""
    return f"- {figure}: article {fmt(c.article, c.unit)}, here {fmt(row.mean, c.unit)}{spread}: **{row.verdict}**{why}."


def headline_summary(rows: list[Row]) -> str:
    """How many headline gains hold, do not hold, or cannot be judged from this run."""
    held = sum(r.verdict == "reproduced" for r in rows)
    sign = sum(r.verdict == "same sign only" for r in rows)
    failed = sum(r.verdict == "not reproduced" for r in rows)
    open_ = len(rows) - held - sign - failed
    return (f"of the article's {len(rows)} headline gains, under the shipped assumptions {held} hold, {sign} only in "
            f"direction, {failed} do not, {open_} cannot be judged from this run")


def where_line(df: pd.DataFrame, axes: list[str], metric: str, subject: str, good: str,
               crossovers: list[dict] | None = None) -> str | None:
    """Where on the map the article's direction holds: how many points, and the axis value under
    which it holds most often (as a share of that value's points); then any crossover of the same
    claim inside the map's range of an axis (reproduce/map_crossovers.py), so that the map's
    points never read as the whole map."""
    from pddbench.reproduce.map_crossovers import clause, inside

    if df.empty or metric not in df.columns:
        return None
    d = df.dropna(subset=[metric])
    if d.empty:
        return f"- {subject}: no map point could be measured."
    wins = d[metric] > 0 if good == "positive" else d[metric] < 0
    n, k = len(d), int(wins.sum())
    found = inside(d, axes, metric, crossovers)
    but = f"; but {clause(found)}." if found else "."
    if k == 0:
        return (f"- {subject} goes the article's way ({good}) at none of the map's {n} points{but}" if found else
                f"- {subject} goes the article's way ({good}) nowhere on the map (0 of {n} points).")
    if k == n:
        return (f"- {subject} goes the article's way ({good}) at all of the map's {n} points{but}" if found else
                f"- {subject} goes the article's way ({good}) everywhere on the map ({n} points).")
    best = None
    for axis in axes:
        if axis not in d.columns or d[axis].nunique() < 2:
            continue
        for value, grp in d.groupby(axis, sort=True):
            share = float(wins[grp.index].mean())
            key = (share, len(grp))
            if best is None or key > best[0]:
                best = (key, axis, value, int(wins[grp.index].sum()), len(grp))
    text = f"- {subject} goes the article's way ({good}) at {k} of {n} map points"
    if best:
        _, axis, value, kk, nn = best
        text += f", most often where {_axis_name(axis)} = {value} ({kk} of {nn} there)"
    return text + (f"; {clause(found)}." if found else ".")


def ranked_axes(df: pd.DataFrame, axes: list[str], metric: str) -> list[tuple[str, float]]:
    """Axes by how far the metric's mean moves between the axis's values (percentage points)."""
    d = df.dropna(subset=[metric]) if metric in df.columns else df.iloc[0:0]
    out = []
    for axis in axes:
        if axis in d.columns and d[axis].nunique() > 1:
            means = d.groupby(axis)[metric].mean()
            out.append((axis, float(means.max() - means.min())))
    return sorted(out, key=lambda t: -t[1])


def _num(v: float) -> str:
    """A crossover value as a reader writes it: 46.2, 1,001 (not 1e+03)."""
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"


def wins_where(items: list[dict]) -> str | None:
    """Where PDD's throughput within SLA beats same-DC PD's, from the crossovers found (each with
    the others at their shipped values), for the answer's first line; None without any."""
    from pddbench.reproduce.crossovers import axis_label

    found = [f"{axis_label(i['axis'])} {'above' if 'above' in i['direction'] else 'below'} {_num(i['value'])}"
             for i in items if i["claim"] == "throughput_change_best" and i["axis"] != "model"
             and i["value"] is not None and "PDD wins" in i["direction"]]
    return ("PDD wins throughput within SLA where " + " or ".join(found)
            + " (each alone, the other assumptions as shipped; crossovers and models below)") if found else None


def crossover_line(items: list[dict], not_searched: list[str]) -> str | None:
    """Where PDD's advantage changes sign (pddbench/reproduce/crossovers.py): each crossover found,
    or that none was in the ranges searched, and which axes this run did not search."""
    from pddbench.reproduce.crossovers import CLAIMS, axis_label

    items = [i for i in items if i["axis"] != "model"]  # the model axis has its own line (model_line)
    if not items:
        return None
    found = [f"{CLAIMS[i['claim']].split(' (')[0]} at {axis_label(i['axis'])} = {_num(i['value'])} ({i['direction']})"
             for i in items if i["value"] is not None]
    crossed = {i["axis"] for i in items if i["value"] is not None}  # e.g. chip B's price moves BCR, not throughput
    none = sorted({axis_label(i["axis"]) for i in items if i["value"] is None and i["axis"] not in crossed})
    text = "- Where PDD's advantage changes sign (seed 0, best splits at every probe): "
    text += ("; ".join(found) + (f"; no sign change along {', '.join(none)}" if none else "") if found else
             f"nowhere in the ranges searched ({', '.join(none)})")
    if not_searched:
        text += f"; not searched in this run: {len(not_searched)} axes (`pddbench crossovers`)"
    return text + "."


def model_line(items: list[dict]) -> str | None:
    """The model axis (crossovers.py): per shipped model, whether PDD's throughput and TTFT gains
    hold at the shipped line and SLA, and the line rate where the throughput gain flips."""
    models = [i for i in items if i["axis"] == "model"]
    if not models:
        return None
    parts = []
    for it in models:
        thr, ttft, rate = it.get("throughput_change_pct"), it.get("ttft_change_pct"), it.get("rate") or {}
        text = f"{it['model']} throughput {'n/a' if thr is None else f'{thr:+.0f} %'}, TTFT " \
               f"{'n/a' if ttft is None else f'{ttft:+.0f} %'}"
        if rate.get("value") is not None:
            text += f", throughput flips at {rate['value']:.3g} Gbit/s"
        if (it.get("ttft_rate") or {}).get("value") is not None:
            text += f", TTFT flips at {it['ttft_rate']['value']:.3g} Gbit/s"
        parts.append(text)
    return "- By model (best vs best at the shipped line and SLA; TTFT at half the smaller capacity, negative: PDD " \
        "faster): " \
        + "; ".join(parts) + "."


def answer_lines(rows: list[Row], df: pd.DataFrame, axes: list[str], seeds: int, requests: int, full: bool,
                 map_requests: int, min_requests: int, checks: list[dict | None] | None = None,
                 crossovers: dict | None = None, basis: dict | None = None) -> list[str]:
    """The answer block; `checks`: the convergence checks of the capacities behind verdicts;
    `crossovers`: reproduce's crossover search (its items and the axes it did not search);
    `basis`: what the verdicts rest on (reproduce/basis.py)."""
    from pddbench.reproduce.basis import basis_line

    by_id = {r.claim.id: r for r in rows}
    headline = []
    for ids in HEADLINE:
        row = next((by_id[i] for i in ids if i in by_id and by_id[i].mean is not None),
                   next((by_id[i] for i in ids if i in by_id), None))
        if row is not None:
            headline.append(row)
    lines = [f"**The answer** ({'full' if full else 'light'} run: {seeds} seeds, {requests:,} requests a run; "
             f"sensitivity map: {len(df)} PDD points of {map_requests:,} requests): {headline_summary(headline)}."]
    where = wins_where((crossovers or {}).get("crossovers", []))
    if where:
        lines[0] += f" {where}."
    lines += [headline_line(r) for r in headline]
    if basis:
        lines.append(basis_line(basis))
    for metric, subject, good in MAP_METRICS:
        line = where_line(df, axes, metric, subject, good, (crossovers or {}).get("crossovers"))
        if line:
            lines.append(line)
    if crossovers:
        line = crossover_line(crossovers["crossovers"], crossovers.get("not_searched", []))
        if line:
            lines.append(line)
        line = model_line(crossovers["crossovers"])
        if line:
            lines.append(line)
    ranked = [(r["label"], r["spread_pct"]) for r in (crossovers or {}).get("axes_ranked", [])]
    if ranked:
        lines.append("- What moves the throughput gain most (its range along each crossover axis, best vs best): "
                     + ", ".join(f"{a} {pp:.0f} points" for a, pp in ranked) + ".")
    ranked = [] if ranked else ranked_axes(df, axes, "throughput_change_pct")
    if ranked:
        lines.append("- What moves the throughput gain most (spread of its mean across each axis's values): "
                     + ", ".join(f"{_axis_name(a)} {pp:.0f} points" for a, pp in ranked) + ".")
    inconclusive = [r for r in rows if r.verdict == "inconclusive"]
    sure = f"- How sure: {seeds} seeds a row (spread shown)"
    done = [c for c in checks or [] if c]
    if done:
        worst = max(done, key=lambda c: abs(c["change_pct"] or 0))
        lengths = sorted({c["requests"] for c in done})
        on = (f"{lengths[0]:,} vs {2 * lengths[0]:,} requests" if len(lengths) == 1 else
              f"{lengths[0]:,}-{lengths[-1]:,} requests, each vs twice that")
        sure += (f"; {sum(c['converged'] for c in done)} of {len(done)} capacities converged ({on}, largest move "
                 f"{worst['deployment']} {(worst['change_pct'] or 0):+.1f} %)")
    if inconclusive:
        sure += f"; {len(inconclusive)} of {len(rows)} rows inconclusive, e.g. {inconclusive[0].unsteady.rstrip('.')}"
    else:
        sure += f"; every capacity behind a verdict from at least {min_requests:,} requests"
    if map_requests < min_requests:
        sure += f"; the map's {map_requests:,}-request points are indicative, not verdicts"
    lines.append(sure + ".")
    return lines[:MAX_LINES]
