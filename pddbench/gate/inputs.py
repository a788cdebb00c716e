"""What a gate input is: a run folder (summary.json + records.parquet), a repeat folder
(repeats.json + repeat-0..N-1, each a run folder), a sweep folder (sweep.json + points.parquet) or a
capacity result (capacity.json, or a folder holding it). Anything else is refused in one line.

Every input becomes entries: one per run (a repeat folder has several), per capacity result or per
sweep point and repeat, each with its subject (what is compared with the same subject on the other
side), the file its values come from (named in errors) and its metrics as raw leaves: nothing is
dropped or converted here, so check_ruled can refuse a ruled metric that is missing, null, a
string, a boolean, nested or not finite instead of letting it vanish from the comparison."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from pddbench.core.errors import InputError, UserError
from pddbench.gate.entry import Entry
from pddbench.core.loading import read_json, why_not_number

# summary keys that are facts about the run, not performance: never gated or reported as moved
NOT_METRICS = ("schema_version", "seed", "sim_wall_s", "provenance", "sla", "engines", "link_calibration",
               "instances", "engine_metrics", "model_dir", "endpoint", "probes", "rate_scale", "sla_holds",
               "schedule_ok", "interrupted", "bracketed")


@dataclass
class GateInput:
    kind: str                        # run | repeats | sweep | capacity
    path: Path
    runtime: str                     # sim | live
    runs: list[Path] = field(default_factory=list)        # run folders (run: itself; repeats: each repeat)
    summaries: list[dict] = field(default_factory=list)   # their summary.json
    entries: list[Entry] = field(default_factory=list)
    identity: dict[str, str] = field(default_factory=dict)  # subject -> canonical JSON (exact identity)
    measures: frozenset[str] = frozenset()                  # what rules' `for:` this input matches
    axes: list[str] = field(default_factory=list)           # sweep: the columns naming a point
    provenance: dict | None = None
    scenario: str | None = None

    @property
    def label(self) -> str:
        return self.path.name if self.kind != "capacity" or self.path.is_dir() else self.path.parent.name

    def subjects(self) -> list[str]:
        return list(dict.fromkeys(e.subject for e in self.entries))


def flatten(obj: dict, prefix: str = "") -> dict[str, object]:
    """Every value of a summary under its dotted name (ttft_ms.p90); a mapping is kept under its
    own name too (a ruled name that is a mapping is refused as such). Run facts (NOT_METRICS) are
    left out: they are not performance."""
    out: dict[str, object] = {}
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if not prefix and key in NOT_METRICS:
            continue
        out[name] = value
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
    return out


def numbers(entry: Entry) -> dict[str, float | None]:
    """The entry's numeric metrics: numbers as floats, null kept (no value); strings, booleans,
    lists and mappings left out (facts such as deployment names). A number that is not finite is
    bad input in a summary (strict JSON cannot hold one: 1e999 or a 400-digit integer) and no value
    in a sweep cell."""
    out: dict[str, float | None] = {}
    for name, value in entry.raw.items():
        if value is None:
            out[name] = None
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            why = why_not_number(value)
            if why is None:
                out[name] = float(value)
            elif entry.strict:
                raise InputError(entry.source, f"is {why}; a metric must be a finite number", field=name)
            else:
                out[name] = None
    return out


def _non_finite_field(path: Path) -> tuple[str, str] | None:
    """Where a refused NaN/Infinity sits (dotted name, the constant), to name the metric in the
    error; only a diagnostic, after the strict reader has refused the file."""
    found: list[tuple[str, str]] = []

    def walk(node, prefix):
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{prefix}{k}.")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{prefix}{i}.")
        elif isinstance(node, _Constant):
            found.append((prefix.rstrip("."), node))

    try:
        walk(json.loads(path.read_text(encoding="utf-8"), parse_constant=_Constant), "")
    except (OSError, ValueError, RecursionError):
        return None
    return found[0] if found else None


class _Constant(str):
    """NaN / Infinity / -Infinity as read by the diagnostic parse above."""


def _read_object(path: Path, what: str) -> dict:
    try:
        data = read_json(path, what)  # strict: duplicate keys, NaN and Infinity refused
    except InputError as exc:
        where = _non_finite_field(path) if "not a JSON number" in str(exc) else None
        if where is None:
            raise
        raise InputError(str(path), f"is {where[1]}; a metric must be a finite number", field=where[0]) from None
    if not isinstance(data, dict):
        raise InputError(str(path), "expected a JSON object")
    return data


def _scenario(value, where: Path) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise InputError(str(where), f"scenario must be a name, not {value!r}", field="scenario")


def _provenance(value, where: Path) -> dict | None:
    if value is None or isinstance(value, dict):
        return value
    raise InputError(str(where), f"provenance must be a mapping, not {value!r}", field="provenance")


def _run(path: Path) -> tuple[dict, str]:
    for name in ("summary.json", "records.parquet"):
        if not (path / name).is_file():
            raise UserError(f"{path} is not a run folder: it has no {name}")
    summary = _read_object(path / "summary.json", "summary file")
    runtime = summary.get("runtime")
    if runtime not in ("sim", "live"):
        raise UserError(f"{path}/summary.json: runtime is {runtime!r}, expected 'sim' or 'live' "
                        "(the gate compares `pddbench run` folders)")
    _scenario(summary.get("scenario"), path / "summary.json")
    _provenance(summary.get("provenance"), path / "summary.json")
    return summary, runtime


def _run_entries(runs: list[Path], summaries: list[dict], subject: str) -> list[Entry]:
    return [Entry(subject, str(run / "summary.json"), flatten(s)) for run, s in zip(runs, summaries)]


def load_input(path: Path) -> GateInput:
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: no such file or folder")
    if path.is_file():
        if path.name == "capacity.json":
            return _capacity(path)
        raise UserError(f"{path}: not a gate input; give a run, repeat or sweep folder, or a capacity.json")
    if (path / "repeats.json").is_file():
        return _repeats(path)
    if (path / "sweep.json").is_file() or (path / "points.parquet").is_file():
        from pddbench.gate.sweep_input import load_sweep

        return GateInput("sweep", path, "sim", **load_sweep(path))
    if (path / "capacity.json").is_file():
        return _capacity(path / "capacity.json")
    if (path / "summary.json").is_file():
        summary, runtime = _run(path)
        scenario = summary.get("scenario")
        inp = GateInput("run", path, runtime, [path], [summary], provenance=summary.get("provenance"),
                        scenario=scenario, measures=frozenset({"run"}))
        inp.entries = _run_entries(inp.runs, inp.summaries, scenario or inp.label)
        return inp
    raise UserError(f"{path}: not a run folder (summary.json + records.parquet), repeat folder (repeats.json), "
                    "sweep folder (sweep.json + points.parquet) or capacity result (capacity.json)")


def _repeats(path: Path) -> GateInput:
    meta = _read_object(path / "repeats.json", "repeats file")
    names = meta.get("runs")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names) \
            or len(set(names)) != len(names):
        raise InputError(str(path / "repeats.json"), "must list the repeat folders, each once", field="runs")
    state = meta.get("state")
    if state is not None and state != "complete":
        raise InputError(str(path / "repeats.json"), f"is {state!r}, not complete: {len(names)} of "
                         f"{meta.get('repeats', '?')} repeats ran; gate a complete series (rerun `pddbench run "
                         "--repeat N`)", field="state")
    runs, summaries, runtimes = [], [], set()
    for name in names:
        summary, runtime = _run(path / name)
        runs.append(path / name)
        summaries.append(summary)
        runtimes.add(runtime)
    if len(runtimes) != 1:
        raise UserError(f"{path}: repeats mix runtimes {sorted(runtimes)}")
    scenarios = {s.get("scenario") for s in summaries}
    if len(scenarios) != 1:
        raise UserError(f"{path}: the repeats are runs of different scenarios {sorted(map(str, scenarios))}")
    scenario = _scenario(meta.get("scenario"), path / "repeats.json") or summaries[0].get("scenario")
    provenance = _provenance(meta.get("provenance"), path / "repeats.json") or summaries[0].get("provenance")
    inp = GateInput("repeats", path, runtimes.pop(), runs, summaries, provenance=provenance, scenario=scenario,
                    measures=frozenset({"run"}))
    inp.entries = _run_entries(runs, summaries, scenario or inp.label)
    return inp


def _capacity(path: Path) -> GateInput:
    data = _read_object(path, "capacity result")
    if "throughput_within_sla_rps" not in data:
        raise UserError(f"{path}: not a capacity result (no throughput_within_sla_rps)")
    scenario = _scenario(data.get("scenario"), path)
    # one subject whatever the folder is called: two capacity results of one scenario are the same subject
    name = scenario or "capacity"
    canon = json.dumps({k: v for k, v in data.items() if k != "provenance"}, sort_keys=True, default=str)
    return GateInput("capacity", path, "sim", entries=[Entry(name, str(path), flatten(data))],
                     identity={name: canon}, provenance=_provenance(data.get("provenance"), path), scenario=scenario,
                     measures=frozenset({"capacity"}))
