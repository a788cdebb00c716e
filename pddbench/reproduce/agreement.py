"""Light against full: the same verdict on every row (issue 27.1).

`make run`'s light reproduction is lighter than `reproduce --full` (fewer requests per scenario, a
smaller map), which is allowed only where it changes no verdict. The nightly runs both and fails
on a disagreement (pddbench/gate/nightly.py, part `agreement`). A row that is in one run and not in
the other is a disagreement too: a claim the light run drops has no verdict to agree with."""

from __future__ import annotations

from pathlib import Path

from pddbench.core.errors import UserError
from pddbench.core.loading import read_json


def verdicts(path: Path) -> dict[str, str]:
    """claim id -> verdict, from a reproduce.json (refused, naming the file, when it is not one)."""
    doc = read_json(path, "reproduce result")
    rows = doc.get("rows") if isinstance(doc, dict) else None
    if not isinstance(rows, list) or not rows:
        raise UserError(f"{path}: field 'rows': expected the ledger's rows (a reproduce.json)")
    out: dict[str, str] = {}
    for i, r in enumerate(rows):
        if not (isinstance(r, dict) and isinstance(r.get("id"), str) and isinstance(r.get("verdict"), str)):
            raise UserError(f"{path}: field 'rows[{i}]': expected an object with a string 'id' and 'verdict'")
        if r["id"] in out:
            raise UserError(f"{path}: field 'rows[{i}].id': claim '{r['id']}' appears twice")
        out[r["id"]] = r["verdict"]
    return out


def _claims(light: dict[str, str], full: dict[str, str]) -> list[str]:
    """Both runs' claims: the light run's first, then those only the full run has."""
    return sorted(set(light) | set(full), key=lambda c: (c not in light, c))


def disagreements(light: dict[str, str], full: dict[str, str]) -> list[dict]:
    """Every claim whose verdict differs between the two runs (None where a run lacks the row)."""
    return [{"claim": c, "light": light.get(c), "full": full.get(c)} for c in _claims(light, full)
            if light.get(c) != full.get(c)]


def table(light: dict[str, str], full: dict[str, str]) -> str:
    """Markdown: one line per claim with both verdicts, the disagreements marked."""
    lines = ["| claim | light | full | |", "| --- | --- | --- | --- |"]
    for c in _claims(light, full):
        a, b = light.get(c), full.get(c)
        lines.append(f"| {c} | {a or '(no row)'} | {b or '(no row)'} | {'' if a == b else 'DISAGREE'} |")
    return "\n".join(lines)
