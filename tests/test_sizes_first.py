"""Every size a user controls is counted and checked before any work, allocation or folder claim:
past its stated limit a command exits 2 with one line naming the size, an estimate and the option
that raises it, and leaves no folder and no .claim, so the same command with the same --out then
works. Also: non-finite sweep bounds, a --resume of another sweep, an unreachable or malformed
Ray address, and property tests over sweep axes and optimize budgets."""

from __future__ import annotations

import functools
import itertools
import json
import math
import socket
import time
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pddbench.core.errors import InputError, UserError
from tests.inprocess import cli

SMALL_RUN = ["--set", "workload.synth.requests=60"]


def _refused(res, *words: str) -> str:
    """Exit 2, one line, no traceback; the line holds every word."""
    assert res.code == 2, (res.code, res.err[-2000:])
    assert res.one_line, res.err
    line = res.err.strip()
    for w in words:
        assert w in line, (w, line)
    return line


def _nothing_left(out: Path) -> None:
    assert not out.exists() or (out.is_dir() and not any(out.iterdir())), sorted(p.name for p in out.rglob("*"))


def _sweep_file(tmp: Path, axes: str, name: str = "s.yaml", measure: str = "run", extra: str = "") -> Path:
    path = tmp / name
    path.write_text(f"base: paper/pdd\nmeasure: {measure}\nset: [workload.synth.requests=60]\n{extra}axes:\n{axes}")
    return path


SMALL_AXES = "  sla.tpot_ms: [90]\n"


# -- sweep: huge axes are counted, never built ------------------------------------------------

HUGE_AXES = [
    ("  sla.tpot_ms: {linspace: [50, 100, 1000000000]}\n", "1,000,000,000 points"),
    ("  sla.tpot_ms: {linspace: [50, 100, 1e9]}\n", "1,000,000,000 points"),  # YAML 1.1 reads 1e9 as text
    ("  sla.tpot_ms: {range: [1, 1000000001, 1]}\n", "1,000,000,001 points"),
    ("  sla.tpot_ms: {range: [1, 2, 1e-300]}\n", "1.0e+300 points"),
    ("  sla.tpot_ms: {range: [-1e308, 1e308, 1e-300]}\n", "e+608 points"),  # the span overflows float
    ("  sla.tpot_ms: {range: [1, 1000, 1]}\n  sla.ttft_ms: {range: [2, 1000, 1]}\n", "999,000 points"),
    ("  zip:\n    sla.tpot_ms: {linspace: [50, 100, 100000]}\n    sla.ttft_ms: {linspace: [1, 2, 100000]}\n",
     "100,000 points"),
]


@pytest.mark.parametrize("axes, size", HUGE_AXES)
def test_huge_sweep_refused_by_its_count(tmp_path, monkeypatch, axes, size):
    import pddbench.sweep.spec as spec

    built = []
    monkeypatch.setattr(spec.Dimension, "rows", lambda self: built.append(self) or [])
    monkeypatch.setattr(spec, "_resolve_point", lambda *a, **k: built.append(a))
    out = tmp_path / "o"
    res = cli("sweep", _sweep_file(tmp_path, axes), "--out", out, "-j", "1")
    _refused(res, size, "more than the limit of 10,000", "work", "--max-points", "s.yaml")
    assert not built  # refused by arithmetic: no axis value and no point was made
    _nothing_left(out)


def test_huge_sweep_refusal_leaves_the_out_usable(tmp_path):
    out = tmp_path / "o"
    out.mkdir()  # an existing empty --out stays empty, without a .claim
    path = _sweep_file(tmp_path, HUGE_AXES[0][0])
    _refused(cli("sweep", path, "--out", out, "-j", "1"), "1,000,000,000 points")
    assert list(out.iterdir()) == []
    _sweep_file(tmp_path, SMALL_AXES)  # the file corrected: the same command, the same --out
    res = cli("sweep", path, "--out", out, "-j", "1")
    assert res.code == 0, res.err[-2000:]
    assert (out / "points.parquet").is_file() and not (out / ".claim").exists()


