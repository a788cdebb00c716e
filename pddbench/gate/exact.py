"""Exact mode, for the deterministic simulator: the same scenario and code give byte-identical
records, so identical records (and summary metrics) pass. Any change is reported metric by metric
(baseline, candidate, difference); a ruled metric that moved the worse way beyond its tolerance is
a regression; a metric without a rule is reported as moved and never fails."""

from __future__ import annotations

from pddbench.gate.inputs import GateInput, flatten
from pddbench.gate.rules import Rule

EPS = 1e-9


def judge(metric: str, base: float | None, cand: float | None, rule: Rule | None) -> dict:
    row = {"metric": metric, "baseline": base, "candidate": cand, "diff": None, "diff_pct": None,
           "ci_lo": None, "ci_hi": None, "tolerance": None, "rule": rule.describe() if rule else None}
    if base is None and cand is None:
        return {**row, "status": "same"}
    if base is None or cand is None:
        # a metric that appeared or vanished (no handoff left, say): reported; failures are
        # judged by their own rule (requests_failed)
        return {**row, "status": "moved"}
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
    for metric in sorted(set(base) | set(cand)):
        row = judge(metric, base.get(metric), cand.get(metric), rules.get(metric))
        if row["status"] != "same" or metric in rules:
            rows.append({"subject": subject, **row})
    return rows


def _records_identical(a, b) -> bool:
    from pddbench.records import read_records

    return read_records(a / "records.parquet").equals(read_records(b / "records.parquet"))


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
        rows = compare_metrics(subject, flatten(base.summaries[0]), flatten(cand.summaries[0]), rules)
        identical = same_records and all(r["status"] == "same" for r in rows)
    else:
        missing = sorted(set(base.points) - set(cand.points))
        extra = sorted(set(cand.points) - set(base.points))
        if missing:
            notes.append(f"points in the baseline only: {', '.join(missing)}")
        if extra:
            notes.append(f"points in the candidate only: {', '.join(extra)}")
        for subject in sorted(set(base.points) & set(cand.points)):
            rows += compare_metrics(subject, base.points[subject], cand.points[subject], rules)
        identical = not missing and not extra and all(
            cand.identity.get(s) == base.identity.get(s) for s in base.points) and \
            all(r["status"] == "same" for r in rows)
        for s in missing:
            rows.append({"subject": s, "metric": "(point)", "baseline": None, "candidate": None, "diff": None,
                         "diff_pct": None, "ci_lo": None, "ci_hi": None, "tolerance": None, "rule": None,
                         "status": "regression"})
    return {"identical": identical, "rows": rows, "notes": notes}
