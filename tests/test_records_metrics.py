import math

import pandas as pd
import pytest

from pddbench.metrics.percentiles import distribution
from pddbench.metrics.summary import meets_slo, sla_holds, summarize
from pddbench.metrics.records import RECORD_FIELDS, read_records, to_frame, write_records


def row(i, arrival, ttft, e2e, out=11, failed=False, relay=0, wan=0):
    return {
        "request_id": i, "session_id": -1, "turn": -1, "arrival_ms": arrival, "input_tokens": 1000,
        "output_tokens": out, "p_cached_tokens": 500, "decode_cached_tokens": 0, "pipeline": "p_d",
        "offload_reason": "", "handoff_mode": "none", "prefill_start_ms": arrival, "prefill_end_ms": arrival + ttft / 2,
        "first_token_ms": arrival + ttft, "finish_ms": arrival + e2e, "ttft_ms": ttft, "e2e_ms": e2e,
        "tpot_ms": (e2e - ttft) / (out - 1) if out > 1 else math.nan, "max_itl_ms": 5.0,
        "schedule_lag_ms": 0.0, "kv_wait_ms": 1.0, "wan_kv_ms": math.nan, "relay_tokens": relay, "main_tokens": out - relay,
        "handoff_ms": math.nan, "handoff_stall_ms": math.nan, "relay_busy_ms": 0.0,
        "rdma_kv_bytes": 10, "wan_kv_bytes": wan, "wan_token_id_bytes": 0, "wan_kv_bytes_saved": 0,
        "transfer_aborted": False, "transfer_abort_reason": "", "singular_flow": False, "failed": failed,
        "failure_reason": "timeout" if failed else "",
    }


def test_parquet_round_trip(tmp_path):
    df = to_frame([row(0, 0, 100, 200), row(1, 10, 50, 60, failed=True)])
    write_records(tmp_path / "r.parquet", df)
    back = read_records(tmp_path / "r.parquet")
    assert list(back.columns) == list(RECORD_FIELDS)
    pd.testing.assert_frame_equal(df, back)


def test_summary_goodput_and_sla():
    # 10 requests arriving 100 ms apart; TTFT 100..1000 ms; TPOT 10 ms; one failed.
    rows = [row(i, i * 100.0, 100.0 * (i + 1), 100.0 * (i + 1) + 100, relay=2, wan=7) for i in range(9)]
    rows.append(row(9, 900.0, 0, 0, failed=True))
    df = to_frame(rows)
    s = summarize(df, deployment="x", sla_ttft_ms=500, sla_tpot_ms=20, sla_percentile_q=90)
    assert s["requests_completed"] == 9 and s["requests_failed"] == 1
    assert s["failure_reasons"] == {"timeout": 1}
    # 5 of 10 meet TTFT <= 500; duration = first arrival (0) -> last finish (800+900+100 = 1800 ms)
    assert s["slo_attainment"] == 0.5
    assert s["duration_s"] == pytest.approx(1.8)
    assert s["goodput_rps"] == pytest.approx(5 / 1.8, rel=1e-5)
    assert s["ttft_ms"]["p50"] == 500.0
    assert s["relay_token_share"] == pytest.approx(18 / 99)
    assert s["wan_kv_bytes"] == 63
    assert s["sla_holds"] is False
    assert sla_holds(df, 800, 20, 80) is True       # 8 of 10 within 800 ms
    assert sla_holds(df, 800, 20, 90) is False
    assert sla_holds(df, 900, 20, 90) is True       # 9 of 10: the failed one counts as a miss
    assert sla_holds(df, 900, 20, 91) is False


def test_meets_slo_treats_single_token_tpot_as_zero():
    df = to_frame([row(0, 0, 100, 100, out=1)])
    assert meets_slo(df, 200, 1).tolist() == [True]


def test_distribution_empty_and_values():
    assert distribution([])["p50"] is None
    d = distribution([1, 2, 3, 4])
    assert (d["p50"], d["max"], d["mean"]) == (2.5, 4, 2.5)