def test_max_points_raises_the_limit(tmp_path):
    path = _sweep_file(tmp_path, "  sla.tpot_ms: [80, 90, 100]\n")
    _refused(cli("sweep", path, "--out", tmp_path / "o", "--max-points", "2"), "3 points", "limit of 2")
    res = cli("sweep", path, "--out", tmp_path / "o", "--max-points", "3", "-j", "1")
    assert res.code == 0, res.err[-2000:]


# -- sweep: non-finite bounds are input errors ------------------------------------------------

NON_FINITE = [(kind, field, value) for kind, fields in (("range", ("start", "stop", "step")),
                                                         ("linspace", ("start", "stop")))
              for field in fields for value in (".inf", "-.inf", ".nan", "1e400", "inf", "'nan'")]


def _bounds(kind: str, field: str, value: str) -> str:
    good = {"range": {"start": "60", "stop": "100", "step": "20"}, "linspace": {"start": "60", "stop": "100"}}[kind]
    good[field] = value
    third = [] if kind == "range" else ["3"]
    return ", ".join([good["start"], good["stop"], *([good["step"]] if kind == "range" else third)])


@pytest.mark.parametrize("kind, field, value", NON_FINITE)
def test_non_finite_bound_is_an_input_error(tmp_path, kind, field, value):
    path = _sweep_file(tmp_path, f"  sla.tpot_ms: {{{kind}: [{_bounds(kind, field, value)}]}}\n")
    out = tmp_path / "o"
    _refused(cli("sweep", path, "--out", out), f"{path}:", f"axes.sla.tpot_ms.{kind}.{field}", "finite")
    _nothing_left(out)


def test_non_finite_count_and_then_the_same_out_works(tmp_path):
    out = tmp_path / "o"
    path = _sweep_file(tmp_path, "  sla.tpot_ms: {linspace: [60, 100, .inf]}\n")
    _refused(cli("sweep", path, "--out", out), "axes.sla.tpot_ms.linspace.count", "finite")
    _nothing_left(out)
    _sweep_file(tmp_path, "  sla.tpot_ms: {linspace: [60, 100, 1]}\n")
    assert cli("sweep", path, "--out", out, "-j", "1").code == 0


# -- run --repeat -------------------------------------------------------------------------------

def test_repeat_limit_checked_first(tmp_path):
    out = tmp_path / "o"
    _refused(cli("run", "paper/pdd", *SMALL_RUN, "--repeat", "10000", "--out", out),
             "--repeat 10,000 runs", "limit of 100", "of work", "--max-repeats")
    _nothing_left(out)
    res = cli("run", "paper/pdd", *SMALL_RUN, "--repeat", "2", "--out", out)
    assert res.code == 0, res.err[-2000:]
    meta = json.loads((out / "repeats.json").read_text())
    assert meta["state"] == "complete" and meta["runs"] == ["repeat-0", "repeat-1"]
    assert not (out / ".claim").exists()


@pytest.mark.parametrize("stop, state, note", [(KeyboardInterrupt, "interrupted", "INTERRUPTED"),
                                               (RuntimeError("engine died"), "failed", "FAILED")])
