"""`pddbench sweep`: validate every point, run those not yet finished through the chosen
executor (each kept as it completes), then write points.parquet, timings.json, sweep.json,
figures and summary.md. Ctrl-C keeps what finished and marks the folder interrupted."""

from __future__ import annotations

import json
import os
import shutil
import time
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from pddbench.core.errors import Interrupted, UserError, is_interrupt
from pddbench.core.io import (CLAIM, check_out_place, claim_out_folder, discard_folder, new_run_dir, release_claim,
                         write_json, write_text)
from pddbench.core.ray_cluster import check_ray_option
from pddbench.sweep.executors import Executor, make_executor
from pddbench.sweep.payload import make_payload
from pddbench.sweep.points import PointStore, build_table, timings, write_table
from pddbench.sweep.report import write_report
from pddbench.sweep.spec import MAX_POINTS, Point, Sweep, load_sweep

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


def _check_resume(sweep: Sweep, folder: Path) -> None:
    """Refuse, before anything is written, to resume a folder that is not a sweep folder, holds
    another sweep (its spec hash differs: its rows would be mixed with ours), or is being run."""
    from pddbench.core.loading import read_json

    if not (folder / "sweep.json").is_file():
        raise UserError(f"--resume {folder}: not a sweep folder (no sweep.json)")
    meta = read_json(folder / "sweep.json", "sweep folder")
    old = meta.get("sweep") if isinstance(meta, dict) and isinstance(meta.get("sweep"), dict) else {}
    stored = old.get("spec_hash")
    if stored is None:  # a folder from before spec hashes: its points' keys say the same
        keys = [p.get("key") for p in meta.get("points", []) if isinstance(p, dict)] if isinstance(meta, dict) else []
        same = keys == [p.key for p in sweep.points]
    else:
        same = stored == sweep.spec_hash
    if not same:
        raise UserError(f"--resume {folder}: it holds another sweep ({old.get('file', '?')}, spec "
                        f"{str(stored or 'unhashed')[:12]}), not {sweep.path} (spec {sweep.spec_hash[:12]}); resume "
                        "it with the sweep file that made it, or run this one with a new --out")
    pid = _claim_pid(folder)
    if pid is not None and pid != os.getpid() and _pid_alive(pid):
        raise UserError(f"--resume {folder}: a sweep (pid {pid}) is still running in it")


