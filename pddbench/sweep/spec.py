"""The sweep file: pydantic-validated, its axes expanded and every point's scenario resolved and
validated before any work starts. Errors name the file, line and field, like scenario errors.

    base: paper/pdd                 # a path (relative to this file, or the working directory) or a shipped name
    measure: capacity               # or: run
    repeats: 1                      # repeat r sets seed = r and workload.synth.seed = r
    set: [workload.synth.requests=1000]    # or a mapping {path: value}; applied to every point
    axes:                           # the product of all axes, in file order (the last varies fastest)
      network.wan: [cross-city-10g, cross-city-100g]
      sla.tpot_ms: {range: [60, 100, 20]}  # start, stop, step; stop is included when on the grid
      sla.ttft_ms: {linspace: [1000, 5000, 5]}  # start, stop, count; both ends included
      zip:                          # paired axes: one dimension, equal lengths (or a list of such groups)
        deployment.main.instances: [4, 6]
        network.wan_lines: [1, 2]
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import BaseModel, Field, ValidationError

from pddbench.core.errors import InputError, UserError
from pddbench.core.limits import (DEFAULT_REQUESTS, MAX_SWEEP_POINTS, SIM_S_PER_REQUEST, VALIDATE_S_PER_POINT,
                             capacity_probes, check_size, check_work, count_text, nominal_requests)
from pddbench.core.loading import load_yaml, read_text
from pddbench.schema.scenario import (Scenario, clean_loc, clean_msg, numbers, read_yaml, resolve_beside, where,
                               yaml_line)
from pddbench.core.shipped import resolve_scenario, resolve_sweep
from pddbench.schema.ranges import with_range
from pddbench.sweep.payload import FILE_FIELDS, ship_scenario

MAX_POINTS = MAX_SWEEP_POINTS  # the default; `sweep --max-points` raises it
SEED_PATHS = ("seed", "workload.synth.seed")  # set by the repeat number


class _Strict(BaseModel):
    model_config = {"extra": "forbid", "allow_inf_nan": False}


class CapacityOptions(_Strict):
    iterations: int = Field(7, ge=1, le=20, description="bisection steps after bracketing (as `capacity --iterations`)")


class SweepFile(_Strict):
    base: str = Field(min_length=1, description="base scenario: path or shipped name")
    name: str | None = Field(None, min_length=1, description="default: the sweep file's name")
    description: str = ""
    measure: Literal["capacity", "run"] = "capacity"
    repeats: int = Field(1, ge=1, le=1000)
    set: list[str] | dict[str, Any] = Field(default_factory=list, description="overrides for every point")
    axes: dict[str, Any] = Field(default_factory=dict)
    capacity: CapacityOptions = Field(default_factory=CapacityOptions)
    plot: list[str] | None = Field(None, description="metrics to draw (default: the measure's main metrics)")


@dataclass
class Point:
    index: int                 # position in the product: the row order
    repeat: int
    key: str                   # identity: hash of the resolved scenario, measure and repeat
    axes: dict[str, Any]       # axis path -> value as written in the sweep
    scenario: Scenario
    task: dict | None = None   # what a worker gets (simulated points); None for live points
    blobs: dict[str, bytes] = field(default_factory=dict)

    @property
    def live(self) -> bool:
        return self.scenario.runtime == "live"


@dataclass
class Sweep:
    path: Path
    name: str
    spec: SweepFile
    base: Path
    axis_names: list[str]
    axis_values: dict[str, list]
    points: list[Point]

    def resolved(self) -> dict:
        """The sweep as run, for sweep.json."""
        return {"file": str(self.path), "name": self.name, "base": str(self.base),
                "measure": self.spec.measure, "repeats": self.spec.repeats,
                "capacity": self.spec.capacity.model_dump() if self.spec.measure == "capacity" else None,
                "set": self.spec.set, "axes": self.axis_values, "points": len(self.points),
                "spec_hash": self.spec_hash}

    @property
    def spec_hash(self) -> str:
        """The sweep's identity as resolved: canonical JSON of its measure, axes (in order) and every
        point's key, which hashes the point's resolved scenario (base, set, axes, repeat seed), the
        measure and the search steps. The file's name and place are not part of it, its content is."""
        ident = {"measure": self.spec.measure, "repeats": self.spec.repeats,
                 "capacity": self.spec.capacity.model_dump() if self.spec.measure == "capacity" else None,
                 "axes": [[p, self.axis_values[p]] for p in self.axis_names],
                 "points": [[p.index, p.repeat, p.key] for p in self.points]}
        text = json.dumps(ident, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()


class _Loc:
    """Turns a location in the sweep file into an InputError (file, line, field)."""

    def __init__(self, path: Path, text: str):
        self.path, self.text = path, text

    def error(self, loc: tuple, msg: str) -> InputError:
        return InputError(str(self.path), msg, line=yaml_line(self.text, loc)[0], field=".".join(map(str, loc)))


def _num(x: float) -> int | float:
    """Grid values without float noise (0.30000000000000004 -> 0.3); whole numbers as int."""
    x = float(f"{x:.12g}")
    return int(x) if x.is_integer() else x


@dataclass
class Axis:
    """One axis as written: how many values it has (counted, never built) and how to build them."""
    count: int
    build: Callable[[], list]


_AXIS_FIELDS = {"range": ("start", "stop", "step"), "linspace": ("start", "stop", "count")}


def _number(x: Any, kind: str, name: str, loc: tuple, where: _Loc) -> int | float:
    """A bound as a finite number. YAML 1.1 reads 1e9 (no dot) as text: numeric text is a number."""
    if isinstance(x, str):
        try:
            x = float(x)
        except ValueError:
            pass
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise where.error(loc + (kind, name), f"{kind} {name} must be a number, got {x!r}")
    if not math.isfinite(x):
        raise where.error(loc + (kind, name), f"{kind} {name} must be a finite number, got {x}")
    return x


def _range_count(start: float, stop: float, step: float) -> int:
    """Values of range [start, stop, step] (stop included when on the grid), without building them;
    exact for spans past float's range."""
    q = (stop - start) / step
    if math.isfinite(q):
        return math.floor(q + 1e-9) + 1
    return math.floor((Fraction(stop) - Fraction(start)) / Fraction(step)) + 1


def _axis(value: Any, loc: tuple, where: _Loc) -> Axis:
    """An axis's size and builder; its bounds checked finite and its count computed arithmetically,
    so a huge axis is refused by its size before any value exists."""
    if isinstance(value, list):
        if not value:
            raise where.error(loc, "an axis needs at least one value")
        return Axis(len(value), lambda: value)
    kind = next(iter(value)) if isinstance(value, dict) and len(value) == 1 else None
    if kind not in _AXIS_FIELDS:
        raise where.error(loc, "an axis is a list of values, {range: [start, stop, step]} or "
                               "{linspace: [start, stop, count]}")
    names, nums = _AXIS_FIELDS[kind], value[kind]
    if not isinstance(nums, list) or len(nums) != 3:
        raise where.error(loc + (kind,), f"{kind} takes three numbers: [{', '.join(names)}]")
    nums = [_number(x, kind, name, loc, where) for name, x in zip(names, nums)]
    if kind == "range":
        start, stop, step = (float(x) for x in nums)
        if step == 0 or (stop - start) * step < 0:
            raise where.error(loc + ("range",), "step must be non-zero and go from start towards stop")
        return Axis(_range_count(start, stop, step), lambda: [_num(start + i * step) for i in
                                                              range(_range_count(start, stop, step))])
    start, stop, count = float(nums[0]), float(nums[1]), nums[2]
    if isinstance(count, float) and not count.is_integer():
        raise where.error(loc + ("linspace", "count"), f"linspace count must be a whole number, got {count}")
    count = int(count)
    if count < 1:
        raise where.error(loc + ("linspace", "count"), "linspace count must be at least 1")
    if count == 1:
        return Axis(1, lambda: [_num(start)])
    return Axis(count, lambda: [_num(start + (stop - start) * i / (count - 1)) for i in range(count)])


def _check_path(path: str, loc: tuple, where: _Loc) -> None:
    if not path or any(not part for part in path.split(".")):
        raise where.error(loc, f"'{path}' is not a dotted scenario path (e.g. sla.tpot_ms)")
    if path in SEED_PATHS:
        raise where.error(loc, f"{path} comes from the repeat number (repeat r uses seed r): use repeats: N")


@dataclass
class Dimension:
    """One axis, or one zip group: its paths, their axes (equal counts) and each path's location."""
    paths: list[str]
    axes: list[Axis]
    locs: list[tuple]

    @property
    def count(self) -> int:
        return self.axes[0].count

    def rows(self) -> list[tuple]:
        return list(zip(*[a.build() for a in self.axes]))


def _dimensions(axes: dict, where: _Loc) -> list[Dimension]:
    """One dimension per axis, or per zip group; nothing built yet."""
    dims = []
    for name, value in axes.items():
        if name == "zip":
            groups = value if isinstance(value, list) else [value]
            for g, group in enumerate(groups):
                gloc = ("axes", "zip") + ((g,) if isinstance(value, list) else ())
                if not isinstance(group, dict) or not group:
                    raise where.error(gloc, "zip pairs axes: a mapping of path -> values (or a list of such)")
                cols, locs = [], []
                for path, vals in group.items():
                    _check_path(str(path), gloc + (path,), where)
                    cols.append(_axis(vals, gloc + (path,), where))
                    locs.append(gloc + (path,))
                for path, col, loc in zip(group, cols, locs):
                    if col.count != cols[0].count:
                        raise where.error(loc, f"zipped axes need equal lengths: {count_text(col.count)} values "
                                               f"here, {count_text(cols[0].count)} for {next(iter(group))}")
                dims.append(Dimension([str(p) for p in group], cols, locs))
        else:
            _check_path(str(name), ("axes", name), where)
            dims.append(Dimension([str(name)], [_axis(value, ("axes", name), where)], [("axes", name)]))
    return dims


def point_count(dims: list[Dimension], repeats: int) -> int:
    """Points of the sweep: the product of the dimensions' counts, times the repeats (exact ints)."""
    return math.prod(d.count for d in dims) * repeats


def _point_cost(spec: SweepFile, base_data: dict) -> tuple[float, str]:
    """Rough seconds one point costs, and what it is, for the refusal's estimate."""
    n = nominal_requests(base_data.get("workload")) or DEFAULT_REQUESTS
    if spec.measure == "capacity":
        probes = capacity_probes(spec.capacity.iterations)
        return VALIDATE_S_PER_POINT + probes * n * SIM_S_PER_REQUEST, f"a capacity search of ~{probes} probes on " \
                                                                      f"~{n:,} requests"
    return VALIDATE_S_PER_POINT + n * SIM_S_PER_REQUEST, f"a run of ~{n:,} requests"


def _set_entries(spec: SweepFile, where: _Loc) -> list[tuple[str, Any, tuple]]:
    from pddbench.schema.scenario import parse_override

    if isinstance(spec.set, dict):
        entries = [(str(k), v, ("set", k)) for k, v in spec.set.items()]
    else:
        entries = []
        for i, text in enumerate(spec.set):
            try:
                parts, value = parse_override(text)
            except UserError as exc:
                raise where.error(("set", i), str(exc).replace("--set ", "")) from None
            entries.append((".".join(parts), value, ("set", i)))
    for path, _, loc in entries:
        _check_path(path, loc, where)
    return entries


def _put(data: dict, path: str, value: Any) -> None:
    """Set a dotted path in scenario data, making mappings on the way (as --set does)."""
    *parents, last = path.split(".")
    node = data
    for part in parents:
        nxt = node.get(part)
        if nxt is None:
            nxt = node[part] = {}
        if not isinstance(nxt, dict):
            raise ValueError(f"'{part}' is not a mapping")
        node = nxt
    node[last] = copy.deepcopy(value)


def _beside_sweep(path: str, value: Any, sweep_dir: Path) -> Any:
    """Data files named in the sweep file are relative to it (as in scenario files)."""
    if (path in {f"{s}.{k}" for s, k, _ in FILE_FIELDS} and isinstance(value, str)
            and not Path(value).is_absolute() and (sweep_dir / value).exists()):
        return str(sweep_dir / value)
    return value


def point_key(shipped: dict, measure: str, repeat: int, iterations: int | None) -> str:
    ident = {"scenario": shipped, "measure": measure, "repeat": repeat, "iterations": iterations}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:20]


