"""Records -> summary. Every metric is defined here once (see docs/metrics.md)."""

from __future__ import annotations

import pandas as pd

from pddbench.metrics.percentiles import distribution
from pddbench.metrics.steady import steady_state
from pddbench.metrics.records import ABORT_REASONS

SCHEMA_VERSION = 1


def meets_slo(df: pd.DataFrame, ttft_ms: float, tpot_ms: float) -> pd.Series:
    """Per request: completed, TTFT within bound and TPOT within bound (TPOT of 1-token outputs is 0)."""
    tpot = df["tpot_ms"].fillna(0.0)
    return (~df["failed"]) & (df["ttft_ms"] <= ttft_ms) & (tpot <= tpot_ms)


def sla_holds(df: pd.DataFrame, ttft_ms: float, tpot_ms: float, percentile: float) -> bool:
    """The SLA: at least `percentile`% of all requests completed within the TTFT bound, and at
    least `percentile`% within the TPOT bound (nearest-rank "P90 TTFT <= bound"; a failed request
    counts as a miss on both)."""
    if df.empty:
        return False
    done = ~df["failed"]
    need = percentile / 100.0
    ttft_ok = float((done & (df["ttft_ms"] <= ttft_ms)).mean())
    tpot_ok = float((done & (df["tpot_ms"].fillna(0.0) <= tpot_ms)).mean())
    return ttft_ok >= need - 1e-12 and tpot_ok >= need - 1e-12


def run_duration_s(df: pd.DataFrame) -> float:
    """First arrival -> last completion (or last arrival when nothing completed)."""
    if df.empty:
        return 0.0
    end = df.loc[~df["failed"], "finish_ms"].max()
    if pd.isna(end):
        end = df["arrival_ms"].max()
    return max(0.0, float(end - df["arrival_ms"].min()) / 1000.0)


def offered_rps(df: pd.DataFrame) -> float | None:
    """Requests per second as offered: arrivals after the first / first -> last arrival."""
    n = len(df)
    span_s = float(df["arrival_ms"].max() - df["arrival_ms"].min()) / 1000 if n > 1 else 0.0
    return round((n - 1) / span_s, 6) if span_s else None


def _by_reason(counts: pd.Series) -> dict[str, int]:
    """Every known abort reason (0 when absent), plus any other reason the records carry."""
    out = {r: 0 for r in ABORT_REASONS}
    out.update({str(k): int(v) for k, v in counts.items()})
    return out


def summarize(df: pd.DataFrame, *, deployment: str, sla_ttft_ms: float, sla_tpot_ms: float,
              sla_percentile_q: float, cost_per_hour: float | None = None) -> dict:
    ok = df[~df["failed"]]
    duration_s = run_duration_s(df)
    good = meets_slo(df, sla_ttft_ms, sla_tpot_ms)
    out_tokens = int(ok["output_tokens"].sum())
    relay = int(ok["relay_tokens"].sum())
    input_tokens = int(df["input_tokens"].sum())
    reasons = df.loc[df["failed"], "failure_reason"].value_counts().to_dict()
    aborted = df[df["transfer_aborted"]]
    by_reason = aborted.groupby(aborted["transfer_abort_reason"].astype(str))
    abort_n, abort_saved = by_reason.size(), by_reason["wan_kv_bytes_saved"].sum()
    return {
        "schema_version": SCHEMA_VERSION,
        "deployment": deployment,
        "requests_total": int(len(df)),
        "requests_completed": int(len(ok)),
        "requests_failed": int(df["failed"].sum()),
        "failure_reasons": {str(k): int(v) for k, v in reasons.items()},
        "duration_s": round(duration_s, 6),
        "offered_rps": offered_rps(df),
        "throughput_rps": round(len(ok) / duration_s, 6) if duration_s else None,
        "output_tokens_per_s": round(out_tokens / duration_s, 6) if duration_s else None,
        "ttft_ms": distribution(ok["ttft_ms"]),
        "tpot_ms": distribution(ok["tpot_ms"].dropna()),
        "e2e_ms": distribution(ok["e2e_ms"]),
        "max_itl_ms": distribution(ok["max_itl_ms"]),
        "kv_wait_ms": distribution(ok["kv_wait_ms"]),
        "wan_kv_ms": distribution(ok["wan_kv_ms"].dropna()),
        "sla": {"ttft_ms": sla_ttft_ms, "tpot_ms": sla_tpot_ms, "percentile": sla_percentile_q},
        "sla_holds": sla_holds(df, sla_ttft_ms, sla_tpot_ms, sla_percentile_q),
        # the SLA after warm-up plus a stability check: what capacity searches on (metrics/steady.py)
        "steady": steady_state(df, sla_ttft_ms, sla_tpot_ms, sla_percentile_q),
        "slo_attainment": round(float(good.mean()), 6) if len(df) else None,
        "goodput_rps": round(float(good.sum()) / duration_s, 6) if duration_s else None,
        "p_hit_rate": round(float(df["p_cached_tokens"].sum()) / input_tokens, 6) if input_tokens else None,
        "decode_hit_rate": round(float(df["decode_cached_tokens"].sum()) / input_tokens, 6) if input_tokens else None,
        "wan_kv_bytes": int(df["wan_kv_bytes"].sum()),
        "rdma_kv_bytes": int(df["rdma_kv_bytes"].sum()),
        "wan_token_id_bytes": int(df["wan_token_id_bytes"].sum()),
        "wan_kv_bytes_saved": int(df["wan_kv_bytes_saved"].sum()),
        "aborted_transfers": int(df["transfer_aborted"].sum()),
        # the totals split by cause ("" = an abort whose cause the runtime did not report)
        "aborted_transfers_by_reason": _by_reason(abort_n),
        "wan_kv_bytes_saved_by_reason": _by_reason(abort_saved),
        "singular_flows": int(df["singular_flow"].sum()),
        "relay_tokens": relay,
        "relay_token_share": round(relay / out_tokens, 6) if out_tokens else 0.0,
        "pipelines": {str(k): int(v) for k, v in df["pipeline"].value_counts().sort_index().items()},
        "handoff_modes": {str(k): int(v) for k, v in df["handoff_mode"].value_counts().sort_index().items()},
        # prfaas: how many prefills went to the remote cluster (offloaded) and why the rest stayed
        "offload_reasons": {str(k): int(v) for k, v in df.loc[df["offload_reason"] != "", "offload_reason"]
                            .value_counts().sort_index().items()},
        "handoff_ms": distribution(ok["handoff_ms"].dropna()),
        "handoff_stall_ms": distribution(ok["handoff_stall_ms"].dropna()),
        "relay_busy_ms": distribution(ok.loc[ok["relay_tokens"] > 0, "relay_busy_ms"]),
        "cost_per_hour": cost_per_hour,
    }
