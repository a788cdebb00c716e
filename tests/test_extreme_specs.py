"""Property (issue 40): every numeric field of the spec files, not only the scenario's
(tests/test_extreme_values.py), takes extreme floats (±1e-300 .. 1e300, subnormals, inf, nan, 0,
huge integers and each field's own bounds) without a hang or an internal error: the designs spec
(pddbench/reproduce/designs.py), the sweep file (pddbench/sweep/spec.py), the gate's rules file
(pddbench/gate/rules.py) and the nightly config (pddbench/gate/nightly.py).

The fields are found by walking the pydantic models (nested models, dicts and lists) and the
numbers of the shipped files, not listed by hand. Each example writes the file with one extreme
value and runs the command's own loading path in this process, stopping before any simulation:
`designs --max-searches 1` (its size check refuses once the spec is valid), `sweep --max-hours
0.001` and load_sweep (every point resolved, none simulated), the rules file through `gate` on
absent folders (the rules are read first), and the nightly config's loading. A value outside its
field's range is refused with exit 2 in one line naming the file, line, field and valid range; a
value inside it passes validation (or is refused in one line for what it means, e.g. a budget no
split fits). PDDBENCH_FUZZ_EXAMPLES=2000 (nightly) runs more examples."""

from __future__ import annotations

import contextlib
import io
import math
import os
import types
import typing
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from tests.inprocess import cli
from pddbench.core.errors import UserError
from pddbench.gate import nightly as nightly_mod
from pddbench.gate.rules import DEFAULT_RULES, MAX_ABS, MAX_BOOTSTRAP, MAX_REL, MAX_SEED, load_rules
from pddbench.reproduce.designs import DesignsSpec
from pddbench.schema.ranges import field_bounds
from pddbench.sweep.spec import SweepFile, load_sweep

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = int(os.environ.get("PDDBENCH_FUZZ_EXAMPLES", "0"))
PROPS = settings(max_examples=EXAMPLES or 25, deadline=None, derandomize=not EXAMPLES,
                 suppress_health_check=list(HealthCheck))

EXTREMES = [0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 1e-300, -1e-300, 1e-12, 1e300, -1e300,
            1.7976931348623157e308, math.inf, -math.inf, math.nan, 10 ** 30, -(10 ** 30), -1, 2.5]


# --- the walk: every numeric place of a model or a file --------------------------------------------

def _members(ann) -> list:
    if typing.get_origin(ann) in (typing.Union, types.UnionType):
        return [a for a in typing.get_args(ann) if a is not type(None)]
    return [ann]


def _base(ann):
    return typing.get_args(ann)[0] if typing.get_origin(ann) is typing.Annotated else ann


KEY, INDEX = object(), object()  # a dict key or list index the file chooses


def model_numbers(model: type[BaseModel], prefix: tuple = ()) -> list[tuple]:
    """Locations of every int/float field reachable from `model`: through nested models, dict
    values (KEY) and list items (INDEX)."""
    out = []

    def walk(ann, loc: tuple, depth: int) -> None:
        for member in _members(_base(ann)):
            member = _base(member)
            origin = typing.get_origin(member)
            if isinstance(member, type) and issubclass(member, BaseModel) and depth < 6:
                for name, field in member.model_fields.items():
                    walk(field.annotation, (*loc, name), depth + 1)
            elif origin is dict:
                walk(typing.get_args(member)[1], (*loc, KEY), depth + 1)
            elif origin is list:
                walk(typing.get_args(member)[0], (*loc, INDEX), depth + 1)
            elif member in (int, float) and loc not in out:
                out.append(loc)

    walk(model, prefix, 0)
    return out


def file_numbers(node, loc: tuple = ()) -> list[tuple]:
    """Locations of every number (and percentage text, as rules write rel) in parsed YAML."""
    if isinstance(node, dict):
        return [x for k, v in node.items() for x in file_numbers(v, (*loc, k))]
    if isinstance(node, list):
        return [x for i, v in enumerate(node) for x in file_numbers(v, (*loc, i))]
    if isinstance(node, (int, float)) and not isinstance(node, bool):
        return [loc]
    if isinstance(node, str) and node.strip().endswith("%"):
        return [loc]
    return []


