"""Ledger rows from measured values: a claim's row by id (pddbench/reproduce/claims.py) and the relative
change most rows are made of. Shared by reproduce and the comparison modules it runs."""

from __future__ import annotations

import math

from pddbench.reproduce.claims import BY_ID
from pddbench.reproduce.ledger import Row


def change(new, old) -> float | None:
    """Relative change in %, None where either side is missing, zero or not finite."""
    if new is None or old is None or not old or not math.isfinite(new) or not math.isfinite(old):
        return None
    return 100.0 * (new / old - 1)


def row(cid: str, values, note: str = "") -> Row:
    """The claim's row with one value per seed (None values left out) and how it was measured."""
    return Row(BY_ID[cid], [v for v in values if v is not None], f"Measured: {note}" if note else "")


def unsteady_reason(capacities: list[dict]) -> str:
    """Why capacity results are not steady-state evidence ("" when they are): the capacity search
    warned that its trace is shorter than min_requests, where a capacity may be overstated."""
    short = [c for c in capacities if c.get("warnings")]
    if not short:
        return ""
    c = short[0]
    need = c.get("min_requests") or 12_000
    return (f"capacities from {c.get('requests', 0):,} requests, fewer than the {need:,} the capacity search "
            f"needs for steady state; settle it with `pddbench reproduce --requests {need}` (or --full).")


def unsteady(rows: list[Row], reason: str) -> list[Row]:
    for r in rows:
        r.unsteady = reason
    return rows
