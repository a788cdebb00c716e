"""Statistical mode, for live runs: candidate and baseline are each one or more repeats of a run;
a regression is flagged only when the whole bootstrap interval of (candidate - baseline) lies
beyond the rule's tolerance on the worse side.

What is resampled (a two-level, or cluster, bootstrap):
- a distribution metric of a record field (`ttft_ms.p90`, `tpot_ms.mean`, ...): draw the repeats
  with replacement, then each drawn repeat's requests with replacement, pool them and take the
  statistic (summary.json's definition: completed requests, NaN dropped, linear percentiles). Both
  the run-to-run spread and the request-to-request spread enter the interval; pooling requests
  alone would treat one noisy run as 40 independent observations and raise false alarms.
- any other summary metric (`slo_attainment`, `goodput_rps`, `requests_failed`, ...): the
  per-repeat summary values, repeats drawn with replacement, their mean.
numpy, seeded from the rules file: the same inputs give the same interval. A record value that is
not finite (inf) is bad input; NaN is a request without that value (dropped, as summary.json does)."""

from __future__ import annotations

import numpy as np

from pddbench.core.errors import InputError
from pddbench.gate.inputs import GateInput, numbers
from pddbench.gate.rules import Rule
from pddbench.metrics.records import RECORD_FIELDS

STATS = {"p50": lambda x: np.percentile(x, 50), "p90": lambda x: np.percentile(x, 90),
         "p99": lambda x: np.percentile(x, 99), "mean": np.mean, "max": np.max}


def _row_percentile(m: np.ndarray, q: float) -> np.ndarray:
    """np.nanpercentile(m, q, axis=1) (linear interpolation), without its per-row Python loop."""
    s = np.sort(m, axis=1)  # NaN sorts last
    count = (~np.isnan(m)).sum(axis=1)
    pos = q / 100 * (count - 1)
    lo = np.floor(pos).astype(int)
    hi = np.minimum(lo + 1, count - 1)
    low = np.take_along_axis(s, lo[:, None], 1)[:, 0]
    high = np.take_along_axis(s, hi[:, None], 1)[:, 0]
    return low + (high - low) * (pos - lo)


NANSTATS = {"p50": lambda m: _row_percentile(m, 50), "p90": lambda m: _row_percentile(m, 90),
            "p99": lambda m: _row_percentile(m, 99), "mean": lambda m: np.nanmean(m, axis=1),
            "max": lambda m: np.nanmax(m, axis=1)}


def record_metric(metric: str) -> tuple[str, str] | None:
    field, _, stat = metric.rpartition(".")
    return (field, stat) if field in RECORD_FIELDS and stat in STATS else None


def per_request_values(runs, field: str, cache: dict | None = None) -> list[np.ndarray]:
    """Per repeat: the field over completed requests, NaN dropped (summary.json's population)."""
    from pddbench.measure.compare import load_records  # a damaged records file is one line, not a traceback

    cache = {} if cache is None else cache
    groups = []
    for run in runs:
        if run not in cache:
            cache[run] = load_records(run)
        df = cache[run]
        try:
            values = df.loc[~df["failed"].astype(bool), field].to_numpy(dtype=float)
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(str(run / "records.parquet"), f"has no numeric {field} per request ({exc})",
                             field=field) from None
        if np.isinf(values).any():
            raise InputError(str(run / "records.parquet"), "holds an infinite value; a latency must be finite",
                             field=field)
        groups.append(values[~np.isnan(values)])
    return groups


def bootstrap(groups: list[np.ndarray], stat: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """The statistic over `n` two-level resamples of `groups` (one array per repeat): draw k
    repeats with replacement, then each drawn repeat's values with replacement; vectorised as an
    (n, k, longest) array padded with NaN."""
    groups = [np.asarray(g, dtype=float) for g in groups if len(g)]
    k, longest = len(groups), max(len(g) for g in groups)
    lengths = np.array([len(g) for g in groups])
    padded = np.full((k, longest), np.nan)
    for i, g in enumerate(groups):
        padded[i, :len(g)] = g
    picks = rng.integers(0, k, (n, k))
    span = lengths[picks][..., None]                               # (n, k, 1)
    idx = np.floor(rng.random((n, k, longest)) * span).astype(int)  # within each drawn repeat
    values = padded[picks[..., None], idx]
    values[np.arange(longest)[None, None, :] >= span] = np.nan     # a shorter repeat draws fewer
    return NANSTATS[stat](values.reshape(n, k * longest))


def compare_metric(metric: str, rule: Rule, base_groups, cand_groups, stat: str, n: int, confidence: float,
                   rng: np.random.Generator) -> dict:
    row = {"metric": metric, "rule": rule.describe(), "ci_lo": None, "ci_hi": None, "diff": None, "diff_pct": None,
           "tolerance": None, "baseline": None, "candidate": None}
    has_base, has_cand = any(len(g) for g in base_groups), any(len(g) for g in cand_groups)
    if not has_base or not has_cand:
        # no value on either side (a nullable metric: no handoff in any run) is n/a; a value that
        # appeared or vanished cannot be judged by the rule: a regression (accept with --update-baseline)
        return {**row, "status": "n/a" if not has_base and not has_cand else "regression"}
    b_point = float(STATS[stat](np.concatenate(base_groups)))
    c_point = float(STATS[stat](np.concatenate(cand_groups)))
    diffs = bootstrap(cand_groups, stat, n, rng) - bootstrap(base_groups, stat, n, rng)
    alpha = 1 - confidence
    lo, hi = (float(v) for v in np.quantile(diffs, [alpha / 2, 1 - alpha / 2]))
    tol = rule.tolerance(b_point)
    worse_lo, worse_hi = (lo, hi) if rule.worse == "up" else (-hi, -lo)  # the interval, worse = positive
    status = "regression" if worse_lo > tol else "improved" if worse_hi < -tol else \
        "same" if lo == hi == 0 else "within"
    return {**row, "baseline": b_point, "candidate": c_point, "diff": c_point - b_point,
            "diff_pct": 100 * (c_point - b_point) / abs(b_point) if b_point else None,
            "ci_lo": lo, "ci_hi": hi, "tolerance": tol, "status": status}


def statistical_gate(cand: GateInput, base: GateInput, rules: dict[str, Rule], confidence: float,
                     n: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    subject = cand.scenario or cand.label
    b_flat = [numbers(e) for e in base.entries]
    c_flat = [numbers(e) for e in cand.entries]
    rows, cache = [], {}
    for metric, rule in sorted(rules.items()):
        rec = record_metric(metric)
        if rec is not None:
            field, stat = rec
            bg, cg = per_request_values(base.runs, field, cache), per_request_values(cand.runs, field, cache)
            fn = stat
        else:
            bv = [f.get(metric) for f in b_flat]
            cv = [f.get(metric) for f in c_flat]
            bg = [np.array([v]) for v in bv if v is not None]
            cg = [np.array([v]) for v in cv if v is not None]
            fn = "mean"
        rows.append({"subject": subject, **compare_metric(metric, rule, bg, cg, fn, n, confidence, rng)})
    notes = [f"{len(cand.runs)} candidate and {len(base.runs)} baseline repeat(s); {confidence:.0%} two-level "
             f"bootstrap intervals of candidate - baseline ({n} resamples, seed {seed})"]
    return {"identical": False, "rows": rows, "notes": notes}
