"""A sweep folder (`pddbench sweep`) as a gate input: sweep.json (the resolved sweep: its axes under
sweep.axes, provenance) + points.parquet (one row per point and repeat: point, repeat, seed, key,
the axis values, status, error, the flattened summary metrics; capacity sweeps add capacity.*).
Each point and repeat is one subject, named by its axis values; `capacity.X` is gated as `X`;
`point_failed` (1 when the point's status is not ok) is a metric of its own. A failed point has
no metrics: only point_failed is gated there."""

from __future__ import annotations

import json
import math
from pathlib import Path

from pddbench.core.errors import InputError, UserError
from pddbench.gate.entry import Entry

NOT_METRICS = {"point", "repeat", "seed", "key", "status", "error"}


def _axes(meta: dict, columns: list[str]) -> list[str]:
    sweep = meta.get("sweep") if isinstance(meta.get("sweep"), dict) else meta
    axes = sweep.get("axes")
    names = list(axes) if isinstance(axes, dict) else axes if isinstance(axes, list) else []
    found = [c for c in names if isinstance(c, str) and c in columns]
    return found + (["repeat"] if "repeat" in columns else []) if found else (["point"] if "point" in columns else [])


def _cell(value):
    """A parquet cell as a plain value: NaN and pandas' NA are no value; numpy scalars unwrapped."""
    if value is None:
        return None
    try:
        if value != value:  # NaN, and pd.NA compares as NA (its truth raises TypeError)
            return None
    except TypeError:
        return None
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def load_sweep(path: Path) -> dict:
    """The sweep's points as GateInput's keyword arguments (inputs.py builds the GateInput)."""
    from pddbench.core.loading import read_json

    if not (path / "points.parquet").is_file() or not (path / "sweep.json").is_file():
        raise UserError(f"{path}: a sweep folder needs both sweep.json and points.parquet "
                        "(`pddbench sweep` writes them; an unfinished sweep has no points.parquet yet)")
    import pandas as pd

    meta = read_json(path / "sweep.json", "sweep result")  # strict: duplicate keys refused
    if not isinstance(meta, dict):
        raise InputError(str(path / "sweep.json"), "expected a JSON object")
    state = meta.get("state")
    if state is not None and state != "complete":
        raise UserError(f"{path}: the sweep is {state!r}, not complete: its points cover part of it; resume or "
                        "rerun it (`pddbench sweep ... --resume`)")
    try:
        points = pd.read_parquet(path / "points.parquet")
    except Exception as exc:  # noqa: BLE001 - pyarrow raises many kinds for a damaged file
        raise InputError(str(path / "points.parquet"), f"is not a readable points table ({type(exc).__name__}: "
                         f"{' '.join(str(exc).split())[:120]})") from None
    columns = [str(c) for c in points.columns]
    axes = _axes(meta, columns)
    if not axes:
        raise UserError(f"{path}/points.parquet: cannot tell which columns identify a point (sweep.json names no "
                        "axes and there is no point column); the gate cannot match points")
    entries, ident = [], {}
    source = str(path / "points.parquet")
    for row in points.to_dict("records"):
        row = {str(k): v for k, v in row.items()}
        subject = ", ".join(f"{a}={row[a]}" for a in axes)
        if subject in ident:
            raise InputError(source, f"holds the point {subject} twice; the gate cannot tell which to compare")
        ok = _cell(row.get("status", "ok")) == "ok"
        metrics: dict[str, object] = {"point_failed": float(not ok)}
        for col, value in row.items():
            if col in NOT_METRICS or col in axes:
                continue
            metrics[col.removeprefix("capacity.")] = _cell(value)
        entries.append(Entry(subject, f"{source} (point {subject})", metrics, measured=ok, strict=False))
        ident[subject] = json.dumps({k: v for k, v in row.items() if k != "error"}, sort_keys=True, default=str)
    sweep = meta.get("sweep") if isinstance(meta.get("sweep"), dict) else {}
    # what the points measured (rules' `for:`): a capacity sweep also holds the summary at the capacity found
    measures = {"sweep"} | ({"capacity"} if any(c.startswith("capacity.") for c in columns) else set()) | \
        ({"run"} if "requests_total" in columns else set())
    name = sweep.get("name")
    provenance = meta.get("provenance")
    return {"entries": entries, "identity": ident, "provenance": provenance if isinstance(provenance, dict) else None,
            "scenario": name if isinstance(name, str) else None, "measures": frozenset(measures), "axes": axes}