def test_repeats_stopped_midway_say_so(tmp_path, monkeypatch, stop, state, note):
    import pddbench.measure.runner as runner
    from pddbench.measure.repeats import run_repeats

    real, calls = runner.run_scenario, []

    def second_fails(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise stop
        return real(*args, **kwargs)
    monkeypatch.setattr(runner, "run_scenario", second_fails)
    out = tmp_path / "o"
    # called directly: the CLI ends the process on Ctrl-C (exit 130), which would end pytest too
    with pytest.raises(KeyboardInterrupt if state == "interrupted" else RuntimeError) as exc:
        run_repeats(Path("paper/pdd"), ["workload.synth.requests=60"], tmp_path / "results", out, 3)
    if state == "interrupted":
        assert "kept 1 of 3 repeats" in str(exc.value)
    meta = json.loads((out / "repeats.json").read_text())
    assert meta["state"] == state and meta["runs"] == ["repeat-0"] and meta["repeats"] == 3
    assert (out / note).is_file() and not (out / ".claim").exists()


def test_repeats_failing_at_once_leave_nothing(tmp_path, monkeypatch):
    import pddbench.measure.runner as runner

    real = runner.run_scenario
    monkeypatch.setattr(runner, "run_scenario", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("no engine")))
    out = tmp_path / "o"
    assert cli("run", "paper/pdd", *SMALL_RUN, "--repeat", "2", "--out", out).code == 3
    _nothing_left(out)
    monkeypatch.setattr(runner, "run_scenario", real)
    assert cli("run", "paper/pdd", *SMALL_RUN, "--repeat", "2", "--out", out).code == 0


# -- optimize -----------------------------------------------------------------------------------

@pytest.mark.parametrize("scenario, budget, size", [
    ("paper/same-dc-pd", "A=10000", "1,249 candidate splits"),
    ("paper/same-dc-pd", "A=1000000000", "124,999,999 candidate splits"),
    ("paper/pdd", "A=1000000000000,B=1000000000000", "124,999,999,999 candidate splits"),
    ("paper/pdd --set deployment.main.chip=A", "A=1000000000000", "gives at least"),  # three roles on chip A
])
def test_optimize_splits_counted_first(tmp_path, scenario, budget, size):
    out = tmp_path / "o"
    _refused(cli("optimize", *scenario.split(), "--budget", budget, "--out", out), size, "limit of 500",
             "of work", "--max-splits")
    _nothing_left(out)


def test_optimize_refusal_then_the_same_out_works(tmp_path):
    out = tmp_path / "o"
    _refused(cli("optimize", "paper/same-dc-pd", "--budget", "A=40", "--out", out, "--max-splits", "3"),
             "4 candidate splits", "limit of 3")
    _nothing_left(out)
    res = cli("optimize", "paper/same-dc-pd", "--budget", "A=24", "--set", "workload.synth.requests=100",
              "--iterations", "1", "--out", out, "-j", "1")
    assert res.code == 0, res.err[-2000:]
    assert "candidate splits" in res.err and (out / "optimize.json").is_file()


@pytest.mark.parametrize("budget, words", [
    ("A=8,A=16", ["chip A is given twice"]),
    ("A=43,B=32,A=1", ["chip A is given twice"]),
    ("A=43,X=32", ["chip X is not used", "A, B"]),
    ("A=43,B=0", ["at least 1 chip"]),
    ("A=43,B=-4", ["at least 1 chip"]),
    ("A=43,=32", ["names no chip"]),
    ("A=43,B=3.5", ["'3.5' is not a whole number"]),
    (",", ["give chips per chip kind"]),
])
def test_optimize_bad_budget_names_it(tmp_path, budget, words):
    out = tmp_path / "o"
    _refused(cli("optimize", "paper/pdd", "--budget", budget, "--out", out), *words)
    _nothing_left(out)


def test_optimize_sizes_checked(tmp_path):
    _refused(cli("optimize", "paper/same-dc-pd", "--budget", "A=88", "--sizes", "5000", "--out", tmp_path / "o"),
             "5000 chips per instance")
    many = ",".join(str(i) for i in range(1, 100))
    _refused(cli("optimize", "paper/same-dc-pd", "--budget", "A=88", "--sizes", many, "--out", tmp_path / "o"),
             "99 distinct sizes", "limit of 64")
    _nothing_left(tmp_path / "o")


# -- trace synth ----------------------------------------------------------------------------------

