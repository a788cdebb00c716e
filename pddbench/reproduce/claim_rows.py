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


CONVERGED_PCT = 3.0  # a capacity has converged when twice the requests move it by at most this


def convergence(name: str, at_n: dict, at_2n: dict) -> dict:
    """The same capacity search on n and 2n requests (seed 0): converged when they agree within
    CONVERGED_PCT (both 0 agree)."""
    a, b = at_n["throughput_within_sla_rps"], at_2n["throughput_within_sla_rps"]
    moved = change(b, a)
    ok = a == b or (moved is not None and abs(moved) <= CONVERGED_PCT)
    return {"deployment": name, "requests": at_n.get("requests"), "rps": a, "requests_2n": at_2n.get("requests"),
            "rps_2n": b, "change_pct": None if moved is None else round(moved, 2), "converged": ok}


def unsteady_reason(capacities: list[dict], checks: list[dict | None] | None = None) -> str:
    """Why capacity results are not steady-state evidence ("" when they are): the capacity search
    warned that its trace is shorter than min_requests, where a capacity may be overstated; or a
    capacity moved by more than CONVERGED_PCT on twice the requests; or its check is missing."""
    short = [c for c in capacities if c.get("warnings")]
    if short:
        c = short[0]
        need = c.get("min_requests") or 12_000
        return (f"capacities from {c.get('requests', 0):,} requests, fewer than the {need:,} the capacity search "
                f"needs for steady state; settle it with `pddbench reproduce --requests {need}` (or --full).")
    if checks is None:
        return ""
    if not checks or any(c is None for c in checks):
        return "no convergence check (the same search on twice the requests) ran for these capacities."
    bad = [c for c in checks if not c["converged"]]
    if not bad:
        return ""
    c = bad[0]
    moved = "from a capacity of 0" if c["change_pct"] is None else f"{c['change_pct']:+.1f} %"
    return (f"{c['deployment']}'s capacity did not converge: {c['rps']:.2f} req/s on {c['requests']:,} requests, "
            f"{c['rps_2n']:.2f} on {c['requests_2n']:,} ({moved}, more than {CONVERGED_PCT:g} %); settle it with "
            f"`pddbench reproduce --requests {c['requests_2n']}`.")


def unsteady(rows: list[Row], reason: str) -> list[Row]:
    for r in rows:
        r.unsteady = reason
    return rows
