"""Benchmarks (pytest-benchmark): `make bench`. Never wall-clock asserts in tests."""

from pathlib import Path

from pddbench.workload.stats import trace_stats
from pddbench.workload.trace import load_trace

MOONCAKE = Path(__file__).resolve().parents[1] / "traces" / "mooncake" / "synthetic_trace.jsonl"


def test_parse_and_analyse_mooncake(benchmark):
    result = benchmark(lambda: trace_stats(load_trace(MOONCAKE)))
    assert result["requests"] == 3993
