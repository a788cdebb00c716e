import hashlib
import math
import random

import numpy as np
import pytest
from pydantic import ValidationError

from pddbench.workload.stats import trace_stats
from pddbench.workload.synth import MOONCAKE_LIKE_HIST, PDD_LIKE_HIST, SynthConfig, synthesize
from pddbench.workload.trace import write_trace
from tests.conftest import run_cli

TARGETS = [
    PDD_LIKE_HIST,
    MOONCAKE_LIKE_HIST,
    (0.30, 0.10, 0.10, 0.10, 0.10, 0.10, 0.20),
    (0.05, 0.0, 0.0, 0.05, 0.10, 0.30, 0.50),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("seed", [0, 11])
def test_realised_histogram_within_3pp(target, seed):
    cfg = SynthConfig(requests=1500, seed=seed, target_hist=target,
                      singular_share=min(0.035, target[0]))
    got = trace_stats(synthesize(cfg))["hit_rate_histogram"]["fraction"]
    assert max(abs(g - t) for g, t in zip(got, target)) <= 0.03, got


def test_pdd_like_mean_above_088():
    s = trace_stats(synthesize(SynthConfig(requests=2000, seed=3)))
    assert s["mean_hit_rate"] > 0.88


def test_agentic_shape():
    reqs = synthesize(SynthConfig(requests=3000, seed=5))
    out = np.array([r.output_length for r in reqs])
    assert 0.6 < (out < 500).mean() < 0.85          # "perhaps 70%" under 500 tokens
    singular = [r for r in reqs if r.session_id is None]
    assert 0.02 < len(singular) / len(reqs) < 0.05  # default 3.5%
    assert all(r.input_length >= 32768 and r.output_length <= 8 for r in singular)
    by_session: dict[int, list] = {}
    for r in reqs:
        if r.session_id is not None:
            by_session.setdefault(r.session_id, []).append(r)
    long_sessions = [v for v in by_session.values() if len(v) >= 5]
    assert len(long_sessions) > 20
    # contexts grow between consecutive turns far more often than they shrink (compaction)
    grows = sum(b.input_length > a.input_length for v in long_sessions for a, b in zip(v, v[1:]))
    shrinks = sum(b.input_length < a.input_length for v in long_sessions for a, b in zip(v, v[1:]))
    assert grows > 4 * shrinks > 0
    assert [r.turn for r in long_sessions[0]] == list(range(len(long_sessions[0])))
    ts = [r.timestamp_ms for r in reqs]
    assert ts == sorted(ts)


def test_same_seed_same_bytes(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert run_cli("trace", "synth", "--requests", "300", "--seed", "4", "--out", a).returncode == 0
    assert run_cli("trace", "synth", "--requests", "300", "--seed", "4", "--out", b).returncode == 0
    assert hashlib.sha256(a.read_bytes()).digest() == hashlib.sha256(b.read_bytes()).digest()
    write_trace(tmp_path / "c.jsonl", synthesize(SynthConfig(requests=300, seed=5)))
    assert (tmp_path / "c.jsonl").read_bytes() != a.read_bytes()


def test_generated_trace_passes_strict_loader(tmp_path):
    from pddbench.workload.trace import load_trace

    path = tmp_path / "g.jsonl"
    write_trace(path, synthesize(SynthConfig(requests=500, seed=1)))
    assert len(load_trace(path)) == 500


@pytest.mark.parametrize("kwargs", [
    {"target_hist": (0.5, 0.5)},
    {"target_hist": (0.5, 0.5, 0.5, 0, 0, 0, 0)},
    {"target_hist": (0.02, 0.1, 0.1, 0.1, 0.1, 0.28, 0.3), "singular_share": 0.035},
])
def test_bad_config_refused(kwargs):
    with pytest.raises(ValidationError):
        SynthConfig(**kwargs)


def test_cli_bad_hist_is_clear():
    res = run_cli("trace", "synth", "--target-hist", "a,b")
    assert res.returncode == 2 and "--target-hist" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize("seed", [0, 1, 12345])
def test_lean_draws_are_the_stdlib_draws(seed):
    """The generator's written-out draws give what random.Random's give, and leave the same stream."""
    from pddbench.workload.synth import _Draws

    ours, std = _Draws(seed), random.Random(seed)
    for i in range(3000):
        lo, hi = i % 17, i % 17 + (i * 7919) % 100_000
        assert ours.randint(lo, hi) == std.randint(lo, hi)
        mu, sigma = math.log(1 + i % 300), 0.1 + (i % 11) / 5
        assert ours.lognormvariate(mu, sigma) == std.lognormvariate(mu, sigma)
        pop = list(range(1 + i % 7))
        weights = [0.05 + ((i * 31 + j) % 13) / 10 for j in pop]
        assert ours.weighted_choice(pop, weights) == std.choices(pop, weights=weights)[0]
    assert ours.random() == std.random()
    with pytest.raises(ValueError):
        ours.randint(5, 4)
