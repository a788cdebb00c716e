"""`pddbench gate CANDIDATE --baseline BASELINE`: the mode comes from what the runs are (simulator:
exact; live: statistical); outputs, history and --update-baseline.

It fails closed: exit 0 only when every rule was checked on finite numbers and holds; 1 on a
measured regression; 2 on input it cannot judge (a ruled metric missing, null, not a number or
not finite on either side, a rule naming a metric neither input has, another scenario or sweep,
an output place that cannot be written), checked before any output is written."""

from __future__ import annotations

import os
import shutil
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from pddbench.core.errors import InputError, UserError
from pddbench.gate.exact import exact_gate
from pddbench.core.loading import why_not_number
from pddbench.gate.inputs import GateInput, load_input, numbers
from pddbench.gate.report import verdict_line, write_outputs
from pddbench.gate.rules import Rule, load_rules

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


def _few(names: list[str], n: int = 5) -> str:
    return ", ".join(names[:n]) + (f" and {len(names) - n} more" if len(names) > n else "")


def same_subject(cand: GateInput, base: GateInput, allow: bool) -> list[str]:
    """Refuse a candidate of another scenario, or a sweep with other axes or points: compared, its
    differences would read as regressions of the code. --allow-different-scenario compares anyway
    (points on one side only are then reported, a baseline point the candidate lacks as a regression)."""
    problems = []
    if cand.scenario != base.scenario:
        problems.append(f"the candidate is scenario {cand.scenario!r} and the baseline {base.scenario!r}")
    if cand.kind == "sweep":
        if cand.axes != base.axes:
            problems.append(f"the sweeps have other axes (candidate {', '.join(cand.axes)}; "
                            f"baseline {', '.join(base.axes)})")
        else:
            cs, bs = cand.subjects(), base.subjects()
            missing, extra = [s for s in bs if s not in cs], [s for s in cs if s not in bs]
            if missing:
                problems.append(f"points in the baseline only: {_few(missing, 3)}")
            if extra:
                problems.append(f"points in the candidate only: {_few(extra, 3)}")
        if cand.measures != base.measures:
            problems.append(f"the sweeps measured different things (candidate {sorted(cand.measures)}, "
                            f"baseline {sorted(base.measures)})")
    if not problems:
        return []
    if not allow:
        raise UserError(f"{cand.path} is not a result of what {base.path} measured: {'; '.join(problems)}; gate "
                        "the same scenario, or pass --allow-different-scenario to compare anyway")
    return [f"--allow-different-scenario: {p}" for p in problems]


def check_ruled(cand: GateInput, base: GateInput, rules: dict[str, Rule], source: str) -> dict[str, Rule]:
    """The rules that apply to these inputs (`for:`), once every ruled value is known to be a finite
    number on both sides (or null under a nullable rule). Refuses, naming the file and the metric, a
    ruled metric that is missing, null, a string, a boolean, nested or not finite; and a rule whose
    metric neither input has (a misspelt rule would otherwise gate nothing and pass)."""
    measures = cand.measures | base.measures
    applicable = {m: r for m, r in rules.items() if set(r.kinds) & measures}
    if not applicable:
        raise UserError(f"{source}: no rule applies to a {cand.kind} result (each rule's for: names "
                        f"{', '.join(sorted({k for r in rules.values() for k in r.kinds}))}); add rules for "
                        f"{', '.join(sorted(measures))} metrics")
    entries = cand.entries + base.entries
    known = {name for e in entries for name in e.raw}
    unknown = [m for m in applicable if m not in known]
    if unknown:
        numeric = sorted(n for n in known if why_not_number(next(e.raw[n] for e in entries if n in e.raw)) is None)
        hints = [f"{m} (a group: {', '.join(sorted(n for n in numeric if n.startswith(m + '.'))[:3])})"
                 for m in unknown if any(n.startswith(m + ".") for n in numeric)]
        raise UserError(f"{source}: rule(s) name metric(s) that neither {cand.path} nor {base.path} has: "
                        f"{', '.join(unknown)}" + (f"; {'; '.join(hints)}" if hints else "") +
                        f"; known metrics include {_few(numeric)}")
    for side, inp in (("candidate", cand), ("baseline", base)):
        for entry in inp.entries:
            numbers(entry)  # an unruled number that is not finite is bad input too
            if not entry.measured:
                continue
            for metric, rule in applicable.items():
                if metric not in entry.raw:
                    raise InputError(entry.source, f"the {side} lacks this ruled metric, which other results "
                                     "here have; compare results of the same kind and version", field=metric)
                value = entry.raw[metric]
                why = why_not_number(value)
                if why is not None:
                    raise InputError(entry.source, f"is {why}; a ruled metric must be a finite number", field=metric)
                if value is None and side == "candidate" and _nothing_completed(entry.raw):
                    continue  # every request failed: no latency to judge, which is a regression
                if value is None and not rule.nullable:
                    raise InputError(entry.source, "is null (no value); a ruled metric must be a finite number "
                                     "(or the rule must say nullable: true)", field=metric)
    return applicable


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
        from pddbench.core.io import write_text

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


