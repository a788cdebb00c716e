"""The ledger: every figure of the article as a row with the article's value, the simulated
value over several seeds (mean and spread), a verdict and what it depends on.

A claim is compared in one of three ways: `value` (the simulated value must lie within a stated
tolerance of the article's), `change` (a relative change: the sign must agree on every seed for
"same sign only", so a change that straddles zero across seeds is "not reproduced", and the size
must be within the tolerance for "reproduced"), or `range` (the simulated value must fall inside the
article's range). A claim with no simulated value is "not measurable", with the reason; one whose
value rests on capacities that are not steady-state evidence (a trace shorter than the capacity
search's min_requests) is "inconclusive", with the reason and the command that settles it."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Literal

Verdict = Literal["reproduced", "same sign only", "not reproduced", "not measurable", "inconclusive"]
VERDICTS: tuple[Verdict, ...] = ("reproduced", "same sign only", "not reproduced", "not measurable", "inconclusive")


@dataclass
class Claim:
    id: str
    figure: str                     # what the article reports, in words
    article: float | tuple[float, float] | None  # a value, or a (low, high) range
    unit: str                       # "%", "s", "KB", "share", ...
    kind: Literal["value", "change", "range"]
    tolerance: float = 0.0          # absolute, in the claim's unit
    depends_on: str = ""            # the assumptions the simulated value rests on


@dataclass
class Row:
    claim: Claim
    values: list[float] = field(default_factory=list)  # one per seed
    note: str = ""                  # how it was measured, or why it could not be
    unsteady: str = ""              # why the evidence is not steady state (then no verdict), and what settles it

    @property
    def mean(self) -> float | None:
        vals = [v for v in self.values if v is not None and math.isfinite(v)]
        return sum(vals) / len(vals) if vals else None

    @property
    def spread(self) -> tuple[float, float] | None:
        vals = [v for v in self.values if v is not None and math.isfinite(v)]
        return (min(vals), max(vals)) if vals else None

    @property
    def verdict(self) -> Verdict:
        if self.unsteady and self.mean is not None:
            return "inconclusive"  # a verdict from evidence the capacity search flags is a guess
        return verdict(self.claim, self.mean, self.spread)

    def to_json(self) -> dict:
        return {**asdict(self.claim), "simulated_mean": self.mean, "simulated_spread": self.spread,
                "simulated_values": self.values, "seeds": len(self.values), "verdict": self.verdict,
                "note": self.note, "unsteady": self.unsteady or None}


def verdict(claim: Claim, sim: float | None, spread: tuple[float, float] | None = None) -> Verdict:
    """`spread`: the lowest and highest value over seeds (a sign is only claimed if all agree)."""
    if sim is None or claim.article is None:
        return "not measurable"
    if claim.kind == "range":
        lo, hi = claim.article  # type: ignore[misc]
        return "reproduced" if lo - claim.tolerance <= sim <= hi + claim.tolerance else "not reproduced"
    art = float(claim.article)  # type: ignore[arg-type]
    if abs(sim - art) <= claim.tolerance:
        return "reproduced"
    lo, hi = spread or (sim, sim)
    if claim.kind == "change" and lo * art > 0 and hi * art > 0:  # every seed, so the mean too
        return "same sign only"
    return "not reproduced"


def fmt(value: float | tuple[float, float] | None, unit: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, tuple):
        return f"{fmt(value[0], unit)} .. {fmt(value[1], unit)}"
    if unit == "%":
        return f"{value:+.1f} %"
    if unit == "share":
        return f"{100 * value:.1f} %"
    return f"{value:,.4g} {unit}".strip()


def row_cells(row: Row) -> list[str]:
    c = row.claim
    sim = fmt(row.mean, c.unit)
    if row.spread and len(row.values) > 1 and row.spread[0] != row.spread[1]:
        sim += f" ({fmt(row.spread[0], c.unit)} .. {fmt(row.spread[1], c.unit)}, {len(row.values)} seeds)"
    tol = f" (± {fmt(c.tolerance, c.unit).lstrip('+')})" if c.tolerance and c.kind != "range" else ""
    why = f" Inconclusive: {row.unsteady}" if row.verdict == "inconclusive" else ""
    return [c.figure, fmt(c.article, c.unit) + tol, sim, row.verdict,
            c.depends_on + (f" {row.note}" if row.note else "") + why]


def short_cells(row: Row) -> list[str]:
    """A ledger line with short cells: figure, article, simulated (mean, seed range), verdict; what
    it depends on goes to the details (`detail_text`)."""
    return row_cells(row)[:4]


def detail_text(row: Row) -> str:
    """What a row's value rests on, how it was measured and, where inconclusive, why."""
    return row_cells(row)[4]


def anchor(row: Row) -> str:
    return f"claim-{row.claim.id.replace('_', '-')}"


def markdown_table(rows: list[Row]) -> str:
    head = "| figure | article | simulated | verdict | depends on |\n| --- | ---: | ---: | --- | --- |\n"
    return head + "".join("| " + " | ".join(cell.replace("|", "/") for cell in row_cells(r)) + " |\n" for r in rows)