def placed(data: dict, loc: tuple) -> tuple | None:
    """`loc` with KEY/INDEX resolved to the file's first key/index there; None when the file has no
    parent block for it (a default the file leaves out is set in its parent)."""
    out, node = [], data
    for part in loc[:-1]:
        if part is KEY:
            part = next(iter(node), None) if isinstance(node, dict) else None
        elif part is INDEX:
            part = 0 if isinstance(node, list) and node else None
        if part is None or not isinstance(node, (dict, list)):
            return None
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return None
        out.append(part)
    last = loc[-1]
    if last is KEY:
        last = next(iter(node), None) if isinstance(node, dict) else None
    elif last is INDEX:
        last = 0 if isinstance(node, list) and node else None
    if last is None or not isinstance(node, (dict, list)):
        return None
    return (*out, last)


def locations(model: type[BaseModel] | None, data: dict) -> list[tuple]:
    found = file_numbers(data)
    for loc in model_numbers(model) if model else []:
        loc = placed(data, loc)
        if loc is not None and loc not in found:
            found.append(loc)
    return found


def put(data: dict, loc: tuple, value) -> dict:
    data = yaml.safe_load(yaml.safe_dump(data, sort_keys=False))  # a fresh copy
    node = data
    for part in loc[:-1]:
        node = node[part]
    node[loc[-1]] = value
    return data


