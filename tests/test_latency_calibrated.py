"""The calibrated prefill model on the prompt shapes live runs have (issue 16): most requests of the
live agentic trace compute a few dozen new tokens over a cached context. A line fitted by absolute
error to 128..4096-token prompts gave those a 204 ms fixed cost on the AVX2 host, where vLLM did
them in 10-50 ms, and the twin's TTFT came out twice the live one."""

from __future__ import annotations

import numpy as np
import pytest

from pddbench.live.engine_calibration import EXTEND_SHAPES, PREFILL_TOKENS, WARM_TOKENS, to_csv
from pddbench.sim.latency import Calibrated, _nnls, fit_prefill


def _cpu_like(tokens: float, cached: float) -> float:
    """A made-up CPU engine: 15 ms per step, ~1.1 ms per token, and attention that grows with the
    context (the step's attention pairs: tokens * (cached + tokens / 2))."""
    return 15.0 + 1.1 * tokens + 4e-4 * tokens * (cached + tokens / 2)


def _rows(truth, noise: float = 0.1, reps: int = 3, seed: int = 0) -> list[dict]:
    """What engine_calibration.measure writes for the shapes it measures, with multiplicative noise."""
    rng = np.random.default_rng(seed)
    shapes = [(n, 0) for n in PREFILL_TOKENS] + list(EXTEND_SHAPES) + [(WARM_TOKENS, 0)]
    rows = []
    for _ in range(reps):
        for n, cached in shapes:
            rows.append({"phase": "prefill", "tokens": n, "attn_pairs": n * (cached + n / 2), "batch": "",
                         "kv_tokens": "", "step_ms": truth(n, cached) * (1 + noise * rng.uniform(-1, 1)),
                         "cached_tokens": cached})
    for b, kv in ((1, 512), (2, 1024), (4, 2048), (8, 4096)):
        rows.append({"phase": "decode", "tokens": "", "attn_pairs": "", "batch": b, "kv_tokens": kv,
                     "step_ms": 20 + 3 * b + 1e-3 * kv, "cached_tokens": ""})
    return rows


def _model(tmp_path, rows) -> Calibrated:
    path = tmp_path / "engine_calibration.csv"
    path.write_text(to_csv(rows))
    return Calibrated.fit_csv(path)


def test_calibration_measures_the_shapes_of_the_live_trace():
    """The prompt shapes calibrated span those the live scenarios replay: sizes at and below the
    trace's smallest extends, several below its p75, the longest prompt, and extends over a cached
    context as long as the typical one."""
    from pddbench.schema.scenario import load_scenario
    from pddbench.core.shipped import SCENARIOS
    from pddbench.workload.hitrate import hit_tokens
    from pddbench.workload.source import workload_requests

    sc = load_scenario(SCENARIOS / "live" / "same-dc-pd.yaml")
    reqs = workload_requests(sc)
    cached = hit_tokens(reqs, sc.workload.block_size)
    new = np.array([r.input_length for r in reqs]) - cached
    assert min(PREFILL_TOKENS) <= np.percentile(new, 10)
    assert sum(n <= np.percentile(new, 75) for n in PREFILL_TOKENS) >= 3
    assert max(PREFILL_TOKENS) >= max(r.input_length for r in reqs)
    assert any(n <= 2 * np.median(new) and c >= np.median(cached) for n, c in EXTEND_SHAPES)
    assert all(c % 128 == 0 and c <= WARM_TOKENS for _, c in EXTEND_SHAPES)  # whole vLLM blocks of the warm context