def test_synth_requests_limit(tmp_path):
    out = tmp_path / "t.jsonl"
    _refused(cli("trace", "synth", "--requests", "10000000", "--out", out), "--requests 10,000,000",
             "4,100 MB", "limit of 1,000,000", "of work", "--max-requests")
    assert not out.exists() and list(tmp_path.iterdir()) == []
    assert cli("trace", "synth", "--requests", "50", "--out", out).code == 0
    assert len(out.read_text().splitlines()) == 50


# -- capacity ------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, words", [
    (["--iterations", "21"], ["--iterations 21", "limit of 20", "simulated requests"]),
    (["--iterations", "1000000000000"], ["--iterations 1,000,000,000,000", "simulated requests"]),
    (["--probes-per-round", "65", "-j", "2"], ["--probes-per-round 65", "limit of 64", "simulated requests"]),
])
def test_capacity_sizes_checked_with_the_work_stated(tmp_path, args, words):
    out = tmp_path / "o"
    _refused(cli("capacity", "paper/pdd", "--set", "workload.synth.requests=100", *args, "--out", out), *words)
    _nothing_left(out)


def test_capacity_refusal_then_the_same_out_works(tmp_path):
    out = tmp_path / "o"
    _refused(cli("capacity", "paper/pdd", "--set", "workload.synth.requests=100", "--iterations", "25",
                 "--out", out), "--iterations 25")
    _nothing_left(out)
    res = cli("capacity", "paper/pdd", "--set", "workload.synth.requests=100", "--iterations", "2", "--out", out)
    assert res.code == 0, res.err[-2000:]
    assert (out / "capacity.json").is_file() and not (out / ".claim").exists()


# -- sweep --resume of another sweep ---------------------------------------------------------------

def test_resume_refuses_another_sweep(tmp_path):
    first = _sweep_file(tmp_path, "  sla.tpot_ms: [80, 90]\n", "first.yaml")
    out = tmp_path / "o"
    assert cli("sweep", first, "--out", out, "-j", "1").code == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    other = _sweep_file(tmp_path, "  sla.ttft_ms: [1500, 2500]\n", "other.yaml")
    line = _refused(cli("sweep", other, "--resume", out, "-j", "1"), "first.yaml", "other.yaml", "another sweep")
    stored = json.loads(before["sweep.json"])["sweep"]["spec_hash"]
    assert stored[:12] in line
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before  # nothing rewritten
    # the same points written differently (another file name, a list for a range) are the same sweep
    same = _sweep_file(tmp_path, "  sla.tpot_ms: {range: [80, 90, 10]}\n", "same.yaml")
    assert cli("sweep", same, "--resume", out, "-j", "1").code == 0
    # a folder from before spec hashes: its points' keys decide
    meta = json.loads((out / "sweep.json").read_text())
    del meta["sweep"]["spec_hash"]
    (out / "sweep.json").write_text(json.dumps(meta))
    _refused(cli("sweep", other, "--resume", out), "another sweep", "unhashed")
    assert cli("sweep", first, "--resume", out, "-j", "1").code == 0


# -- Ray: an address where no head answers, or no address at all -----------------------------------

def _closed_port() -> int:
    """A loopback port nothing listens on, verified by a refused connection."""
    for _ in range(20):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with socket.socket() as c:
            c.settimeout(1)
            if c.connect_ex(("127.0.0.1", port)) != 0:
                return port
    pytest.skip("no closed loopback port found")


@pytest.mark.parametrize("address", ["closed", "127.0.0.1:99999", "not-an-address", "http://127.0.0.1:1",
                                     "127.0.0.1:", ":6379"])
def test_sweep_ray_address_fails_fast_in_one_line(tmp_path, monkeypatch, address):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    address = f"127.0.0.1:{_closed_port()}" if address == "closed" else address
    path = _sweep_file(tmp_path, SMALL_AXES)
    out = tmp_path / "o"
    started = time.monotonic()
    res = cli("sweep", path, address, "--ray", "--out", out)
    took = time.monotonic() - started
    _refused(res, address, "no Ray head answers" if address.startswith("127.0.0.1:") and address[-1].isdigit()
             and int(address.rsplit(":", 1)[1]) < 65536 else "not a Ray address")
    assert took < 30, took  # the design target is 10 s; loose here as the machine is shared
    _nothing_left(out)
    if address == "not-an-address":  # the corrected command, the same --out
        assert cli("sweep", path, "--out", out, "-j", "1").code == 0


