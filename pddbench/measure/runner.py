"""`pddbench run`: one scenario -> one run folder (scenario, records, summary, figures, log)."""

from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import yaml
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from pddbench.core.errors import InputError, UserError, is_interrupt
from pddbench.core.io import check_out_options, check_out_place, run_folder, write_json, write_text
from pddbench.metrics.summary import summarize
from pddbench.metrics.records import write_records
from pddbench.schema.scenario import Scenario, load_scenario

console = Console(stderr=True)


def simulate_summary(sc: Scenario, show_progress: bool = False, reqs=None):
    """Simulate and summarise; returns (records, summary)."""
    from pddbench.core.provenance import provenance
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
        "offered_rps": None, "sim_events": facts["sim_events"], "sim_events_by_kind": facts["sim_events_by_kind"],
        "instances": facts["instances"],
        "interrupted": facts["interrupted"],
        "sim_wall_s": round(wall_s, 3),  # with provenance, the fields that differ between identical runs
        "provenance": provenance(),
    })
    n = summary["requests_total"]
    span_s = (records["arrival_ms"].max() - records["arrival_ms"].min()) / 1000 if n > 1 else 0
    summary["offered_rps"] = round((n - 1) / span_s, 6) if span_s else None
    return records, summary


def run_scenario(path: Path, overrides: list[str], results_root: Path, out: Path | None = None) -> Path:
    check_out_options(out, results_root)
    sc = load_scenario(path, overrides)
    if sc.deployment is None:
        raise UserError(f"{path}: the scenario has no deployment; add deployment.kind "
                        "(colocated | same_dc_pd | cross_dc_pd | pdd | prfaas) and, to simulate, its pools")
    if sc.runtime == "live":
        return _run_live(sc, path, overrides, results_root, out)
    reqs = simulable_requests(sc, str(path))  # a bad trace is refused before the folder is claimed
    with run_folder(out, results_root, sc.name) as folder:
        write_text(folder.path / "scenario.yaml", yaml.safe_dump(sc.model_dump(mode="json"), sort_keys=False))
        with _naming(path):
            records, summary = simulate_summary(sc, show_progress=True, reqs=reqs)
        write_sim_run(folder.path, records, summary, [f"scenario {path} overrides {overrides}",
                                                       f"run folder {folder.path}"])
        if summary["interrupted"]:
            folder.interrupted(f"{summary['requests_total']} requests ({summary['requests_completed']} completed)")
            raise KeyboardInterrupt
    return folder.path


@contextmanager
def _naming(path: Path) -> Iterator[None]:
    """A scenario the simulator refuses (e.g. weights that do not fit) is named in the message."""
    try:
        yield
    except InputError:
        raise
    except UserError as exc:
        named = UserError(f"{path}: {exc}")
        named.exit_code = exc.exit_code  # a stalled simulation stays exit 1
        raise named from None


def simulable_requests(sc: Scenario, where: str, slowest_scale: float = 1.0) -> list:
    """The scenario's requests, refused when their arrivals (slowed down by `slowest_scale`)
    would span more simulated time than any real trace."""
    from pddbench.workload.source import workload_requests
    from pddbench.workload.trace import check_simulated_span

    reqs = workload_requests(sc)
    check_simulated_span(reqs, sc.workload.rate_scale * slowest_scale, where)
    return reqs


def write_sim_run(run_dir: Path, records, summary: dict, log: list[str]) -> None:
    write_records(run_dir / "records.parquet", records)
    write_json(run_dir / "summary.json", summary)
    from pddbench.report.run_figures import run_figures

    run_figures(records, summary, run_dir)
    log.append(f"{summary['requests_completed']} completed, {summary['requests_failed']} failed, "
               f"{summary['sim_events']} events in {summary['sim_wall_s']} s")
    if summary["interrupted"]:
        log.append("INTERRUPTED (Ctrl-C): the records, summary and figures cover the simulation up to that moment; "
                   "requests unfinished then are failed with failure_reason 'interrupted'")
    write_text(run_dir / "run.log", "\n".join(log) + "\n")


def _run_live(sc: Scenario, path: Path, overrides: list[str], results_root: Path, out: Path | None) -> Path:
    from pddbench.live.deploy import check_attached_engines, check_host_engines, check_ray_engines, run_live

    check_out_options(out, results_root)
    check_host_engines(sc)  # vLLM, cores and GPUs of the engines this host would start
    check_attached_engines(sc)  # the user's engines, checked before any folder is claimed
    check_ray_engines(sc)  # the Ray cluster that would place them, likewise
    with run_folder(out, results_root, sc.name) as folder:
        folder.keep_on_error = True  # engine logs explain a failed live run
        write_text(folder.path / "scenario.yaml", yaml.safe_dump(sc.model_dump(mode="json"), sort_keys=False))
        try:
            run_live(sc, folder.path)
        except BaseException as exc:
            if is_interrupt(exc):
                _mark_live_interrupted(folder)
            raise
        write_text(folder.path / "run.log", f"live scenario {path} overrides {overrides}\n")
    return folder.path


def _mark_live_interrupted(folder) -> None:
    import json

    try:
        summary = json.loads((folder.path / "summary.json").read_text())
    except (OSError, ValueError):
        return  # no summary: the run is discarded
    if summary.get("interrupted"):
        write_text(folder.path / "run.log", "INTERRUPTED (Ctrl-C): the live run was stopped; records and summary "
                   "cover it up to that moment\n")
        folder.interrupted(f"{summary.get('requests_total', 0)} requests")


def sim_speed(scenario: Path | str, requests: int, overrides: list[str]) -> dict:
    """`pddbench sim-speed`: simulate `requests` generated requests; simulated requests per wall-second."""
    sc = load_scenario(scenario, [f"workload.synth.requests={requests}", "workload.source=synth", *overrides])
    _, s = simulate_summary(sc, show_progress=True)
    rate = s["requests_total"] / s["sim_wall_s"] if s["sim_wall_s"] else float("inf")
    return {"scenario": sc.name, "requests": s["requests_total"], "sim_wall_s": s["sim_wall_s"],
            "sim_events": s["sim_events"], "requests_per_wall_s": round(rate, 1),
            "simulator_build": s["provenance"]["simulator_build"]}
