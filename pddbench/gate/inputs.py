"""What a gate input is: a run folder (summary.json + records.parquet), a repeat folder
(repeats.json + repeat-0..N-1, each a run folder), a sweep folder (sweep.json + points.parquet) or a
capacity result (capacity.json, or a folder holding it). Anything else is refused in one line."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from pddbench.errors import UserError

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
    points: dict[str, dict] = field(default_factory=dict)  # subject -> flat metrics (capacity, sweep)
    identity: dict[str, str] = field(default_factory=dict)  # subject -> canonical JSON (exact identity)
    provenance: dict | None = None
    scenario: str | None = None

    @property
    def label(self) -> str:
        return self.path.name if self.kind != "capacity" or self.path.is_dir() else self.path.parent.name


def flatten(obj, prefix: str = "") -> dict[str, float | None]:
    """Numeric leaves of a summary as dotted names (ttft_ms.p90); None kept (a metric that has no
    value), booleans, strings, lists and run facts (NOT_METRICS) left out."""
    out: dict[str, float | None] = {}
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if not prefix and key in NOT_METRICS:
            continue
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        elif value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
            out[name] = None if value is None else float(value)
    return out


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object")
    return data


def _run(path: Path) -> tuple[dict, str]:
    for name in ("summary.json", "records.parquet"):
        if not (path / name).is_file():
            raise UserError(f"{path} is not a run folder: it has no {name}")
    summary = _read_json(path / "summary.json")
    runtime = summary.get("runtime")
    if runtime not in ("sim", "live"):
        raise UserError(f"{path}/summary.json: runtime is {runtime!r}, expected 'sim' or 'live' "
                        "(the gate compares `pddbench run` folders)")
    return summary, runtime


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
        return GateInput("run", path, runtime, [path], [summary], provenance=summary.get("provenance"),
                         scenario=summary.get("scenario"))
    raise UserError(f"{path}: not a run folder (summary.json + records.parquet), repeat folder (repeats.json), "
                    "sweep folder (sweep.json + points.parquet) or capacity result (capacity.json)")


def _repeats(path: Path) -> GateInput:
    meta = _read_json(path / "repeats.json")
    names = meta.get("runs")
    if not isinstance(names, list) or not names:
        raise UserError(f"{path}/repeats.json: 'runs' must list the repeat folders")
    runs, summaries, runtimes = [], [], set()
    for name in names:
        summary, runtime = _run(path / str(name))
        runs.append(path / str(name))
        summaries.append(summary)
        runtimes.add(runtime)
    if len(runtimes) != 1:
        raise UserError(f"{path}: repeats mix runtimes {sorted(runtimes)}")
    return GateInput("repeats", path, runtimes.pop(), runs, summaries,
                     provenance=meta.get("provenance") or summaries[0].get("provenance"),
                     scenario=meta.get("scenario") or summaries[0].get("scenario"))


def _capacity(path: Path) -> GateInput:
    data = _read_json(path)
    if "throughput_within_sla_rps" not in data:
        raise UserError(f"{path}: not a capacity result (no throughput_within_sla_rps)")
    name = data.get("scenario") or path.parent.name
    name = str(name)
    canon = json.dumps({k: v for k, v in data.items() if k != "provenance"}, sort_keys=True, default=str)
    return GateInput("capacity", path, "sim", points={name: flatten(data)}, identity={name: canon},
                     provenance=data.get("provenance"), scenario=data.get("scenario"))