def load_sweep(path: str | Path, max_points: int = MAX_SWEEP_POINTS, max_hours: float = math.inf) -> Sweep:
    """Read, validate and resolve a sweep file. Its size (the product of the axes' counts, times the
    repeats) is checked against `max_points` before any axis value or point is built."""
    path = resolve_sweep(path)
    text = read_text(path, "sweep file")
    where = _Loc(path, text)
    raw = load_yaml(text, str(path))
    if not isinstance(raw, dict):
        raise InputError(str(path), "a sweep file is a YAML mapping (base, measure, axes, ...)")
    try:
        spec = SweepFile.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = clean_loc(err["loc"])
        raise where.error(loc, with_range(SweepFile, loc, clean_msg(err["msg"]))) from None
    dims = _dimensions(spec.axes, where)
    entries = _set_entries(spec, where)
    axis_locs = {p: loc for d in dims for p, loc in zip(d.paths, d.locs)}
    for p, _, loc in entries:
        if p in axis_locs:
            raise where.error(loc, f"{p} is also an axis")
    names = [p for d in dims for p in d.paths]
    dupes = {p for p in names if names.count(p) > 1}
    if dupes:
        raise where.error(axis_locs[sorted(dupes)[0]], "this path is given as two axes")

    base = path.parent / spec.base
    base = base if base.is_file() else resolve_scenario(spec.base)
    try:
        base_data, layers = read_yaml(base)
    except InputError as exc:
        raise where.error(("base",), str(exc)) from None
    for section, key, _ in FILE_FIELDS:
        resolve_beside(base_data, section, key, base, [])
    for p, value, _ in entries:
        _put(base_data, p, _beside_sweep(p, value, path.parent))
    total = point_count(dims, spec.repeats)
    per_point, work = _point_cost(spec, base_data)
    shape = " x ".join([count_text(d.count) for d in dims] + ([f"{spec.repeats} repeats"] if spec.repeats > 1 else []))
    check_size("the sweep has", total, max_points, per_point, "give --max-points N (or split the sweep)",
               work, unit=f" points ({shape})" if len(dims) + (spec.repeats > 1) > 1 else " points",
               error=lambda msg: where.error(("axes",), msg))
    check_work(f"the sweep's {count_text(total)} points ({work} each)", total * per_point, max_hours,
               " (or fewer points, fewer requests)", error=lambda msg: where.error(("axes",), msg))

    rows = [d.rows() for d in dims]  # within the limit: now built
    locs = {**{p: loc for p, _, loc in entries}, **axis_locs}
    file_cache: dict = {}
    points: list[Point] = []
    for index, combo in enumerate(itertools.product(*rows)):
        axes = {p: v for d, row in zip(dims, combo) for p, v in zip(d.paths, row)}
        for repeat in range(spec.repeats):
            points.append(_resolve_point(index, repeat, axes, base_data, layers, spec, locs, where,
                                         path.parent, file_cache))
    axis_values = {p: [row[i] for row in d_rows] for d, d_rows in zip(dims, rows) for i, p in enumerate(d.paths)}
    return Sweep(path, spec.name or path.stem, spec, base, names, axis_values, points)


