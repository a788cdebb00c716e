"""The main job (`make run`): analyse the shipped and generated traces, then run the paper's
deployments in the simulator and compare them. Everything lands in one new run folder."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from pddbench.io import new_run_dir, write_json
from pddbench.report.trace_figures import bucket_mix_over_time, hit_rate_cdf
from pddbench.workload.stats import public, trace_stats
from pddbench.workload.synth import MOONCAKE_LIKE_HIST, PDD_LIKE_HIST, SynthConfig, synthesize
from pddbench.workload.trace import load_trace, write_trace

REPO = Path(__file__).resolve().parents[1]
console = Console(stderr=True)


def analyse_traces(out: Path) -> dict:
    traces = {"mooncake-synthetic": load_trace(REPO / "traces" / "mooncake" / "synthetic_trace.jsonl")}
    for name, hist in (("agentic-pdd-like", PDD_LIKE_HIST), ("agentic-mooncake-like", MOONCAKE_LIKE_HIST)):
        reqs = synthesize(SynthConfig(requests=4000, seed=0, target_hist=hist))
        write_trace(out / "traces" / f"{name}.jsonl", reqs)
        traces[name] = reqs
    overview = {}
    for name, reqs in traces.items():
        stats = trace_stats(reqs)
        folder = out / "traces" / name
        write_json(folder / "stats.json", public(stats))
        bucket_mix_over_time(stats, folder / "hit_mix_over_time.png")
        hit_rate_cdf(stats["_per_request_hit_rate"], folder / "hit_rate_cdf.png", label=name)
        overview[name] = {k: stats[k] for k in ("requests", "mean_hit_rate", "token_weighted_hit_rate")}
        overview[name]["hit_rate_histogram"] = stats["hit_rate_histogram"]["fraction"]
        console.print(f"  trace {name}: {stats['requests']} requests, mean hit {stats['mean_hit_rate']:.3f}")
    return overview


def reproduce(results_root: Path) -> Path:
    out = new_run_dir(results_root, "reproduce")
    console.print(f"[bold]pddbench reproduce[/] -> {out}")
    overview = {"traces": analyse_traces(out)}
    write_json(out / "overview.json", overview)
    return out
