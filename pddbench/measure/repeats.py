"""`pddbench run SCENARIO --repeat N`: N runs of one scenario, each a normal run folder
(OUT/repeat-0 .. OUT/repeat-N-1), listed in OUT/repeats.json. Live runs vary from run to run; the
gate compares repeat folders statistically (pddbench/gate/statistical.py).

N is checked against a stated limit before the folder is claimed. repeats.json is written before
the first repeat and after each, with `state`: running, then complete; a series stopped midway
(Ctrl-C, or a repeat that fails) says `interrupted` or `failed` there, with the repeats it
finished (`runs`), how many were asked (`repeats`) and an INTERRUPTED or FAILED note beside it,
so no folder looks complete when it is not. A series that fails before any repeat finished
leaves nothing (the same command with the same --out then works)."""

from __future__ import annotations

import time
from pathlib import Path

from pddbench.core.errors import Interrupted, UserError, is_interrupt
from pddbench.core.io import (FAILED, claim_out_folder, discard_folder, new_run_dir, release_claim, write_json,
                         write_text)
from pddbench.core.limits import (DEFAULT_REQUESTS, MAX_REPEATS, RUN_FOLDER_S, SIM_S_PER_REQUEST, check_size,
                             nominal_requests)

INTERRUPTED = "INTERRUPTED"
LIVE_REPEAT_S = 120.0  # a live repeat: engines started and a short workload served (rough)


def run_repeats(path: Path, overrides: list[str], results_root: Path, out: Path | None, repeat: int,
                max_repeats: int = MAX_REPEATS) -> Path:
    from pddbench.core.io import check_out_options
    from pddbench.core.provenance import provenance
    from pddbench.measure.runner import run_scenario
    from pddbench.schema.scenario import load_scenario

    if repeat < 1:
        raise UserError(f"--repeat must be at least 1, not {repeat}")
    check_out_options(out, results_root)
    sc = load_scenario(path, overrides)  # refuse a bad scenario before making any folder
    if sc.runtime == "live":
        from pddbench.live.deploy import check_host_engines

        check_host_engines(sc)  # the engines fit this host: refused before the series' folder
        per, work = LIVE_REPEAT_S, "a live run: engines started, the workload served"
    else:
        n = nominal_requests(sc.workload.model_dump(mode="json")) or DEFAULT_REQUESTS
        per, work = RUN_FOLDER_S + n * SIM_S_PER_REQUEST, f"a simulated run of ~{n:,} requests"
    check_size("--repeat", repeat, max_repeats, per, f"give --max-repeats {repeat}", work, unit=" runs")
    made = out is None or not out.exists()
    folder = claim_out_folder(out) if out is not None else new_run_dir(results_root, f"{sc.name}-repeats")
    meta = {"scenario": sc.name, "runtime": sc.runtime, "repeats": repeat, "overrides": list(overrides),
            "source": str(path), "state": "running", "runs": [], "wall_s": [], "provenance": provenance()}
    try:
        write_json(folder / "repeats.json", meta)
        for i in range(repeat):
            started = time.monotonic()
            run_scenario(path, overrides, results_root, folder / f"repeat-{i}")
            meta["runs"].append(f"repeat-{i}")
            meta["wall_s"].append(round(time.monotonic() - started, 1))
            if i + 1 < repeat:
                write_json(folder / "repeats.json", meta)
    except BaseException as exc:
        if not is_interrupt(exc):
            if not meta["runs"]:  # nothing finished: leave nothing, so the same --out works again
                discard_folder(folder, made)
                raise
            _stopped(folder, meta, "failed", FAILED, f"{type(exc).__name__}: {exc}")
            raise
        if not meta["runs"]:
            discard_folder(folder, made)
            raise Interrupted(f"interrupted before the first repeat finished; nothing kept ({folder} "
                              f"{'removed' if made else 'emptied'})") from None
        _stopped(folder, meta, "interrupted", INTERRUPTED, f"{exc}".strip() if isinstance(exc, KeyboardInterrupt) else "")
        raise Interrupted(f"interrupted; kept {len(meta['runs'])} of {repeat} repeats in {folder} (repeats.json "
                          "says interrupted)") from None
    meta["state"] = "complete"
    write_json(folder / "repeats.json", meta)
    release_claim(folder)
    return folder


def _stopped(folder: Path, meta: dict, state: str, note: str, why: str) -> None:
    """repeats.json and a note say the series stopped, with the repeats it finished; claim released."""
    meta["state"] = state
    meta["stopped_by"] = why or state
    try:
        write_json(folder / "repeats.json", meta)
        write_text(folder / note, f"{state} after {len(meta['runs'])} of {meta['repeats']} repeats: "
                                  f"{why or state}\n")
    finally:
        release_claim(folder)
