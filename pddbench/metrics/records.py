"""The one per-request record schema, written by the simulator and by live runs alike.

Times are ms from run start. Everything downstream (summaries, goodput, plots, gates) reads only
these records. See docs/metrics.md for each field's meaning.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from pddbench.core.io import atomic_path

# name -> pandas dtype; the order is the column order on disk.
RECORD_FIELDS: dict[str, str] = {
    "request_id": "int64",
    "session_id": "int64",          # -1 when the trace has none
    "turn": "int64",                # -1 when the trace has none
    "arrival_ms": "float64",
    "input_tokens": "int64",
    "output_tokens": "int64",
    "p_cached_tokens": "int64",     # prompt tokens that hit the prefill-side prefix cache
    "decode_cached_tokens": "int64",  # prompt tokens already on the decode side (D or MD)
    "pipeline": "string",           # p_d | p_md | p_rld_md | p_rld (ablation) | pr_d (prfaas offload) | colocated
    "offload_reason": "string",     # prfaas: offloaded | short_uncached | line_busy; "" for other kinds
    "handoff_mode": "string",       # none | one_shot | catch_up | relay_finish
    "prefill_start_ms": "float64",
    "prefill_end_ms": "float64",
    "first_token_ms": "float64",
    "finish_ms": "float64",
    "ttft_ms": "float64",
    "e2e_ms": "float64",
    "tpot_ms": "float64",           # NaN when output_tokens < 2
    "max_itl_ms": "float64",
    "schedule_lag_ms": "float64",   # live: actual send - intended send (0 in the simulator)
    "kv_wait_ms": "float64",        # first_token_ms - prefill_end_ms (KV transfer + first step)
    "wan_kv_ms": "float64",         # WAN KV transfer time (NaN when none crossed)
    "relay_tokens": "int64",        # tokens produced by the relay decoder (eager tokens)
    "main_tokens": "int64",         # tokens produced by D / MD
    "handoff_ms": "float64",        # first handoff message sent -> MD produces its first token
    "handoff_stall_ms": "float64",  # MD's first token - the relay's last token (NaN without takeover)
    "relay_busy_ms": "float64",     # how long the request occupied a relay decoder
    "rdma_kv_bytes": "int64",
    "wan_kv_bytes": "int64",        # KV bytes that crossed the WAN for this request
    "wan_token_id_bytes": "int64",
    "wan_kv_bytes_saved": "int64",  # KV bytes not sent because a transfer was aborted
    "transfer_aborted": "bool",
    "transfer_abort_reason": "string",  # "" | singular_flow | relay_finish | md_error
    "singular_flow": "bool",
    "failed": "bool",
    "failure_reason": "string",     # "" when the request completed
}


ABORT_REASONS = ("singular_flow", "relay_finish", "md_error")  # transfer_abort_reason when aborted


def derive_latencies(arrival_ms: float, first_token_ms: float, finish_ms: float, output_tokens: int,
                     failed: bool, prefill_end_ms: float = float("nan")) -> dict[str, float]:
    """TTFT, E2E, TPOT and the KV wait from the timestamps: the one definition for both runtimes
    (docs/metrics.md). `prefill_end_ms` is NaN where unknown (then kv_wait_ms is NaN)."""
    nan = float("nan")
    if failed:
        return {"ttft_ms": nan, "e2e_ms": nan, "tpot_ms": nan, "kv_wait_ms": nan}
    ttft, e2e = first_token_ms - arrival_ms, finish_ms - arrival_ms
    tpot = (e2e - ttft) / (output_tokens - 1) if output_tokens > 1 else nan
    return {"ttft_ms": ttft, "e2e_ms": e2e, "tpot_ms": tpot, "kv_wait_ms": first_token_ms - prefill_end_ms}


def to_frame(rows: list[dict]) -> pd.DataFrame:
    """Rows (dicts with every field) -> a frame with the schema's columns and dtypes."""
    df = pd.DataFrame(rows, columns=list(RECORD_FIELDS))
    missing = [c for c in RECORD_FIELDS if df[c].isna().all() and len(df) and RECORD_FIELDS[c] in ("int64", "bool", "string")]
    if missing:
        raise ValueError(f"records lack required fields: {missing}")
    return df.astype(RECORD_FIELDS)


def write_records(path: str | Path, df: pd.DataFrame) -> None:
    with atomic_path(path) as tmp:
        df.to_parquet(tmp, index=False, engine="pyarrow")


def read_records(path: str | Path) -> pd.DataFrame:
    df = pd.read_parquet(path, engine="pyarrow")
    return df.astype({c: t for c, t in RECORD_FIELDS.items() if c in df.columns})
