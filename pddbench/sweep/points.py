"""Finished points, one small JSON file each under DIR/points/<key>.json (written atomically as
each completes: what a resume skips), and the tidy table built from them.

The table is the same bytes whatever ran the points: rows in point order, no wall-clock values
(those go to timings.json), and each column's dtype decided from its values alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from pddbench.core.io import atomic_path, write_json
from pddbench.sweep.spec import Point, Sweep

WALL_CLOCK_KEYS = {"sim_wall_s", "provenance"}  # differ between identical runs: never in the table
FIXED = ["point", "repeat", "seed", "key"]


class PointStore:
    def __init__(self, folder: Path):
        self.dir = folder / "points"

    def path(self, key: str) -> Path:
        return self.dir / f"{key}.json"

    def load(self, key: str) -> dict | None:
        try:
            return json.loads(self.path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None  # not finished (or a torn file from a crash: run it again)

    def done(self, key: str) -> bool:
        """Finished well; a failed point is tried again on resume."""
        rec = self.load(key)
        return rec is not None and rec.get("status") == "ok"

    def save(self, point: Point, result: dict) -> dict:
        rec = {"key": point.key, "point": point.index, "repeat": point.repeat, "axes": point.axes,
               "status": result.get("status", "failed"), "error": result.get("error") or "",
               "summary": result.get("summary"), "capacity": result.get("capacity"),
               "wall_s": result.get("wall_s")}
        write_json(self.path(point.key), rec)
        return rec


def flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    """Scalars of a nested dict as dotted keys (ttft_ms.p90); lists are left out."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, name + "."))
        elif v is None or isinstance(v, (bool, int, float, str)):
            out[name] = v
    return out


def metrics_of(rec: dict) -> dict[str, Any]:
    out: dict[str, Any] = {}
    cap = rec.get("capacity")
    if cap:
        out.update({f"capacity.{k}": v for k, v in cap.items()
                    if k not in ("scenario", "sla", "probes") and not isinstance(v, (dict, list))})
        out["capacity.probes"] = len(cap.get("probes") or [])
    if rec.get("summary"):
        out.update({k: v for k, v in flatten(rec["summary"]).items() if k.split(".")[0] not in WALL_CLOCK_KEYS})
    return out


def _cell(v: Any) -> Any:
    return json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v


def _typed(values: list) -> pd.Series:
    """One dtype per column from its values: nullable bool or int, float, else string."""
    present = [v for v in values if v is not None and not (isinstance(v, float) and v != v)]
    if present and all(isinstance(v, bool) for v in present):
        return pd.Series(values, dtype="boolean")
    if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return pd.Series(values, dtype="Int64")
    if present and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        return pd.Series([float("nan") if v is None else float(v) for v in values], dtype="float64")
    return pd.Series([None if v is None else str(v) for v in values], dtype="string")


def build_table(sweep: Sweep, store: PointStore) -> pd.DataFrame:
    rows = []
    for p in sweep.points:
        rec = store.load(p.key)
        if rec is None:
            continue
        row = {"point": p.index, "repeat": p.repeat, "seed": p.repeat, "key": p.key,
               **{a: _cell(p.axes[a]) for a in sweep.axis_names}, "status": rec["status"], "error": rec["error"]}
        # an axis is also a summary value (sla.tpot_ms): the axis column, as written, wins
        row.update({k: v for k, v in metrics_of(rec).items() if k not in row})
        rows.append(row)
    head = FIXED + sweep.axis_names + ["status", "error"]
    cols = head + sorted({k for r in rows for k in r} - set(head))
    return pd.DataFrame({c: _typed([r.get(c) for r in rows]) for c in cols})


def write_table(df: pd.DataFrame, path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(df, preserve_index=False)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="snappy")


def timings(sweep: Sweep, store: PointStore) -> dict:
    """Wall-clock facts, kept out of the table: per point, and the total of the point times."""
    per = {}
    for p in sweep.points:
        rec = store.load(p.key)
        if rec is not None:
            per[p.key] = {"point": p.index, "repeat": p.repeat, "wall_s": rec.get("wall_s"),
                          "sim_wall_s": (rec.get("summary") or {}).get("sim_wall_s")}
    return {"points": per, "points_wall_s_total": round(sum(t["wall_s"] or 0 for t in per.values()), 3)}