def _resolve_point(index, repeat, axes, base_data, layers, spec, locs, where, sweep_dir, file_cache) -> Point:
    at = ", ".join(f"{p}={v}" for p, v in axes.items())
    where_at = f" (at point {index}: {at})" if at else ""

    def fail(field_name: str, msg: str) -> InputError:
        """Blame the sweep entry that set this field (or a parent of it), else the base file."""
        for p, loc in locs.items():
            if field_name == p or field_name.startswith(p + ".") or (field_name and p.startswith(field_name + ".")):
                return where.error(loc, msg + where_at)
        loc = tuple(field_name.split(".")) if field_name else ()
        path, line = where(layers, loc) if loc else (layers[0][0], None)
        return InputError(str(path), msg + where_at, line=line, field=field_name or None)

    data = copy.deepcopy(base_data)
    for p, v in axes.items():
        try:
            _put(data, p, _beside_sweep(p, v, sweep_dir))
        except ValueError as exc:
            raise fail(p, str(exc)) from None
    data["seed"] = repeat
    _put(data, "workload.synth.seed", repeat)
    for loc, problem in numbers(data):
        raise fail(".".join(map(str, loc)), with_range(Scenario, loc, problem))
    try:
        sc = Scenario.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = clean_loc(err["loc"])
        raise fail(".".join(map(str, loc)), with_range(Scenario, loc, clean_msg(err["msg"]))) from None
    if sc.runtime == "live":
        if spec.measure == "capacity":
            raise where.error(("measure",), "capacity is searched in the simulator only; live points need "
                                            "measure: run" + where_at)
        ident = sc.model_dump(mode="json")
        return Point(index, repeat, point_key(ident, spec.measure, repeat, None), axes, sc)
    if sc.deployment is None:
        raise fail("deployment", "the scenario has no deployment")
    try:
        shipped, blobs = ship_scenario(sc, file_cache)
    except InputError as exc:
        raise fail(exc.field or "", str(exc)) from None
    iterations = spec.capacity.iterations if spec.measure == "capacity" else None
    key = point_key(shipped, spec.measure, repeat, iterations)
    task = {"kind": "point", "measure": spec.measure, "scenario": shipped, "iterations": iterations or 7}
    return Point(index, repeat, key, axes, sc, task, blobs)
