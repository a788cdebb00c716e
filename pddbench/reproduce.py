"""The main job (`make run`): analyse the shipped and generated traces, run the paper's
deployments in the simulator, compare them, search their capacity, and put the simulated figures
beside the article's. Everything lands in one new run folder."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from pddbench.io import new_run_dir, write_json
from pddbench.shipped import MOONCAKE_TRACE, SCENARIOS
from pddbench.report.trace_figures import bucket_mix_over_time, hit_rate_cdf
from pddbench.workload.stats import public, trace_stats
from pddbench.workload.synth import MOONCAKE_LIKE_HIST, PDD_LIKE_HIST, SynthConfig, synthesize
from pddbench.workload.trace import load_trace, write_trace

PAPER = SCENARIOS / "paper"
console = Console(stderr=True)

# What the article reported (pdd-brief.md), beside which the simulated figures are put.
ARTICLE = {
    "ttft_change_vs_baseline": -0.515,
    "throughput_within_sla_change": 0.278,
    "bcr_change_up_to": 0.375,
    "cost_change": "-3.5% .. -7.1%",
    "relay_token_share_64k_1k_90hit": 0.062,
}


def analyse_traces(out: Path) -> dict:
    traces = {"mooncake-synthetic": load_trace(MOONCAKE_TRACE)}
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


def _change(new: float | None, old: float | None) -> float | None:
    return None if not new or not old else round(new / old - 1, 4)


def _paper_tasks(out: Path, names: list[str], searched: list[str]) -> list[tuple[str, str, "Payload"]]:
    """The searches (longest first) and the runs, as executor tasks: (what, name, payload)."""
    import yaml

    from pddbench.scenario import load_scenario
    from pddbench.sweep.payload import Payload, make_payload, ship_scenario

    tasks = []
    for name in searched:
        data, blobs = ship_scenario(load_scenario(PAPER / f"{name}.yaml"))
        tasks.append(("capacity", name, make_payload({"kind": "capacity", "scenario": data, "iterations": 7}, blobs)))
    for name in names:
        path, sc = PAPER / f"{name}.yaml", load_scenario(PAPER / f"{name}.yaml")
        data, blobs = ship_scenario(sc)
        task = {"kind": "run_folder", "scenario": data,
                "scenario_yaml": yaml.safe_dump(sc.model_dump(mode="json"), sort_keys=False),
                "log": [f"scenario {path} overrides []", f"run folder {out / 'runs' / name}"]}
        tasks.append(("run", name, make_payload(task, blobs)))
    return tasks


def _run_paper_tasks(out: Path, names: list[str], searched: list[str], jobs: int | None) -> tuple[dict, dict]:
    """Every simulation and search through one executor (-j): run folders and capacity results."""
    import base64
    import json

    from pddbench.io import atomic_path, run_folder
    from pddbench.sweep.executors import make_executor

    tasks = _paper_tasks(out, names, searched)
    runs, capacity = {}, {}
    with make_executor(jobs, None, tasks=len(tasks)) as ex:
        for i, text in ex.run([p for _, _, p in tasks]):
            what, name, _ = tasks[i]
            res = json.loads(text)
            if res["status"] != "ok":
                raise RuntimeError(f"{what} {name} failed: {res['error']}")
            if what == "capacity":
                capacity[name] = res["capacity"]
                console.print(f"  capacity {name}: {capacity[name]['throughput_within_sla_rps']:.2f} req/s")
                continue
            with run_folder(out / "runs" / name, out, name) as folder:
                for fname, b64 in res["files"].items():
                    with atomic_path(folder.path / fname) as tmp:
                        tmp.write_bytes(base64.b64decode(b64))
            runs[name] = folder.path
            console.print(f"  simulated {name}")
    return runs, {n: capacity[n] for n in searched}


def simulate_paper(out: Path, jobs: int | None = None) -> dict:
    from pddbench.compare import compare_runs

    names = ["same-dc-pd", "cross-dc-pd", "pdd", "pdd-one-shot", "pdd-catch-up", "pdd-relay-only-ablation",
             "pdd-no-singular-filter", "pdd-64k-1k-90hit"]
    runs, capacity = _run_paper_tasks(out, names, ["same-dc-pd", "cross-dc-pd", "pdd"], jobs)
    runs = {n: runs[n] for n in names}
    compare_runs([runs[n] for n in ("same-dc-pd", "cross-dc-pd", "pdd")], out / "compare-deployments")
    compare_runs([runs[n] for n in ("pdd-one-shot", "pdd-catch-up", "pdd")], out / "compare-handoff-modes")
    compare_runs([runs[n] for n in ("pdd", "pdd-relay-only-ablation", "pdd-no-singular-filter")],
                 out / "compare-ablations")
    write_json(out / "capacity.json", capacity)

    import json

    s = {n: json.loads((runs[n] / "summary.json").read_text()) for n in names}
    base, pdd, cross = s["same-dc-pd"], s["pdd"], s["cross-dc-pd"]
    simulated = {
        "ttft_mean_change_vs_same_dc": _change(pdd["ttft_ms"]["mean"], base["ttft_ms"]["mean"]),
        "ttft_p90_change_vs_same_dc": _change(pdd["ttft_ms"]["p90"], base["ttft_ms"]["p90"]),
        "ttft_mean_change_vs_cross_dc": _change(pdd["ttft_ms"]["mean"], cross["ttft_ms"]["mean"]),
        "ttft_p90_change_vs_cross_dc": _change(pdd["ttft_ms"]["p90"], cross["ttft_ms"]["p90"]),
        "throughput_within_sla_change": _change(capacity["pdd"]["throughput_within_sla_rps"],
                                                capacity["same-dc-pd"]["throughput_within_sla_rps"]),
        "bcr_change": _change(capacity["pdd"]["bcr"], capacity["same-dc-pd"]["bcr"]),
        "cost_change": _change(pdd["cost_per_hour"], base["cost_per_hour"]),
        "relay_token_share_64k_1k_90hit": s["pdd-64k-1k-90hit"]["relay_token_share"],
        "relay_only_ablation_hit_rates": {"p": s["pdd-relay-only-ablation"]["p_hit_rate"],
                                          "decode": s["pdd-relay-only-ablation"]["decode_hit_rate"]},
    }
    return {"article": ARTICLE, "simulated": simulated, "runs": {n: str(p.relative_to(out)) for n, p in runs.items()}}


def reproduce(results_root: Path, jobs: int | None = None) -> Path:
    """`jobs`: worker processes for the simulations and searches (None: all cores)."""
    out = new_run_dir(results_root, "reproduce")
    console.print(f"[bold]pddbench reproduce[/] -> {out}")
    overview = {"traces": analyse_traces(out)}
    overview["paper"] = simulate_paper(out, jobs)
    write_json(out / "overview.json", overview)
    from pddbench.report.tables import print_article_vs_sim

    print_article_vs_sim(overview["paper"])
    return out