def _claim_pid(folder: Path) -> int | None:
    try:
        text = (folder / CLAIM).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _claim_resume(folder: Path) -> None:
    """Take the folder's claim: a stale claim (its process gone) is replaced; of two resumes at
    once, exactly one gets it (O_EXCL)."""
    pid = _claim_pid(folder)
    if pid is not None and pid != os.getpid() and _pid_alive(pid):
        raise UserError(f"--resume {folder}: a sweep (pid {pid}) is still running in it")
    (folder / CLAIM).unlink(missing_ok=True)
    try:
        fd = os.open(folder / CLAIM, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise UserError(f"--resume {folder}: another sweep has just taken it") from None
    with os.fdopen(fd, "w") as fh:
        fh.write(f"{os.getpid()}\n")


def _folder(sweep: Sweep, out: Path | None, resume: Path | None, results: Path) -> tuple[Path, bool]:
    """The claimed folder and whether this run made it (to remove it when the run fails at once)."""
    if resume is not None:
        _claim_resume(resume)
        return resume, False
    if out is not None:
        made = not out.exists()
        return claim_out_folder(out), made
    return new_run_dir(results, f"{sweep.name}-sweep"), True


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
        if is_interrupt(exc):  # a Ctrl-C a library wrapped: the sweep stops as on Ctrl-C
            raise
        res = {"status": "failed", "error": f"{type(exc).__name__}: {exc}"}
    res["wall_s"] = round(time.perf_counter() - started, 4)
    return res


def _progress() -> Progress:
    return Progress(TextColumn("[bold]sweep[/] {task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("points, [red]{task.fields[failed]} failed[/]"), TimeElapsedColumn(),
                    TextColumn("ETA"), TimeRemainingColumn(), console=console)


def _sweep_json(sweep: Sweep, folder: Path, state: str, executor: dict, counts: dict, started: str) -> None:
    from pddbench.core.provenance import provenance

    write_json(folder / "sweep.json", {
        "state": state, "started_at": started,
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds") if state != "running" else None,
        "sweep": sweep.resolved(), "executor": executor, **counts,
        "points": [{"point": p.index, "repeat": p.repeat, "key": p.key, "axes": p.axes} for p in sweep.points],
        "provenance": provenance(**executor),
    })


def run_sweep(sweep_file: Path, out: Path | None = None, resume: Path | None = None, jobs: int | None = None,
              ray: str | None = None, results: Path = Path("results"), max_points: int = MAX_POINTS,
              max_hours: float | None = None) -> Path:
    """Validate every point (the sweep's size first), check the folder, connect the executor (a
    Ray head that does not answer is refused here), and only then claim the folder: a refusal
    leaves no folder and no claim, so the same command with the same --out then works."""
    if out is not None:
        check_out_place(out)
    check_ray_option(ray)  # a malformed or unreachable cluster address: refused before validating
    sweep = load_sweep(sweep_file, max_points, *(() if max_hours is None else (max_hours,)))  # every point validated before anything runs
    if resume is not None:
        _check_resume(sweep, resume)
    if any(p.live for p in sweep.points):
        from pddbench.live.deploy import check_host_engines

        for p in sweep.points:  # the engines of every live point fit this host, before the folder
            if p.live:
                check_host_engines(p.scenario)
    done_before = PointStore(resume) if resume is not None else None
    sim = [p for p in sweep.points if not p.live and not (done_before and done_before.done(p.key))]
    ex = make_executor(jobs, ray, tasks=len(sim)) if sim else None
    try:
        folder, made = _folder(sweep, out, resume, results)
        if getattr(ex, "log_path", None) is not None:  # Ray's output while connecting, kept with the run
            shutil.move(str(ex.log_path), str(folder / "ray.log"))
            ex.log_path = folder / "ray.log"
        return _run_claimed(sweep, sweep_file, folder, made, resume is not None, ex, jobs, ray)
    finally:
        if ex is not None:
            ex.close()  # already closed after its points, unless the claim failed


def _run_claimed(sweep: Sweep, sweep_file: Path, folder: Path, made: bool, resumed: bool, ex: Executor | None,
                 jobs: int | None, ray: str | None) -> Path:
    store = PointStore(folder)
    todo = [p for p in sweep.points if not store.done(p.key)]
    skipped = len(sweep.points) - len(todo)
    sim, live = [p for p in todo if not p.live], [p for p in todo if p.live]
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    executor: dict = {"executor": "none", "workers": 0, "jobs": jobs, "ray": ray}
    counts = {"points_total": len(sweep.points), "points_kept_from_before": skipped}
    saved = 0
    failed = 0
    try:
        _sweep_json(sweep, folder, "running", executor, counts, started)
        with _progress() as bar:
            task = bar.add_task(sweep.name, total=len(sweep.points), completed=skipped, failed=0)

            def keep(p: Point, res: dict) -> None:
                nonlocal failed, saved
                rec = store.save(p, res)
                saved += 1
                failed += rec["status"] != "ok"
                bar.update(task, advance=1, failed=failed)
            if sim:  # (ex is None only if points found finished were removed meanwhile: run them here)
                with ex or make_executor(1) as runner:
                    executor.update(runner.describe())
                    for i, text in runner.run([make_payload(p.task, p.blobs) for p in sim]):
                        keep(sim[i], json.loads(text))
            if live:
                if (jobs or 0) > 1 or jobs is None or ray is not None:
                    console.print(f"{len(live)} live point(s) run one at a time in this process "
                                  "(real engines share this machine); -j/--ray apply to simulated points only")
                for p in live:
                    keep(p, _run_live_point(p, folder))
    except BaseException as exc:
        if not is_interrupt(exc):
            _failed_sweep(sweep, folder, made, resumed, saved, exc, executor, counts, started)
            raise
        kept = sum(store.done(p.key) for p in sweep.points)
        _finish(sweep, folder, store, "interrupted", executor, counts, started, skipped)
        raise Interrupted(f"interrupted; kept {kept} of {len(sweep.points)} points in {folder / 'points'} "
                          f"(resume: pddbench sweep {sweep_file} --resume {folder})") from None
    _finish(sweep, folder, store, "complete", executor, counts, started, skipped)
    return folder


def _failed_sweep(sweep: Sweep, folder: Path, made: bool, resumed: bool, saved: int, exc: BaseException,
                  executor: dict, counts: dict, started: str) -> None:
    """An error that is not a point's own (those are recorded with the point): a new folder in
    which nothing finished is removed (or emptied, for --out), so the same command works again;
    otherwise sweep.json says `failed` and the claim is released (--resume finishes it)."""
    if not resumed and saved == 0:
        discard_folder(folder, made)
        return
    try:
        _sweep_json(sweep, folder, "failed", executor, {**counts, "error": f"{type(exc).__name__}: {exc}"}, started)
    finally:
        release_claim(folder)


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
