"""Gate history: every gate appends one row per gated metric to HISTORY/gate_history.parquet
(default results/history/); `pddbench history` draws each metric over time with its baseline and
tolerance band (one PNG per metric, one panel per gated subject)."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from pddbench.core.errors import UserError
from pddbench.core.io import atomic_path

TABLE = "gate_history.parquet"
COLUMNS = ["gated_at", "gate_id", "name", "mode", "candidate", "baseline", "subject", "metric", "baseline_value",
           "candidate_value", "diff", "ci_lo", "ci_hi", "tolerance", "worse", "status", "verdict",
           "baseline_updated", "git_commit"]
FLOATS = ("baseline_value", "candidate_value", "diff", "ci_lo", "ci_hi", "tolerance")


def append_history(history_dir: Path, res: dict, git_commit: str | None, now: datetime | None = None) -> Path:
    """Append the gated metrics of one gate result (rows with a rule) to the history table."""
    now = now or datetime.now(timezone.utc)
    rows = [{"gated_at": now, "gate_id": res["gate_id"], "name": res["name"], "mode": res["mode"],
             "candidate": res["candidate"], "baseline": res["baseline"], "subject": r["subject"],
             "metric": r["metric"], "baseline_value": r["baseline"], "candidate_value": r["candidate"],
             "diff": r["diff"], "ci_lo": r["ci_lo"], "ci_hi": r["ci_hi"], "tolerance": r["tolerance"],
             "worse": (r["rule"] or "").split(",")[0].replace("worse ", "") or None, "status": r["status"],
             "verdict": "fail" if res["regressions"] else "pass", "baseline_updated": bool(res.get("baseline_updated")),
             "git_commit": git_commit} for r in res["rows"] if r["rule"]]
    new = pd.DataFrame(rows, columns=COLUMNS)
    for c in FLOATS:
        new[c] = pd.to_numeric(new[c], errors="coerce").astype("float64")
    new["gated_at"] = pd.to_datetime(new["gated_at"], utc=True)
    path = Path(history_dir) / TABLE
    old = read_history(history_dir) if path.is_file() else None
    table = new if old is None or old.empty else pd.concat([old, new], ignore_index=True)
    with atomic_path(path) as tmp:
        table.to_parquet(tmp, index=False)
    return path


def read_history(history_dir: Path) -> pd.DataFrame:
    path = Path(history_dir) / TABLE
    if not path.is_file():
        raise UserError(f"{path}: no gate history yet (every `pddbench gate` appends to it; --history DIR)")
    try:
        table = pd.read_parquet(path)
    except Exception as exc:  # noqa: BLE001 - a damaged table is bad input, said in one line
        raise UserError(f"{path}: cannot read the history table ({' '.join(str(exc).split())[:160]})") from None
    missing = [c for c in COLUMNS if c not in table.columns]
    if missing:
        raise UserError(f"{path}: not a gate history table (no {', '.join(missing[:4])}); move it aside and gate again")
    return table


def check_figure_folder(out: Path) -> None:
    """`pddbench history --out`: a folder for the figures (it may hold earlier ones and the table)."""
    from pddbench.core.io import check_out_place

    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is not a folder; give a folder for the figures")
    check_out_place(out / "history.png", "--out", folder=False)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "metric"


def plot_history(history_dir: Path, metrics: list[str] | None, out: Path) -> list[Path]:
    """One PNG per metric: candidate values over time per subject, the baseline as a dashed step
    line, the tolerated band shaded, regressions in red, bootstrap intervals as error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from pddbench.core.io import save_figure

    table = read_history(history_dir)
    wanted = metrics or sorted(table["metric"].unique())
    unknown = sorted(set(wanted) - set(table["metric"]))
    if unknown:
        raise UserError(f"no history for metric(s) {', '.join(unknown)}; recorded: {', '.join(sorted(table['metric'].unique()))}")
    paths = []
    for metric in wanted:
        rows = table[table["metric"] == metric].sort_values("gated_at")
        series = list(rows.groupby(["name", "subject"], sort=True))
        fig, axes = plt.subplots(len(series), 1, figsize=(8, 2.6 * len(series)), squeeze=False, sharex=True)
        for ax, ((name, subject), s) in zip(axes[:, 0], series):
            t, base, tol = s["gated_at"], s["baseline_value"], s["tolerance"].fillna(0)
            up = (s["worse"] != "down").to_numpy()
            edge = base + tol.where(up, -tol)  # the tolerated side: above for worse-up metrics
            ax.step(t, base, where="post", linestyle="--", color="gray", label="baseline")
            ax.fill_between(t, base, edge, step="post", color="orange", alpha=0.25, label="tolerance")
            ax.plot(t, s["candidate_value"], marker="o", color="tab:blue", label="candidate")
            ci = s["ci_lo"].notna()
            if ci.any():
                mid = s["candidate_value"][ci]
                lo = base[ci] + s["ci_lo"][ci]
                hi = base[ci] + s["ci_hi"][ci]
                ax.errorbar(t[ci], mid, yerr=[(mid - lo).clip(lower=0), (hi - mid).clip(lower=0)], fmt="none",
                            ecolor="tab:blue", alpha=0.6, capsize=3)
            bad = s["status"] == "regression"
            ax.scatter(t[bad], s["candidate_value"][bad], color="red", zorder=5, label="regression")
            ax.set_title(f"{name}: {subject}" if subject != name else name, fontsize=9)
            ax.set_ylabel(metric, fontsize=8)
        axes[0, 0].legend(fontsize=7, loc="best")
        fig.autofmt_xdate()
        path = Path(out) / f"history-{_slug(metric)}.png"
        save_figure(fig, path)
        paths.append(path)
    return paths
