"""Exact mode, for the deterministic simulator: the same scenario and code give byte-identical
records, so identical records (and summary metrics) pass. Any change is reported metric by metric
(baseline, candidate, difference); a ruled metric that moved the worse way beyond its tolerance is
a regression; a metric without a rule is reported as moved and never fails. The values reaching
here were checked (gate.check_ruled): a ruled metric is a finite number on both sides, or null on
both or one side under a nullable rule."""

from __future__ import annotations

import math

from pddbench.gate.inputs import GateInput, numbers
from pddbench.gate.rules import Rule

EPS = 1e-9


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def judge(metric: str, base: float | None, cand: float | None, rule: Rule | None) -> dict:
    row = {"metric": metric, "baseline": base, "candidate": cand, "diff": None, "diff_pct": None,
           "ci_lo": None, "ci_hi": None, "tolerance": None, "rule": rule.describe() if rule else None}
    if base is None and cand is None:
        return {**row, "status": "n/a" if rule else "same"}
    if base is None or cand is None:
        # a metric that appeared or vanished (no handoff left, say): the rule cannot judge it, so
        # a ruled one fails (accept it with --update-baseline); an unruled one is reported
        return {**row, "status": "regression" if rule else "moved"}
    if rule is not None and not (_finite(base) and _finite(cand)):
        return {**row, "status": "regression"}  # fail closed should an unchecked value get here
    diff = cand - base
    row.update(diff=diff, diff_pct=100 * diff / abs(base) if base else None,
               tolerance=rule.tolerance(base) if rule else None)
    if abs(diff) <= EPS * max(1.0, abs(base)):
        return {**row, "status": "same"}
    if rule is None:
        return {**row, "status": "moved"}
    tol = row["tolerance"]
    worse = diff if rule.worse == "up" else -diff
    status = "regression" if worse > tol + EPS * max(1.0, abs(base)) else "within" if worse > 0 else "improved"
    return {**row, "status": status}


def compare_metrics(subject: str, base: dict, cand: dict, rules: dict[str, Rule]) -> list[dict]:
    rows = []
    for metric in sorted(set(base) | set(cand) | set(rules)):
        row = judge(metric, base.get(metric), cand.get(metric), rules.get(metric))
        if row["status"] != "same" or metric in rules:
            rows.append({"subject": subject, **row})
    return rows


def _records_identical(a, b) -> bool:
    from pddbench.measure.compare import load_records  # a damaged records file is one line, not a traceback

    return load_records(a).equals(load_records(b))


def _point_row(subject: str, status: str) -> dict:
    return {"subject": subject, "metric": "(point)", "baseline": None, "candidate": None, "diff": None,
            "diff_pct": None, "ci_lo": None, "ci_hi": None, "tolerance": None, "rule": None, "status": status}


def exact_gate(cand: GateInput, base: GateInput, rules: dict[str, Rule]) -> dict:
    """Rows for every ruled metric and every metric that moved; `identical` when nothing did."""
    rows, notes = [], []
    if cand.kind in ("run", "repeats"):
        subject = cand.scenario or cand.label
        if len(cand.runs) != len(base.runs):
            notes.append(f"candidate has {len(cand.runs)} run(s), baseline {len(base.runs)}: comparing the first")
        same_records = _records_identical(cand.runs[0], base.runs[0])
        if not same_records:
            notes.append("records.parquet differs from the baseline")
        rows = compare_metrics(subject, numbers(base.entries[0]), numbers(cand.entries[0]), rules)
        identical = same_records and all(r["status"] in ("same", "n/a") for r in rows)
    else:
        b_by, c_by = {e.subject: e for e in base.entries}, {e.subject: e for e in cand.entries}
        missing = [s for s in b_by if s not in c_by]
        extra = [s for s in c_by if s not in b_by]
        if missing:
            notes.append(f"points in the baseline only: {', '.join(missing)}")
        if extra:
            notes.append(f"points in the candidate only: {', '.join(extra)}")
        for subject in [s for s in b_by if s in c_by]:
            b, c = b_by[subject], c_by[subject]
            if b.measured and c.measured:
                rows += compare_metrics(subject, numbers(b), numbers(c), rules)
            elif "point_failed" in rules:  # a failed point has no metrics: whether it failed is what is gated
                rows += compare_metrics(subject, {"point_failed": float(not b.measured)},
                                        {"point_failed": float(not c.measured)}, {"point_failed": rules["point_failed"]})
            elif b.measured:  # failed in the candidate only, and no rule says how that is judged
                rows.append(_point_row(subject, "regression"))
        identical = not missing and not extra and all(
            cand.identity.get(s) == base.identity.get(s) for s in b_by) and \
            all(r["status"] in ("same", "n/a") for r in rows)
        rows += [_point_row(s, "regression") for s in missing]
    return {"identical": identical, "rows": rows, "notes": notes}