def test_capacity_and_reproduce_ray_address_fail_fast(tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{_closed_port()}")
    out = tmp_path / "o"
    _refused(cli("capacity", "paper/pdd", "--set", "workload.synth.requests=100", "--ray", "--out", out),
             "RAY_ADDRESS=", "no Ray head answers")
    _nothing_left(out)
    _refused(cli("reproduce", "--ray", "--results", tmp_path / "r"), "RAY_ADDRESS=", "no Ray head answers")
    _nothing_left(tmp_path / "r")


# -- property tests: sweep axes ---------------------------------------------------------------------

LIMIT = 60
SPECIAL = [math.inf, -math.inf, math.nan]


def _bound():
    return st.one_of(st.integers(-1000, 1000), st.sampled_from(SPECIAL), st.sampled_from([1e300, -1e300, 1e-300]))


@st.composite
def _axis(draw):
    kind = draw(st.sampled_from(["list", "range", "linspace"]))
    if kind == "list":
        return [draw(st.integers(1, 5)) for _ in range(draw(st.integers(1, 4)))]
    if kind == "range":
        return {"range": [draw(_bound()), draw(_bound()), draw(st.one_of(_bound(), st.sampled_from([1e-9, 0.5])))]}
    count = draw(st.one_of(st.integers(-2, 30), st.sampled_from([10 ** 9, 10 ** 30, math.inf, math.nan])))
    return {"linspace": [draw(_bound()), draw(_bound()), count]}


def _expected(axis) -> int | None:
    """The axis's count by an independent oracle (exact fractions), or None when it is invalid."""
    if isinstance(axis, list):
        return len(axis)
    kind, nums = next(iter(axis.items()))
    if any(isinstance(x, float) and not math.isfinite(x) for x in nums):
        return None
    if kind == "range":
        start, stop, step = (Fraction(x) for x in nums)
        if step == 0 or (stop - start) * step < 0:
            return None
        # stop is included when within 1e-9 steps of the grid (float noise); off by one at most for
        # counts in the billions, which are past the limit either way
        return math.floor((stop - start) / step + Fraction(1, 10 ** 9)) + 1
    count = nums[2]
    return count if count >= 1 else None


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(axes=st.lists(_axis(), min_size=1, max_size=3), repeats=st.integers(1, 3))
def test_sweep_axes_accepted_iff_finite_and_within_limit(tmp_path, monkeypatch, axes, repeats):
    import yaml

    import pddbench.sweep.spec as spec

    names = ["sla.tpot_ms", "sla.ttft_ms", "network.wan_lines"][:len(axes)]
    path = tmp_path / "prop.yaml"
    path.write_text(yaml.safe_dump({"base": "paper/pdd", "measure": "run", "repeats": repeats,
                                    "axes": dict(zip(names, axes))}))
    built: list = []
    real_rows = spec.Dimension.rows
    monkeypatch.setattr(spec.Dimension, "rows", lambda self: built.append(1) or real_rows(self))
    monkeypatch.setattr(spec, "_resolve_point", lambda index, repeat, axes, *a: (index, repeat, axes))
    counts = [_expected(a) for a in axes]
    try:
        sweep = spec.load_sweep(path, max_points=LIMIT)
    except InputError as exc:
        assert "\n" not in str(exc)
        if None in counts:
            assert "axes." in (exc.field or ""), str(exc)
        else:
            total = math.prod(counts) * repeats
            assert total > LIMIT and "more than the limit" in str(exc), str(exc)
            assert not built  # refused before any axis value was built
        return
    assert None not in counts and math.prod(counts) * repeats <= LIMIT
    assert len(sweep.points) == math.prod(counts) * repeats
    assert [len(sweep.axis_values[n]) for n in names] == counts


# -- property tests: optimize budgets ----------------------------------------------------------------

def _fits(sc, role: str, size: int) -> bool:
    """An instance of `size` chips holds the model's weights with room for KV (written out here, not
    taken from the code under test)."""
    pool = getattr(sc.deployment, role)
    weights_gb = sc.model.params_total_b * sc.model.weight_bytes_per_param
    return size * sc.chips[pool.chip].memory_gb * pool.kv_memory_fraction > weights_gb


def _brute_count(sc, budget: dict, sizes: list[int]) -> int:
    from pddbench.sweep.optimize import _groups

    total = 1
    for chip, roles in _groups(sc):
        n = 0
        for sz in itertools.product(*[[x for x in sizes if _fits(sc, r, x)] for r in roles]):
            for ns in itertools.product(*[range(1, budget[chip] // s + 1) for s in sz]):
                left = budget[chip] - sum(a * b for a, b in zip(ns, sz))
                n += 0 <= left < min(sz)
        total *= n
    return total


_PART = st.one_of(
    st.tuples(st.sampled_from(["A", "B", "X", "", " A"]), st.sampled_from(["=", "=="]),
              st.one_of(st.integers(-3, 60).map(str), st.sampled_from(["1.5", "abc", "", str(10 ** 12)]))),
    st.integers(-3, 60).map(lambda n: ("", "", str(n))),
)


@settings(max_examples=1000, deadline=None)
@given(parts=st.lists(_PART, min_size=0, max_size=4), pdd=st.booleans(),
       sizes=st.lists(st.sampled_from([1, 2, 3, 5, 8]), min_size=1, max_size=3, unique=True))
def test_optimize_budget_accepted_iff_well_formed(parts, pdd, sizes):
    from pddbench.sweep.optimize import candidate_splits, check_split_count, parse_budget

    sc = _scenario("paper/pdd" if pdd else "paper/same-dc-pd")
    chips = {"A", "B"} if pdd else {"A"}
    text = ",".join(f"{n}{eq}{v}" for n, eq, v in parts)
    # the oracle
    seen: dict[str, int] = {}
    ok = bool([p for p in text.split(",") if p.strip()])
    for name, eq, value in parts:
        if not (name + eq + value).strip():
            continue
        if not eq:
            name = next(iter(chips)) if len(chips) == 1 else None
        elif eq == "==":
            name, value = name, "=" + value
        name = name.strip() if name is not None else None
        try:
            number = int(value.strip())
        except ValueError:
            number = None
        if not name or name not in chips or name in seen or number is None or number < 1:
            ok = False
            break
        seen[name] = number
    ok = ok and set(seen) == chips
    try:
        budget = parse_budget(text, sc)
    except UserError as exc:
        assert not ok, (text, str(exc))
        assert "\n" not in str(exc)
        return
    assert ok and budget == seen, (text, budget)
    try:
        n = check_split_count(sc, budget, sizes, max_splits=200)
    except UserError as exc:
        if "holds the model's weights" in str(exc):  # an instance of no size given can run the model
            assert any(not any(_fits(sc, r, x) for x in sizes) for r in sc.deployment.pools()), str(exc)
            return
        assert "no split fits" in str(exc) or "candidate splits" in str(exc), str(exc)
        if max(budget.values()) <= 60 and "no split fits" in str(exc):
            assert _brute_count(sc, budget, sizes) == 0
        return
    assert len(candidate_splits(sc, budget, sizes, 200)) == n
    if max(budget.values()) <= 60:
        assert n == _brute_count(sc, budget, sizes)


@functools.lru_cache(maxsize=None)
def _scenario(name: str):
    from pddbench.schema.scenario import load_scenario

    return load_scenario(name)