def check_outputs(markdown: Path | None, junit: Path | None, json_out: Path | None,
                  history_dir: Path | None) -> None:
    """Every output place, before any work: a folder where a file goes, a path under a file or an
    unwritable place is one line (exit 2), not a traceback after the comparison; a damaged history
    table too (it is appended to after the baseline may have been replaced)."""
    from pddbench.core.io import check_out_place

    for option, path in (("--markdown", markdown), ("--junit", junit), ("--json", json_out)):
        if path is not None:
            check_out_place(Path(path), option, folder=False)
    if history_dir is not None:
        from pddbench.gate.history import TABLE, read_history

        check_out_place(Path(history_dir), "--history", folder=True)
        check_out_place(Path(history_dir) / TABLE, "--history", folder=False)
        if (Path(history_dir) / TABLE).exists():
            read_history(history_dir)


def _nothing_completed(raw: dict) -> bool:
    """A run in which every request failed has null latencies: that is measured, not bad input."""
    total, done = raw.get("requests_total"), raw.get("requests_completed")
    return done == 0 and isinstance(total, (int, float)) and not isinstance(total, bool) and total > 0


def gate(candidate: Path, baseline: Path, rules_path: Path | None = None, *, markdown: Path | None = None,
         junit: Path | None = None, json_out: Path | None = None, update_baseline: bool = False,
         history_dir: Path | None = Path("results/history"), allow_different_hardware: bool = False,
         name: str | None = None, allow_different_scenario: bool = False) -> dict:
    """Compare and write the outputs; returns the result (`regressions` > 0: the gate failed,
    unless `accepted` by --update-baseline). Bad input raises UserError before anything is written."""
    check_outputs(markdown, junit, json_out, history_dir)
    ruleset = load_rules(rules_path)
    cand, base = load_input(candidate), load_input(baseline)
    _compatible(cand, base)
    mode = "exact" if cand.runtime == "sim" else "statistical"
    notes = same_subject(cand, base, allow_different_scenario)
    notes += _trust(cand, "candidate") + _trust(base, "baseline")
    if mode == "statistical":
        if allow_different_hardware:
            if _hardware(cand.provenance) != _hardware(base.provenance):
                notes.append(f"different hardware allowed: candidate {_hardware(cand.provenance)}, "
                             f"baseline {_hardware(base.provenance)}")
        else:
            check_hardware(cand, base)
    rules = check_ruled(cand, base, ruleset.for_mode(mode), ruleset.source)
    if mode == "statistical":
        from pddbench.gate.statistical import statistical_gate

        out = statistical_gate(cand, base, rules, ruleset.confidence, ruleset.bootstrap, ruleset.seed)
    else:
        out = exact_gate(cand, base, rules)
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
    write_outputs([res], markdown, junit, json_out)  # before the history: a failed report appends nothing
    if history_dir is not None:
        from pddbench.gate.history import append_history
        from pddbench.core.provenance import provenance

        append_history(history_dir, res, provenance().get("git_commit"), now)
    return res
