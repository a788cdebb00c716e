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
