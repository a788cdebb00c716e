"""`pddbench sweep`: validate every point, run those not yet finished through the chosen
executor (each kept as it completes), then write points.parquet, timings.json, sweep.json,
figures and summary.md. Ctrl-C keeps what finished and marks the folder interrupted."""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from pddbench.errors import Interrupted, UserError
from pddbench.io import CLAIM, claim_out_folder, new_run_dir, release_claim, write_json, write_text
from pddbench.sweep.executors import make_executor
from pddbench.sweep.payload import make_payload
from pddbench.sweep.points import PointStore, build_table, timings, write_table
from pddbench.sweep.report import write_report
from pddbench.sweep.spec import Point, Sweep, load_sweep

console = Console(stderr=True)
INTERRUPTED = "INTERRUPTED"  # present in a sweep folder while it holds an interrupted sweep


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _resume_folder(folder: Path) -> Path:
    if not (folder / "sweep.json").is_file():
        raise UserError(f"--resume {folder}: not a sweep folder (no sweep.json)")
    claim = folder / CLAIM
    if claim.is_file():
        text = claim.read_text().strip()
        if text.isdigit() and int(text) != os.getpid() and _pid_alive(int(text)):
            raise UserError(f"--resume {folder}: a sweep (pid {text}) is still running in it")
    write_text(claim, f"{os.getpid()}\n")
    return folder


def _folder(sweep: Sweep, out: Path | None, resume: Path | None, results: Path) -> Path:
    if resume is not None:
        return _resume_folder(resume)
    return claim_out_folder(out) if out is not None else new_run_dir(results, f"{sweep.name}-sweep")


def _run_live_point(p: Point, folder: Path) -> dict:
    """A live point in this process (engines and WAN are one machine's: one at a time)."""
    from pddbench.live.deploy import run_live

    started = time.perf_counter()
    run_dir = folder / "runs" / p.key
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        run_live(p.scenario, run_dir)
        summary = json.loads((run_dir / "summary.json").read_text())
        res = {"status": "ok", "summary": summary}
    except Exception as exc:  # noqa: BLE001 - recorded with the point, the sweep goes on
        res = {"status": "failed", "error": f"{type(exc).__name__}: {exc}"}
    res["wall_s"] = round(time.perf_counter() - started, 4)
    return res


def _progress() -> Progress:
    return Progress(TextColumn("[bold]sweep[/] {task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("points, [red]{task.fields[failed]} failed[/]"), TimeElapsedColumn(),
                    TextColumn("ETA"), TimeRemainingColumn(), console=console)


def _sweep_json(sweep: Sweep, folder: Path, state: str, executor: dict, counts: dict, started: str) -> None:
    from pddbench.provenance import provenance

    write_json(folder / "sweep.json", {
        "state": state, "started_at": started,
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds") if state != "running" else None,
        "sweep": sweep.resolved(), "executor": executor, **counts,
        "points": [{"point": p.index, "repeat": p.repeat, "key": p.key, "axes": p.axes} for p in sweep.points],
        "provenance": provenance(**executor),
    })


def run_sweep(sweep_file: Path, out: Path | None = None, resume: Path | None = None, jobs: int | None = None,
              ray: str | None = None, results: Path = Path("results")) -> Path:
    sweep = load_sweep(sweep_file)  # every point validated before anything runs
    folder = _folder(sweep, out, resume, results)
    store = PointStore(folder)
    todo = [p for p in sweep.points if not store.done(p.key)]
    skipped = len(sweep.points) - len(todo)
    sim, live = [p for p in todo if not p.live], [p for p in todo if p.live]
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    executor: dict = {"executor": "none", "workers": 0, "jobs": jobs, "ray": ray}
    counts = {"points_total": len(sweep.points), "points_kept_from_before": skipped}
    _sweep_json(sweep, folder, "running", executor, counts, started)
    failed = 0
    try:
        with _progress() as bar:
            task = bar.add_task(sweep.name, total=len(sweep.points), completed=skipped, failed=0)

            def keep(p: Point, res: dict) -> None:
                nonlocal failed
                rec = store.save(p, res)
                failed += rec["status"] != "ok"
                bar.update(task, advance=1, failed=failed)
            if sim:
                with make_executor(jobs, ray, tasks=len(sim)) as ex:
                    executor.update(ex.describe())
                    for i, text in ex.run([make_payload(p.task, p.blobs) for p in sim]):
                        keep(sim[i], json.loads(text))
            if live:
                if (jobs or 0) > 1 or jobs is None or ray is not None:
                    console.print(f"{len(live)} live point(s) run one at a time in this process "
                                  "(real engines share this machine); -j/--ray apply to simulated points only")
                for p in live:
                    keep(p, _run_live_point(p, folder))
    except KeyboardInterrupt:
        kept = sum(store.done(p.key) for p in sweep.points)
        _finish(sweep, folder, store, "interrupted", executor, counts, started, skipped)
        raise Interrupted(f"interrupted; kept {kept} of {len(sweep.points)} points in {folder / 'points'} "
                          f"(resume: pddbench sweep {sweep_file} --resume {folder})") from None
    _finish(sweep, folder, store, "complete", executor, counts, started, skipped)
    return folder


def _finish(sweep: Sweep, folder: Path, store: PointStore, state: str, executor: dict, counts: dict,
            started: str, skipped: int) -> None:
    df = build_table(sweep, store)
    write_table(df, folder / "points.parquet")
    write_json(folder / "timings.json", {**timings(sweep, store), "executor": executor})
    counts = {**counts, "points_finished": len(df), "points_ok": int((df["status"] == "ok").sum()) if len(df) else 0}
    counts["points_failed"] = counts["points_finished"] - counts["points_ok"]
    write_report(df, sweep, folder, state, executor, skipped)
    if state == "interrupted":
        write_text(folder / INTERRUPTED, f"interrupted with {len(df)} of {len(sweep.points)} points finished\n")
    else:
        (folder / INTERRUPTED).unlink(missing_ok=True)
    _sweep_json(sweep, folder, state, executor, counts, started)
    release_claim(folder)
