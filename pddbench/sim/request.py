"""A request's state during a simulation; becomes one record (pddbench/metrics/records.py) at the end."""

from __future__ import annotations

import math
from operator import attrgetter

import numpy as np
import pandas as pd

from pddbench.metrics.records import RECORD_FIELDS, derive_latencies

NAN = math.nan


class SimRequest:
    __slots__ = (
        "request_id", "session_id", "turn", "arrival_ms", "input_tokens", "output_tokens", "hash_ids",
        "p_cached_tokens", "decode_cached_tokens", "pipeline", "offload_reason", "handoff_mode", "prefill_start_ms",
        "prefill_end_ms", "first_token_ms", "finish_ms", "max_itl_ms", "wan_kv_ms",
        "relay_tokens", "handoff_start_ms", "handoff_stall_ms", "relay_start_ms", "relay_end_ms",
        "rdma_kv_bytes", "wan_kv_bytes", "wan_token_id_bytes", "wan_kv_bytes_saved",
        "transfer_aborted", "transfer_abort_reason", "singular_flow", "failure_reason", "done", "md_first_ms",
    )

    def __init__(self, request_id: int, arrival_ms: float, input_tokens: int, output_tokens: int,
                 hash_ids: list[int], session_id: int | None, turn: int | None):
        self.request_id, self.arrival_ms = request_id, arrival_ms
        self.input_tokens, self.output_tokens, self.hash_ids = input_tokens, max(1, output_tokens), hash_ids
        self.session_id = -1 if session_id is None else session_id
        self.turn = -1 if turn is None else turn
        self.p_cached_tokens = self.decode_cached_tokens = 0
        self.pipeline, self.handoff_mode = "p_d", "none"
        self.offload_reason = ""
        self.prefill_start_ms = self.prefill_end_ms = self.first_token_ms = self.finish_ms = -1.0
        self.max_itl_ms = 0.0
        self.wan_kv_ms = NAN
        self.relay_tokens = 0
        self.handoff_start_ms = self.handoff_stall_ms = self.md_first_ms = NAN
        self.relay_start_ms = self.relay_end_ms = NAN
        self.rdma_kv_bytes = self.wan_kv_bytes = self.wan_token_id_bytes = self.wan_kv_bytes_saved = 0
        self.transfer_aborted = self.singular_flow = False
        self.transfer_abort_reason = ""
        self.failure_reason = ""
        self.done = False

    def first_token(self, t: float) -> None:
        if self.first_token_ms < 0 or t < self.first_token_ms:
            self.first_token_ms = t

    def record(self) -> dict:
        failed = not self.done or bool(self.failure_reason)
        lat = derive_latencies(self.arrival_ms, self.first_token_ms, self.finish_ms, self.output_tokens, failed,
                               self.prefill_end_ms if self.prefill_end_ms >= 0 else NAN)
        relay_busy = (self.relay_end_ms - self.relay_start_ms) if not math.isnan(self.relay_start_ms) else 0.0
        handoff_ms = self.md_first_ms - self.handoff_start_ms
        return {
            "request_id": self.request_id, "session_id": self.session_id, "turn": self.turn,
            "arrival_ms": self.arrival_ms, "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
            "p_cached_tokens": self.p_cached_tokens, "decode_cached_tokens": self.decode_cached_tokens,
            "pipeline": self.pipeline, "offload_reason": self.offload_reason, "handoff_mode": self.handoff_mode,
            "prefill_start_ms": self.prefill_start_ms, "prefill_end_ms": self.prefill_end_ms,
            "first_token_ms": self.first_token_ms if not failed else NAN,
            "finish_ms": self.finish_ms if not failed else NAN,
            **lat,
            "max_itl_ms": max(self.max_itl_ms, 0 if math.isnan(self.handoff_stall_ms) else self.handoff_stall_ms),
            "schedule_lag_ms": 0.0,
            "wan_kv_ms": self.wan_kv_ms,
            "relay_tokens": self.relay_tokens, "main_tokens": self.output_tokens - self.relay_tokens,
            "handoff_ms": handoff_ms, "handoff_stall_ms": self.handoff_stall_ms, "relay_busy_ms": relay_busy,
            "rdma_kv_bytes": self.rdma_kv_bytes, "wan_kv_bytes": self.wan_kv_bytes,
            "wan_token_id_bytes": self.wan_token_id_bytes, "wan_kv_bytes_saved": self.wan_kv_bytes_saved,
            "transfer_aborted": self.transfer_aborted, "transfer_abort_reason": self.transfer_abort_reason,
            "singular_flow": self.singular_flow,
            "failed": failed, "failure_reason": self.failure_reason or ("unfinished" if failed else ""),
        }


def records_frame(reqs: list[SimRequest]) -> pd.DataFrame:
    """The records of finished simulations, built column by column: a dict per request and
    pandas inferring types row by row took seconds for 100,000 requests.

    Each derived column is the same float arithmetic as SimRequest.record() (derive_latencies),
    done element-wise by numpy, so the values are bit-identical (tests/test_sim_units.py checks)."""
    def column(name: str, dtype: str = "float64"):
        """One attribute of every request, straight into numpy (strings stay a list)."""
        values = map(attrgetter(name), reqs)
        if dtype in ("int64", "float64", "bool"):
            return np.fromiter(values, dtype=dtype, count=len(reqs))
        return list(values)

    f64 = {n: column(n) for n in (
        "arrival_ms", "prefill_end_ms", "first_token_ms", "finish_ms", "max_itl_ms", "handoff_stall_ms",
        "md_first_ms", "handoff_start_ms", "relay_start_ms", "relay_end_ms")}
    out_tokens = column("output_tokens", "int64")
    reasons = column("failure_reason", "string")
    failed = ~column("done", "bool") | np.array([r != "" for r in reasons], dtype=bool)

    arrival, first, finish = f64["arrival_ms"], f64["first_token_ms"], f64["finish_ms"]
    prefill_end = np.where(f64["prefill_end_ms"] >= 0, f64["prefill_end_ms"], NAN)
    ttft, e2e = np.where(failed, NAN, first - arrival), np.where(failed, NAN, finish - arrival)
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(failed | (out_tokens < 2), NAN, (e2e - ttft) / (out_tokens - 1))
    stall = f64["handoff_stall_ms"]
    stall_or_0 = np.where(np.isnan(stall), 0.0, stall)
    max_itl = np.where(stall_or_0 > f64["max_itl_ms"], stall_or_0, f64["max_itl_ms"])  # max(), first on ties
    relay_start = f64["relay_start_ms"]
    derived = {
        "first_token_ms": np.where(failed, NAN, first), "finish_ms": np.where(failed, NAN, finish),
        "ttft_ms": ttft, "e2e_ms": e2e, "tpot_ms": tpot, "kv_wait_ms": np.where(failed, NAN, first - prefill_end),
        "max_itl_ms": max_itl, "schedule_lag_ms": np.zeros(len(reqs)),
        "main_tokens": out_tokens - column("relay_tokens", "int64"),
        "handoff_ms": f64["md_first_ms"] - f64["handoff_start_ms"],
        "relay_busy_ms": np.where(np.isnan(relay_start), 0.0, f64["relay_end_ms"] - relay_start),
        "failed": failed,
        "failure_reason": [r or ("unfinished" if f else "") for r, f in zip(reasons, failed.tolist())],
    }
    frame = {n: derived[n] if n in derived else column(n, RECORD_FIELDS[n]) for n in RECORD_FIELDS}
    return pd.DataFrame(frame).astype(RECORD_FIELDS)

