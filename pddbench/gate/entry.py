"""One gated subject's values as read from its file (shared by the run and sweep readers)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Entry:
    subject: str
    source: str                 # the file (and point) the values come from
    raw: dict[str, object]      # dotted name -> the value as read (a mapping is kept as well as its leaves)
    measured: bool = True       # False: a failed sweep point (only point_failed is gated)
    strict: bool = True         # a non-finite unruled number is bad input (summaries) or no value (sweep cells)
