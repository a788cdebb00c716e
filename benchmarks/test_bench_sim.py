"""Simulator benchmarks: `make bench`. `pddbench sim-speed` prints simulated requests per wall-second."""

from pathlib import Path

from pddbench.cache import PrefixCache
from pddbench.measure.runner import simulate_summary
from pddbench.schema.scenario import load_scenario
from pddbench.sim.engine import EventLoop
from pddbench.workload.trace import load_trace

REPO = Path(__file__).resolve().parents[1]
MOONCAKE = REPO / "traces" / "mooncake" / "synthetic_trace.jsonl"


def test_pdd_on_mooncake_trace(benchmark):
    sc = load_scenario(REPO / "scenarios" / "paper" / "pdd.yaml", [f"workload.trace={MOONCAKE}", "workload.source=trace"])
    reqs = load_trace(MOONCAKE)
    _, s = benchmark(lambda: simulate_summary(sc, reqs=reqs))
    assert s["requests_completed"] == 3993


def test_event_loop_throughput(benchmark):
    def run():
        loop = EventLoop()
        n = [0]

        def tick():
            n[0] += 1
            if n[0] < 100_000:
                loop.after(1.0, tick)
        loop.at(0.0, tick)
        loop.run()
        return n[0]
    assert benchmark(run) == 100_000


def test_prefix_cache_replay(benchmark):
    reqs = load_trace(MOONCAKE)

    def run():
        cache = PrefixCache(50_000)
        return sum(cache.access(r.hash_ids) for r in reqs)
    assert benchmark(run) > 0


def test_synth_generation(benchmark):
    from pddbench.workload.synth import SynthConfig, synthesize

    reqs = benchmark(lambda: synthesize(SynthConfig(requests=10_000, seed=0)))
    assert len(reqs) == 10_000
