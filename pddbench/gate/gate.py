"""`pddbench gate CANDIDATE --baseline BASELINE`: the mode comes from what the runs are (simulator:
exact; live: statistical); outputs, history and --update-baseline."""

from __future__ import annotations

import os
import shutil
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from pddbench.errors import UserError
from pddbench.gate.exact import exact_gate
from pddbench.gate.inputs import GateInput, load_input
from pddbench.gate.report import verdict_line, write_outputs
from pddbench.gate.rules import load_rules

HARDWARE = ("cpu_model", "cpu_isa", "cpu_cores")
# what --update-baseline copies: the gate's inputs and small run facts, never models, logs or figures
KEEP_SUFFIXES = (".json", ".parquet", ".yaml", ".csv", ".jsonl", ".log")
SKIP_DIRS = ("model", "logs", "replay", "fidelity")


def _compatible(cand: GateInput, base: GateInput) -> None:
    family = {"run": "run", "repeats": "run", "capacity": "capacity", "sweep": "sweep"}
    if family[cand.kind] != family[base.kind]:
        raise UserError(f"cannot compare a {cand.kind} ({cand.path}) with a {base.kind} ({base.path})")
    if cand.runtime != base.runtime:
        raise UserError(f"candidate is a {cand.runtime} result and the baseline a {base.runtime} one: "
                        "compare simulator with simulator and live with live (`pddbench fidelity` compares across)")


def _trust(inp: GateInput, side: str) -> list[str]:
    """Refuse runs that cannot be trusted (interrupted; live link calibration off target); note
    live runs whose client fell behind its schedule."""
    notes = []
    for run, s in zip(inp.runs, inp.summaries):
        if s.get("interrupted"):
            raise UserError(f"the {side} {run} was interrupted: its summary covers part of the run; rerun it")
        if s.get("invalid"):
            raise UserError(f"the {side} {run} is marked invalid ({s['invalid']}); rerun it")
        if s.get("schedule_ok") is False:
            notes.append(f"the {side} {run}: the replay client fell behind its schedule (schedule_ok false)")
    return notes


def _hardware(p: dict | None) -> dict | None:
    return None if not p else {k: p.get(k) for k in HARDWARE}


def check_hardware(cand: GateInput, base: GateInput) -> None:
    hc, hb = _hardware(cand.provenance), _hardware(base.provenance)
    for side, hw, inp in (("candidate", hc, cand), ("baseline", hb, base)):
        if hw is None:
            raise UserError(f"cannot tell whether the live runs share hardware: the {side} {inp.path} records no "
                            "provenance (made before it was recorded); rerun it, or pass --allow-different-hardware")
    if hc != hb:
        diff = "; ".join(f"{k} {hc[k]!r} vs {hb[k]!r}" for k in HARDWARE if hc[k] != hb[k])
        raise UserError(f"candidate and baseline live runs come from different hardware ({diff}): live figures "
                        "do not compare across CPUs (vLLM CPU without AVX-512 runs ~10x slower); rerun the "
                        "baseline here, or pass --allow-different-hardware")


def _copy_filter(folder: str, names: list[str]) -> set[str]:
    return {n for n in names if (Path(folder, n).is_dir() and n in SKIP_DIRS) or
            (Path(folder, n).is_file() and not n.endswith(KEEP_SUFFIXES))}


def copy_inputs(src: Path, dst: Path) -> None:
    """A new baseline folder from a result folder: its gate inputs only."""
    src = src if src.is_dir() else src.parent
    shutil.copytree(src, dst, ignore=_copy_filter)


def replace_baseline(cand: GateInput, base: GateInput) -> str:
    """Copy the candidate over the baseline: into a temporary folder beside it, then two renames
    (the old baseline stays until the new one is complete, and is restored if the swap fails)."""
    if cand.kind == "capacity" and base.path.is_file():
        from pddbench.io import write_text

        write_text(base.path, cand.path.read_text())
        return f"{base.path} replaced by {cand.path}"
    src = cand.path if cand.path.is_dir() else cand.path.parent
    dst = base.path if base.path.is_dir() else base.path.parent
    if src.resolve() == dst.resolve():
        raise UserError("--update-baseline: the candidate is the baseline")
    tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}.new-", dir=dst.parent))
    try:
        shutil.copytree(src, tmp / "x", ignore=_copy_filter)
        old = dst.parent / f".{dst.name}.old-{os.getpid()}"
        os.replace(dst, old)
        try:
            os.replace(tmp / "x", dst)
        except OSError:
            os.replace(old, dst)
            raise
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return f"baseline {dst} replaced by {src} (gate inputs only: no model, logs or figures)"


def gate(candidate: Path, baseline: Path, rules_path: Path | None = None, *, markdown: Path | None = None,
         junit: Path | None = None, json_out: Path | None = None, update_baseline: bool = False,
         history_dir: Path | None = Path("results/history"), allow_different_hardware: bool = False,
         name: str | None = None) -> dict:
    """Compare and write the outputs; returns the result (`regressions` > 0: the gate failed,
    unless `accepted` by --update-baseline)."""
    ruleset = load_rules(rules_path)
    cand, base = load_input(candidate), load_input(baseline)
    _compatible(cand, base)
    mode = "exact" if cand.runtime == "sim" else "statistical"
    notes = _trust(cand, "candidate") + _trust(base, "baseline")
    if mode == "statistical":
        if allow_different_hardware:
            if _hardware(cand.provenance) != _hardware(base.provenance):
                notes.append(f"different hardware allowed: candidate {_hardware(cand.provenance)}, "
                             f"baseline {_hardware(base.provenance)}")
        else:
            check_hardware(cand, base)
        from pddbench.gate.statistical import statistical_gate

        out = statistical_gate(cand, base, ruleset.for_mode(mode), ruleset.confidence, ruleset.bootstrap, ruleset.seed)
    else:
        out = exact_gate(cand, base, ruleset.for_mode(mode))
    if cand.scenario and base.scenario and cand.scenario != base.scenario:
        notes.append(f"different scenarios: candidate {cand.scenario}, baseline {base.scenario}")
    now = datetime.now(timezone.utc)
    res = {"name": name or base.scenario or base.label, "gate_id": now.strftime("%Y%m%dT%H%M%S.%fZ"),
           "mode": mode, "candidate": str(candidate), "baseline": str(baseline), "rules": ruleset.source,
           "identical": out["identical"], "rows": out["rows"], "notes": notes + out["notes"],
           "regressions": sum(1 for r in out["rows"] if r["status"] == "regression"),
           "moved": sum(1 for r in out["rows"] if r["status"] not in ("same", "n/a")),
           "candidate_provenance": cand.provenance, "baseline_provenance": base.provenance,
           "accepted": False, "baseline_updated": False}
    res["verdict"] = verdict_line(res)
    if update_baseline:
        if res["identical"]:
            res["notes"].append("--update-baseline: nothing to update, the candidate is identical")
        else:
            res["notes"].append("--update-baseline: " + replace_baseline(cand, base))
            res.update(accepted=True, baseline_updated=True)
            res["verdict"] = f"ACCEPTED as the new baseline ({res['moved']} metric(s) moved, " \
                             f"{res['regressions']} beyond the rules): {verdict_line(res)}"
    if history_dir is not None:
        from pddbench.gate.history import append_history
        from pddbench.provenance import provenance

        append_history(history_dir, res, provenance().get("git_commit"), now)
    write_outputs([res], markdown, junit, json_out)
    return res
