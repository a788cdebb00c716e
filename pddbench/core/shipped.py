"""Where the shipped scenarios and traces are: package data (pddbench/scenarios and
pddbench/traces link to the repository's scenarios/ and traces/), so a command that defaults to a
shipped scenario works from any directory and after `pip install .`."""

from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).resolve().parents[1]  # pddbench/
SCENARIOS = _HERE / "scenarios"
TRACES = _HERE / "traces"
MOONCAKE_TRACE = TRACES / "mooncake" / "synthetic_trace.jsonl"


def resolve_scenario(ref: str | Path) -> Path:
    """A scenario file by path, else a shipped one by name: 'paper/pdd' or 'paper/pdd.yaml'."""
    path = Path(ref)
    if path.exists() or path.is_absolute():
        return path
    shipped = SCENARIOS / (path if path.suffix else path.with_suffix(".yaml"))
    return shipped if shipped.is_file() else path


def shipped_scenario_names() -> list[str]:
    return sorted(str(p.relative_to(SCENARIOS).with_suffix("")) for p in SCENARIOS.glob("*/*.yaml")
                  if p.stem != "base" and p.parent.name not in ("sweeps", "designs"))  # sweep and designs specs


def resolve_sweep(ref: str | Path) -> Path:
    """A sweep file by path, else a shipped one by name: 'wan-x-tpot-capacity' or 'sweeps/...'."""
    path = Path(ref)
    if path.exists() or path.is_absolute():
        return path
    name = path.name if path.suffix else path.with_suffix(".yaml").name
    shipped = SCENARIOS / "sweeps" / name
    return shipped if shipped.is_file() else path