def test_tiny_prefills_get_their_measured_time_not_a_long_prompts_intercept(tmp_path):
    m = _model(tmp_path, _rows(_cpu_like))
    # the live trace's median request: ~22 new tokens over ~1,500 cached
    assert m.prefill_ms(22, 22 * (1536 + 11)) == pytest.approx(_cpu_like(22, 1536), rel=0.15)
    assert m.prefill_ms(16, 128) == pytest.approx(_cpu_like(16, 0), rel=0.15)
    assert 5 < m.prefill_ms(1, 0.5) < 30      # the fixed cost: 15 ms, not hundreds
    for n in PREFILL_TOKENS:
        assert m.prefill_ms(n, n * n / 2) == pytest.approx(_cpu_like(n, 0), rel=0.15), n
    for n, c in EXTEND_SHAPES:
        assert m.prefill_ms(n, n * (c + n / 2)) == pytest.approx(_cpu_like(n, c), rel=0.15), (n, c)
    # the former model on the former shapes (one line, absolute least squares, 128..4096 tokens)
    # puts a fixed cost far from 15 ms and misses the median request by more than half
    old = [r for r in _rows(_cpu_like) if r["phase"] == "prefill" and r["tokens"] >= 128 and not r["cached_tokens"]]
    x = np.array([[1, r["tokens"], r["attn_pairs"]] for r in old], dtype=float)
    coef = np.linalg.lstsq(x, np.array([r["step_ms"] for r in old]), rcond=None)[0]
    line = coef @ [1, 22, 22 * (1536 + 11)]
    assert abs(line - _cpu_like(22, 1536)) > 0.5 * _cpu_like(22, 1536)


def test_a_fixed_cost_of_hundreds_of_ms_is_kept_when_measured(tmp_path):
    # the fit follows what is measured: an engine that does take 200 ms per step gets 200 ms
    m = _model(tmp_path, _rows(lambda n, c: 200 + 0.5 * n))
    assert m.prefill_ms(16, 128) == pytest.approx(208, rel=0.1)
    assert m.prefill_ms(4096, 4096 * 2048) == pytest.approx(200 + 2048, rel=0.1)


def test_prefill_never_gets_cheaper_with_more_tokens(tmp_path):
    # noisy, even non-monotone medians: the fitted curve still rises with tokens and context
    m = _model(tmp_path, _rows(_cpu_like, noise=0.4, seed=3))
    ts = np.arange(1, 8192, 7)
    ms = [m.prefill_ms(int(t), 0.0) for t in ts]
    assert all(b >= a for a, b in zip(ms, ms[1:]))
    assert m.prefill_attn_ms >= 0 and all(s >= 0 for s in m.prefill_slopes) and m.prefill_at_breaks[0] >= 0
    assert m.prefill_ms(16, 16 * 4096) >= m.prefill_ms(16, 128)


def test_linear_model_and_extrapolation():
    m = Calibrated.linear((5.0, 0.1, 2e-6), (3.0, 0.2, 1e-4))
    assert m.prefill_ms(2000, 2e6) == pytest.approx(5 + 200 + 4)
    # past the largest measured size the last segment's slope continues
    edges, values, slopes, c = fit_prefill([(t, 0.0, 10 + 2.0 * t) for t in (100, 200, 400)])
    assert edges == (0.0, 200.0) and slopes == pytest.approx((2.0, 2.0)) and c == pytest.approx(0.0, abs=1e-9)
    fitted = Calibrated(edges, values, slopes, c, (1.0, 0.0, 0.0))
    assert fitted.prefill_ms(1000, 0) == pytest.approx(2010)


def test_nnls_matches_the_constrained_optimum():
    rng = np.random.default_rng(1)
    a = rng.uniform(0, 1, (30, 4)) * [1, 10, 1e3, 1e6]
    x_true = np.array([2.0, 0.0, 0.5, 0.0])
    b = a @ x_true + rng.normal(0, 1e-3, 30)
    x = _nnls(a, b)
    assert (x >= 0).all()
    assert x == pytest.approx(x_true, abs=1e-3)
    # a negative unconstrained optimum is clipped to 0 and the rest refitted
    b2 = a @ np.array([1.0, -0.5, 0.1, 0.0])
    x2 = _nnls(a, b2)
    assert (x2 >= 0).all() and x2[1] == 0.0
