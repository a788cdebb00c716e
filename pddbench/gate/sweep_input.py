"""A sweep folder as a gate input: sweep.json (the sweep's description) + points.parquet (one row
per point: the swept settings and the point's summary metrics). Each point is a subject; its
identity is the row's settings (the columns sweep.json names as its axes, else the non-metric
columns)."""

from __future__ import annotations

import json
from pathlib import Path

from pddbench.errors import UserError


def _axes(meta: dict, columns: list[str]) -> list[str]:
    for key in ("axes", "parameters", "params", "vary", "grid"):
        value = meta.get(key)
        if isinstance(value, dict):
            value = list(value)
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            found = [c for c in columns if c in value or any(c.endswith(v) or v.endswith(c) for v in value)]
            if found:
                return found
    for key in ("point", "point_id", "name", "label"):
        if key in columns:
            return [key]
    return []


def load_sweep(path: Path):
    from pddbench.gate.inputs import GateInput, flatten

    if not (path / "points.parquet").is_file() or not (path / "sweep.json").is_file():
        raise UserError(f"{path}: a sweep folder needs both sweep.json and points.parquet "
                        "(`pddbench sweep` writes them)")
    import pandas as pd

    try:
        meta = json.loads((path / "sweep.json").read_text())
        points = pd.read_parquet(path / "points.parquet")
    except (json.JSONDecodeError, OSError, ValueError) as exc:
        raise UserError(f"{path}: cannot read the sweep ({exc})") from None
    columns = [str(c) for c in points.columns]
    axes = _axes(meta if isinstance(meta, dict) else {}, columns)
    if not axes:
        raise UserError(f"{path}/points.parquet: cannot tell which columns identify a point (sweep.json names no "
                        "axes and there is no point/point_id column); the gate cannot match points")
    runtime = str(meta.get("runtime", "sim")) if isinstance(meta, dict) else "sim"
    out, ident = {}, {}
    for row in points.to_dict("records"):
        subject = ", ".join(f"{a}={row[a]}" for a in axes)
        metrics = {k: v for k, v in row.items() if k not in axes}
        flat = flatten({k.replace("/", "."): (None if v is None or v != v else v) for k, v in metrics.items()})
        out[subject] = flat
        ident[subject] = json.dumps(metrics, sort_keys=True, default=str)
    return GateInput("sweep", path, runtime if runtime in ("sim", "live") else "sim", points=out, identity=ident,
                     provenance=meta.get("provenance") if isinstance(meta, dict) else None,
                     scenario=meta.get("scenario") if isinstance(meta, dict) else None)
