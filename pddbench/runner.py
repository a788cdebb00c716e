"""`pddbench run`: one scenario -> one run folder (scenario, records, summary, figures, log)."""

from __future__ import annotations

import time
from pathlib import Path

import yaml
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from pddbench.errors import UserError
from pddbench.io import claim_out_folder, new_run_dir, write_json, write_text
from pddbench.metrics.summary import summarize
from pddbench.records import write_records
from pddbench.scenario import Scenario, load_scenario

console = Console(stderr=True)


def prepare_run_dir(sc: Scenario, results_root: Path, out: Path | None) -> Path:
    return new_run_dir(results_root, sc.name) if out is None else claim_out_folder(out)


def simulate_summary(sc: Scenario, show_progress: bool = False, reqs=None):
    """Simulate and summarise; returns (records, summary)."""
    from pddbench.sim.run import simulate

    started = time.perf_counter()  # wall time of the simulation itself, reported, never simulated
    if show_progress:
        with Progress(TextColumn("[bold]simulating[/] {task.description}"), BarColumn(),
                      TextColumn("{task.percentage:>3.0f}% of arrivals"), TimeElapsedColumn(),
                      console=console, transient=True) as bar:
            task = bar.add_task(sc.name, total=1.0)
            records, facts = simulate(
                sc, reqs, on_progress=lambda t, end: bar.update(task, completed=min(1.0, t / end) if end else 1.0))
    else:
        records, facts = simulate(sc, reqs)
    wall_s = time.perf_counter() - started
    summary = summarize(records, deployment=sc.deployment.kind, sla_ttft_ms=sc.sla.ttft_ms,
                        sla_tpot_ms=sc.sla.tpot_ms, sla_percentile_q=sc.sla.percentile,
                        cost_per_hour=facts["cost_per_hour"])
    summary.update({
        "scenario": sc.name, "runtime": "sim", "seed": sc.seed,
        "offered_rps": None, "sim_events": facts["sim_events"], "instances": facts["instances"],
        "interrupted": facts["interrupted"],
        "sim_wall_s": round(wall_s, 3),  # the one field that differs between identical runs
    })
    n = summary["requests_total"]
    span_s = (records["arrival_ms"].max() - records["arrival_ms"].min()) / 1000 if n > 1 else 0
    summary["offered_rps"] = round((n - 1) / span_s, 6) if span_s else None
    return records, summary


def run_scenario(path: Path, overrides: list[str], results_root: Path, out: Path | None = None) -> Path:
    sc = load_scenario(path, overrides)
    if sc.deployment is None:
        raise UserError(f"{path}: the scenario has no deployment; add deployment.kind "
                        "(colocated | same_dc_pd | cross_dc_pd | pdd) and, to simulate, its pools")
    run_dir = prepare_run_dir(sc, results_root, out)
    write_text(run_dir / "scenario.yaml", yaml.safe_dump(sc.model_dump(mode="json"), sort_keys=False))
    if sc.runtime == "live":
        from pddbench.live.deploy import run_live

        run_live(sc, run_dir)
        write_text(run_dir / "run.log", f"live scenario {path} overrides {overrides}\n")
        return run_dir
    log = [f"scenario {path} overrides {overrides}", f"run folder {run_dir}"]
    try:
        records, summary = simulate_summary(sc, show_progress=True)
    except KeyboardInterrupt:
        write_text(run_dir / "run.log", "\n".join(log + ["interrupted before any record was kept"]) + "\n")
        raise
    write_records(run_dir / "records.parquet", records)
    write_json(run_dir / "summary.json", summary)
    from pddbench.report.run_figures import run_figures

    run_figures(records, summary, run_dir)
    log.append(f"{summary['requests_completed']} completed, {summary['requests_failed']} failed, "
               f"{summary['sim_events']} events in {summary['sim_wall_s']} s")
    write_text(run_dir / "run.log", "\n".join(log) + "\n")
    if summary["interrupted"]:
        raise KeyboardInterrupt
    return run_dir


def sim_speed(scenario: Path | str, requests: int, overrides: list[str]) -> dict:
    """`pddbench sim-speed`: simulate `requests` generated requests; simulated requests per wall-second."""
    sc = load_scenario(scenario, [f"workload.synth.requests={requests}", "workload.source=synth", *overrides])
    _, s = simulate_summary(sc, show_progress=True)
    rate = s["requests_total"] / s["sim_wall_s"] if s["sim_wall_s"] else float("inf")
    return {"scenario": sc.name, "requests": s["requests_total"], "sim_wall_s": s["sim_wall_s"],
            "sim_events": s["sim_events"], "requests_per_wall_s": round(rate, 1)}
