"""Capacity is a steady-state figure: warm-up left out, a rising latency trend fails a probe, the
result names what bound it and warns on short traces (pddbench/metrics/steady.py, capacity.py)."""

import numpy as np
import pandas as pd
import pytest

from pddbench.measure.capacity import capacity_search
from pddbench.metrics.steady import WARMUP_FRACTION, steady_state
from pddbench.metrics.summary import sla_holds
from pddbench.schema.scenario import load_scenario
from tests.conftest import REPO

PAPER = REPO / "scenarios" / "paper"
SLA = dict(ttft_ms=5000.0, tpot_ms=100.0, percentile=90.0)


def _records(ttft, tpot=None, seconds_apart=0.1) -> pd.DataFrame:
    n = len(ttft)
    return pd.DataFrame({"arrival_ms": np.arange(n) * seconds_apart * 1000, "ttft_ms": np.asarray(ttft, float),
                         "tpot_ms": np.full(n, 50.0) if tpot is None else np.asarray(tpot, float),
                         "failed": np.zeros(n, bool)})


def test_rising_ttft_is_unstable_even_with_p90_under_the_sla():
    df = _records(np.linspace(100, 4500, 600))  # overloaded: the queue grows, yet every TTFT < 5 s
    assert sla_holds(df, SLA["ttft_ms"], SLA["tpot_ms"], SLA["percentile"])
    st = steady_state(df, **SLA)
    assert st["sla_holds"] and st["stable"] is False and st["unstable_on"] == ["ttft"] and not st["holds"]
    flat = steady_state(_records(np.full(600, 300.0) + np.sin(np.arange(600)) * 50), **SLA)
    assert flat["stable"] and flat["holds"]


def test_small_rises_below_the_floor_are_noise():
    # +100% but only 200 ms of a 5 s bound: below the floor (10% of the bound), not unstable
    st = steady_state(_records(np.r_[np.full(400, 200.0), np.full(200, 400.0)]), **SLA)
    assert st["stable"] and st["holds"]


def test_rising_failures_and_tpot_count_as_instability():
    df = _records(np.full(600, 300.0), tpot=np.linspace(20, 95, 600))
    assert steady_state(df, **SLA)["unstable_on"] == ["tpot"]
    df = _records(np.full(600, 300.0))
    df.loc[450:, "failed"] = True  # the last quarter fails: median of the last third is a failure
    st = steady_state(df, **SLA)
    assert "ttft" in st["unstable_on"] and st["trend"]["ttft"]["median_last_ms"] is None


def test_warmup_exclusion_only_drops_the_first_share_of_arrivals():
    n = 1000
    ttft = np.full(n, 300.0)
    skip = int(n * WARMUP_FRACTION)
    ttft[:skip] = 9000.0  # cold start: every warm-up request misses the bound
    ttft[skip] = 9000.0   # the first request of the window still counts
    df = _records(ttft).sample(frac=1.0, random_state=1)  # record order does not matter, arrival order does
    assert not sla_holds(df, SLA["ttft_ms"], SLA["tpot_ms"], SLA["percentile"])  # whole run: 84.9% within
    st = steady_state(df, **SLA)
    assert st["window"] == {"requests": n - skip, "warmup_requests": skip,
                            "first_arrival_ms": skip * 100.0, "last_arrival_ms": (n - 1) * 100.0}
    assert st["ttft_ok_fraction"] == pytest.approx((n - skip - 1) / (n - skip))
    assert st["sla_holds"] and st["holds"]


def _fake_summary(rate: float) -> dict:
    """A deployment that is flat to 10 req/s, queues slowly (rising, still under the SLA) to
    14 req/s and breaks the TTFT bound above."""
    n = 600
    if rate <= 10:
        ttft = np.full(n, 300.0)
    elif rate <= 14:
        ttft = np.linspace(300, 4000, n)
    else:
        ttft = np.linspace(3000, 20000, n)
    df = _records(ttft, seconds_apart=1 / rate)
    st = steady_state(df, **SLA)
    return {"offered_rps": rate, "sla_holds": sla_holds(df, 5000.0, 100.0, 90.0), "steady": st,
            "slo_attainment": 1.0, "ttft_ms": {"p90": float(np.percentile(ttft, 90))}, "tpot_ms": {"p90": 50.0},
            "goodput_rps": rate, "cost_per_hour": 10.0, "requests_total": n}


def test_an_unsteady_probe_fails_and_the_result_names_instability():
    sc = load_scenario(PAPER / "same-dc-pd.yaml")  # base rate 4 req/s

    def probe_many(scales):
        return [_fake_summary(4.0 * s) for s in scales]

    res, _ = capacity_search(sc, iterations=8, probe_many=probe_many, min_requests=1000)
    assert 9.9 <= res["throughput_within_sla_rps"] <= 10.0  # not ~14: the rising probes failed
    assert res["bound_by"] == "instability" and res["bound_by_all"] == ["instability"]
    unsteady = [p for p in res["probes"] if p["whole_run_sla_holds"] and not p["sla_holds"]]
    assert unsteady and all(p["failed_on"] == ["instability"] for p in unsteady)
    assert res["steady_window"]["requests"] == 600 - int(600 * WARMUP_FRACTION)
    assert res["warnings"] and "600 requests" in res["warnings"][0]
    assert capacity_search(sc, iterations=8, probe_many=probe_many, min_requests=600)[0]["warnings"] == []


def test_ttft_binds_a_real_search_and_minus_j_1_is_deterministic():
    sc = load_scenario(PAPER / "same-dc-pd.yaml", ["workload.synth.requests=300"])
    a, _ = capacity_search(sc, iterations=3)
    b, _ = capacity_search(sc, iterations=3)
    assert a == b
    assert a["bound_by"] in ("ttft", "tpot", "instability") and a["bound_by"] in a["bound_by_all"]
    assert a["criterion"] == "steady" and a["requests"] == 300 and a["warnings"]
    best = max((p for p in a["probes"] if p["sla_holds"]), key=lambda p: p["offered_rps"])
    assert best["offered_rps"] == a["throughput_within_sla_rps"]