def in_bounds(value, number, bounds) -> bool:
    """Whether pydantic would take `value` for a field of type `number` with `bounds`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        x = float(value)
    except OverflowError:
        return False
    if not math.isfinite(x) or (number is int and not x.is_integer()):
        return False
    if bounds is None:
        return True
    lo, lo_in, hi, hi_in = bounds
    return ((lo is None or (value >= lo if lo_in else value > lo))
            and (hi is None or (value <= hi if hi_in else value < hi)))


def values(bounds) -> st.SearchStrategy:
    edges = [] if bounds is None else [b for b in (bounds[0], bounds[2]) if b is not None]
    near = [e * f for e in edges for f in (1, 1 - 1e-9, 1 + 1e-9)] + [e + d for e in edges for d in (-1, 1)]
    return st.one_of(st.sampled_from(EXTREMES), st.floats(allow_nan=True, allow_infinity=True),
                     *([st.sampled_from(near)] if near else []))


def refused_well(err: str, path: Path, loc: tuple, need_range: bool) -> None:
    """One line, no traceback, naming the file (with its line) and the field; the range when asked."""
    text = err.strip()
    assert len(text.splitlines()) == 1 and "Traceback" not in text, text
    assert str(path) in text, text
    if need_range:
        assert f"{path}:" in text and "valid range:" in text, (loc, text)
        assert all(str(p) in text for p in loc), (loc, text)  # a.b.0.c, or rules.a.b: c


# --- designs spec -----------------------------------------------------------------------------------

def _designs_base() -> dict:
    spec_dir = REPO / "scenarios" / "designs"
    data = yaml.safe_load((spec_dir / "prfaas-case-study.yaml").read_text())
    for d in data["designs"].values():
        d["scenario"] = str((spec_dir / d["scenario"]).resolve())
    return data


DESIGNS = _designs_base()
DESIGNS_LOCS = locations(DesignsSpec, DESIGNS)


@PROPS
@given(st.data())
def test_designs_spec_extreme_values_are_validated_or_refused_with_their_range(tmp_path_factory, data):
    loc = data.draw(st.sampled_from(DESIGNS_LOCS))
    number, bounds = field_bounds(DesignsSpec, loc)
    value = data.draw(values(bounds))
    tmp = tmp_path_factory.mktemp("designs")
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(put(DESIGNS, loc, value), sort_keys=False))
    res = cli("designs", path, "--max-searches", "1", "--out", tmp / "out")
    assert res.code == 2 and res.one_line, (loc, value, res.code, res.err)
    assert not (tmp / "out").exists()
    accepted = "--max-searches" in res.err  # the size check: the spec was valid
    if not in_bounds(value, number, bounds):
        assert not accepted, (loc, value, res.err)
        refused_well(res.err, path, loc, need_range=True)


# --- sweep file -------------------------------------------------------------------------------------

SWEEP = {"base": "paper/pdd", "measure": "capacity", "repeats": 2, "capacity": {"iterations": 3},
         "set": {"workload.synth.requests": 60, "sla.ttft_ms": 4000},
         "axes": {"sla.tpot_ms": {"range": [60, 100, 20]}, "network.wan_rate_scale": {"linspace": [0.5, 2, 3]},
                  "network.wan_lines": [1, 2]}}
SWEEP_LOCS = locations(SweepFile, SWEEP)


@PROPS
@given(st.data())
def test_sweep_file_extreme_values_are_validated_or_refused_with_their_range(tmp_path_factory, data):
    loc = data.draw(st.sampled_from(SWEEP_LOCS))
    number, bounds = field_bounds(SweepFile, loc)
    value = data.draw(values(bounds))
    tmp = tmp_path_factory.mktemp("sweep")
    path = tmp / "sweep.yaml"
    path.write_text(yaml.safe_dump(put(SWEEP, loc, value), sort_keys=False))
    res = cli("sweep", path, "--max-hours", "0.001", "--out", tmp / "out")  # refused by its estimate when valid
    assert res.code == 2 and res.one_line, (loc, value, res.code, res.err)
    assert not (tmp / "out").exists()
    try:
        sweep = load_sweep(path, max_points=200)  # every point resolved and validated, none simulated
    except UserError as exc:
        refused_well(str(exc), path, loc, need_range=number is not None and not in_bounds(value, number, bounds))
        return
    assert number is None or in_bounds(value, number, bounds), (loc, value)
    assert sweep.points and all(math.isfinite(p.scenario.sla.ttft_ms) for p in sweep.points)


# --- the gate's rules file --------------------------------------------------------------------------

RULES = yaml.safe_load(DEFAULT_RULES.read_text())
RULES_LOCS = locations(None, RULES)
RULE_RANGES = {"rel": (0, MAX_REL), "abs": (0, MAX_ABS), "confidence": (0.5, 1), "bootstrap": (100, MAX_BOOTSTRAP),
               "seed": (0, MAX_SEED)}


@PROPS
@given(st.data())
def test_rules_file_extreme_values_are_validated_or_refused_with_their_range(tmp_path_factory, data):
    loc = data.draw(st.sampled_from(RULES_LOCS))
    value = data.draw(values((*RULE_RANGES[loc[-1]][:1], True, RULE_RANGES[loc[-1]][1], True)))
    if loc[-1] == "rel" and isinstance(value, float) and data.draw(st.booleans()):
        value = f"{value * 100}%"
    tmp = tmp_path_factory.mktemp("rules")
    path = tmp / "rules.yaml"
    path.write_text(yaml.safe_dump(put(RULES, loc, value), sort_keys=False))
    try:
        ruleset = load_rules(path)
    except UserError as exc:
        refused_well(str(exc), path, loc, need_range=True)
        res = cli("gate", tmp / "none", "--baseline", tmp / "none", "--rules", path, "--history", tmp / "h")
        assert res.code == 2 and res.one_line and str(path) in res.err, res.err  # before the inputs are read
        assert not (tmp / "h").exists()
        return
    if loc[0] == "rules":
        rules = ruleset.live_rules if "live" in loc else ruleset.rules
        got = getattr(rules[loc[1]], loc[-1])
        assert math.isfinite(got) and 0 <= got <= RULE_RANGES[loc[-1]][1], (loc, value, got)
    else:
        lo, hi = RULE_RANGES[loc[0]]
        got = getattr(ruleset, loc[0])
        assert math.isfinite(got) and lo <= got <= hi, (loc, value, got)


# --- the nightly config -----------------------------------------------------------------------------

NIGHTLY = yaml.safe_load(nightly_mod.DEFAULT_CONFIG.read_text())
NIGHTLY["baselines"] = str(REPO / NIGHTLY["baselines"])
NIGHTLY_LOCS = locations(None, NIGHTLY)


@PROPS
@given(st.data())
def test_nightly_config_extreme_values_are_validated_or_refused_with_their_range(tmp_path_factory, data):
    loc = data.draw(st.sampled_from(NIGHTLY_LOCS))
    value = data.draw(values((1, True, nightly_mod.MAX_NIGHTLY_REPEATS, True)))
    tmp = tmp_path_factory.mktemp("nightly")
    path = tmp / "nightly.yaml"
    path.write_text(yaml.safe_dump(put(NIGHTLY, loc, value), sort_keys=False))
    try:
        cfg = nightly_mod.load_config(path, list(nightly_mod.PARTS))
    except UserError as exc:
        refused_well(str(exc), path, loc, need_range="percentiles" not in loc)
        err = io.StringIO()
        with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as info:
            nightly_mod.main(["--config", str(path), "--out", str(tmp / "out"), "--history", str(tmp / "h")])
        assert info.value.code == 2 and len(err.getvalue().strip().splitlines()) == 1, err.getvalue()
        assert not (tmp / "out").exists()
        return
    got = cfg
    for part in loc:
        got = got[part]
    assert isinstance(got, (int, float)) and math.isfinite(got), (loc, value)
    if loc[-1] == "repeats":
        assert float(got).is_integer() and 1 <= got <= nightly_mod.MAX_NIGHTLY_REPEATS
    if "percentiles" in loc:
        nightly_mod.fidelity_rule(cfg["fidelity"])  # a percentile `pddbench fidelity` reports


# --- the walk reaches every numeric field ------------------------------------------------------------

def test_the_walk_reaches_every_numeric_field_of_each_spec():
    names = lambda locs: {p for loc in locs for p in loc if isinstance(p, str)}  # noqa: E731
    for model, locs in ((DesignsSpec, DESIGNS_LOCS), (SweepFile, SWEEP_LOCS)):
        want = {loc[-1] for loc in model_numbers(model) if isinstance(loc[-1], str)}
        want |= {loc[-2] for loc in model_numbers(model) if not isinstance(loc[-1], str)}
        assert want <= names(locs), (model.__name__, want - names(locs))
    assert {"budget", "sizes", "requests", "seeds", "iterations", "load_fraction", "article",
            "tolerance"} <= names(DESIGNS_LOCS)
    assert {"repeats", "iterations", "range", "linspace", "set"} <= names(SWEEP_LOCS)
    assert {"rel", "abs", "live", "confidence", "bootstrap", "seed"} <= names(RULES_LOCS)
    assert {"max_slowdown_pct", "margin_pct", "repeats", "percentiles"} <= names(NIGHTLY_LOCS)


@pytest.mark.parametrize("field, value, expect", [
    ("claims.0.article", math.nan, "valid range: -100 <= article <= 1e+06"),
    ("claims.0.article", 1e300, "valid range: -100 <= article <= 1e+06"),
    ("claims.0.tolerance", 1e300, "valid range: 0 <= tolerance <= 1000"),
    ("sizes.0", 0, "valid range: 1 <= sizes <= 4,096"),
    ("budget.H200", 10 ** 30, "valid range: 1 <= H200 <= 1,000,000"),
    ("load_fraction", 5e-324, "valid range: 0.001 <= load_fraction < 1"),
    ("requests", 1e300, "valid range: 50 <= requests <= 1,000,000"),
])
def test_designs_refusals_name_the_range(tmp_path, field, value, expect):
    loc = tuple(int(p) if p.isdigit() else p for p in field.split("."))
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(put(DESIGNS, loc, value), sort_keys=False))
    res = cli("designs", path, "--max-searches", "1")
    assert res.code == 2 and res.one_line and f"field '{field}'" in res.err and expect in res.err, res.err
