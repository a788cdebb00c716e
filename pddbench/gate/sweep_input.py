"""A sweep folder (`pddbench sweep`) as a gate input: sweep.json (the resolved sweep: its axes under
sweep.axes, provenance) + points.parquet (one row per point and repeat: point, repeat, seed, key,
the axis values, status, error, the flattened summary metrics; capacity sweeps add capacity.*).
Each point and repeat is one subject, named by its axis values; `capacity.X` is gated as `X`;
`point_failed` (1 when the point's status is not ok) is a metric of its own."""

from __future__ import annotations

import json
import math
from pathlib import Path

from pddbench.errors import UserError

NOT_METRICS = {"point", "repeat", "seed", "key", "status", "error"}


def _axes(meta: dict, columns: list[str]) -> list[str]:
    sweep = meta.get("sweep") if isinstance(meta.get("sweep"), dict) else meta
    axes = sweep.get("axes")
    names = list(axes) if isinstance(axes, dict) else axes if isinstance(axes, list) else []
    found = [c for c in names if c in columns]
    return found + (["repeat"] if "repeat" in columns else []) if found else (["point"] if "point" in columns else [])


def load_sweep(path: Path) -> dict:
    """The sweep's points as GateInput's keyword arguments (inputs.py builds the GateInput)."""
    if not (path / "points.parquet").is_file() or not (path / "sweep.json").is_file():
        raise UserError(f"{path}: a sweep folder needs both sweep.json and points.parquet "
                        "(`pddbench sweep` writes them; an unfinished sweep has no points.parquet yet)")
    import pandas as pd

    try:
        meta = json.loads((path / "sweep.json").read_text())
        points = pd.read_parquet(path / "points.parquet")
    except (json.JSONDecodeError, OSError, ValueError) as exc:
        raise UserError(f"{path}: cannot read the sweep ({exc})") from None
    if not isinstance(meta, dict):
        raise UserError(f"{path}/sweep.json: expected a JSON object")
    columns = [str(c) for c in points.columns]
    axes = _axes(meta, columns)
    if not axes:
        raise UserError(f"{path}/points.parquet: cannot tell which columns identify a point (sweep.json names no "
                        "axes and there is no point column); the gate cannot match points")
    out, ident = {}, {}
    for row in points.to_dict("records"):
        subject = ", ".join(f"{a}={row[a]}" for a in axes)
        metrics: dict[str, float | None] = {"point_failed": float(row.get("status", "ok") != "ok")}
        for col, value in row.items():
            if col in NOT_METRICS or col in axes or isinstance(value, (str, bool)) or value is None:
                continue
            try:
                number = float(value)
            except (TypeError, ValueError):
                continue
            metrics[col.removeprefix("capacity.")] = None if math.isnan(number) else number
        out[subject] = metrics
        ident[subject] = json.dumps({k: v for k, v in row.items() if k != "error"}, sort_keys=True, default=str)
    sweep = meta.get("sweep") if isinstance(meta.get("sweep"), dict) else {}
    return {"points": out, "identity": ident, "provenance": meta.get("provenance"), "scenario": sweep.get("name")}
