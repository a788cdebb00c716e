"""`pddbench run SCENARIO --repeat N`: N runs of one scenario, each a normal run folder
(OUT/repeat-0 .. OUT/repeat-N-1), listed in OUT/repeats.json (rewritten after each repeat, so an
interrupted series still names the repeats it finished). Live runs vary from run to run; the gate
compares repeat folders statistically (pddbench/gate/statistical.py)."""

from __future__ import annotations

import time
from pathlib import Path

from pddbench.errors import UserError
from pddbench.io import claim_out_folder, new_run_dir, write_json


def run_repeats(path: Path, overrides: list[str], results_root: Path, out: Path | None, repeat: int) -> Path:
    from pddbench.provenance import provenance
    from pddbench.runner import run_scenario
    from pddbench.scenario import load_scenario

    if repeat < 1:
        raise UserError(f"--repeat must be at least 1, not {repeat}")
    sc = load_scenario(path, overrides)  # refuse a bad scenario before making any folder
    folder = claim_out_folder(out) if out is not None else new_run_dir(results_root, f"{sc.name}-repeats")
    meta = {"scenario": sc.name, "runtime": sc.runtime, "repeats": repeat, "overrides": list(overrides),
            "source": str(path), "runs": [], "wall_s": [], "provenance": provenance()}
    for i in range(repeat):
        started = time.monotonic()
        run_scenario(path, overrides, results_root, folder / f"repeat-{i}")
        meta["runs"].append(f"repeat-{i}")
        meta["wall_s"].append(round(time.monotonic() - started, 1))
        write_json(folder / "repeats.json", meta)
    return folder
