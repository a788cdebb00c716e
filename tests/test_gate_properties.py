"""Property tests: `pddbench gate` fails closed.

- values: summaries whose ruled metrics are drawn from finite numbers and from what must be refused
  (NaN, +-inf as 1e999, a 400-digit integer, a string, a boolean, a mapping, a list, null, missing),
  on either side: exit 0 only when every ruled value is a finite number on both sides and within
  its tolerance; 1 when they all are and one is beyond it; 2 (one line naming the file and the
  metric) when any is not.
- rules: random rel/abs tolerances are accepted iff finite and >= 0; random rule names gate only
  when each names a numeric metric of the inputs.
The gate runs in this process (tests.inprocess.cli) on copies of one small simulator run."""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from pddbench.core.errors import UserError
from pddbench.gate.inputs import flatten, why_not_number
from pddbench.gate.rules import MAX_ABS, MAX_REL, parse_rules
from tests.inprocess import cli
from tests.test_gate import edited_run

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# the ruled metrics of the value property: (dotted name, worse, rel, abs)
RULED = [("ttft_ms.p90", "up", 0.05, 1.0), ("slo_attainment", "down", 0.0, 0.01), ("goodput_rps", "down", 0.03, 0.0)]
RULES_YAML = "rules:\n" + "".join(f"  {m}: {{worse: {w}, rel: {r}, abs: {a}}}\n" for m, w, r, a in RULED)

# what must be refused, as JSON text planted into summary.json (json.dumps cannot write most of it)
BAD = ["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "1" + "0" * 400, '"12.5"', '"fast"', "true", "false",
       '{"v": 1}', "[1, 2]", "null", "MISSING"]


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("gate-prop")
    res = cli("run", "paper/same-dc-pd", "--set", "workload.synth.requests=20", "--out", str(root / "run"))
    assert res.code == 0, res.err
    return root / "run"


def _set(summary: dict, dotted: str, value) -> None:
    node = summary
    *parents, leaf = dotted.split(".")
    for p in parents:
        node = node[p]
    if value == "MISSING":
        node.pop(leaf, None)
    else:
        node[leaf] = value


def _summary_text(base: dict, values: dict[str, object]) -> str:
    """summary.json text with each ruled metric set to a number, or to planted JSON text (BAD)."""
    summary = json.loads(json.dumps(base))
    planted = {}
    for i, (metric, value) in enumerate(values.items()):
        if isinstance(value, str) and value != "MISSING":
            planted[f'"@plant{i}@"'] = value
            value = f"@plant{i}@"
        _set(summary, metric, value)
    text = json.dumps(summary, indent=1)
    for marker, raw in planted.items():
        text = text.replace(marker, raw)
    return text


number = st.one_of(st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False),
                   st.integers(min_value=0, max_value=10 ** 6))
side_value = st.one_of(number, number, st.sampled_from(BAD))


@st.composite
def pairs(draw):
    """(baseline, candidate) per ruled metric; the candidate often a small change of the baseline;
    about half the examples are all numbers (to reach both exit 0 and exit 1)."""
    out = {}
    values = number if draw(st.booleans()) else side_value
    for metric, *_ in RULED:
        base = draw(values)
        if isinstance(base, (int, float)) and draw(st.booleans()):
            cand = base * draw(st.floats(min_value=0.8, max_value=1.2))
        else:
            cand = draw(values)
        out[metric] = (base, cand)
    return out


def _valid(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _regression(base: float, cand: float, worse: str, rel: float, ab: float) -> bool:
    diff = cand - base
    bad = diff if worse == "up" else -diff
    return bad > max(ab, rel * abs(base)) + 1e-9 * max(1.0, abs(base))


@SETTINGS
@given(values=pairs())
def test_gate_never_passes_unless_every_ruled_value_is_finite_and_within(small_run, values):
    summary = json.loads((small_run / "summary.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "rules.yaml").write_text(RULES_YAML)
        edited_run(small_run, tmp / "base", _summary_text(summary, {m: b for m, (b, _) in values.items()}))
        edited_run(small_run, tmp / "cand", _summary_text(summary, {m: c for m, (_, c) in values.items()}))
        res = cli("gate", tmp / "cand", "--baseline", tmp / "base", "--rules", tmp / "rules.yaml",
                  "--history", tmp / "h", "--json", tmp / "g.json")
    invalid = [m for m, pair in values.items() if not all(_valid(v) for v in pair)]
    for pair in values.values():
        for v in pair:
            event(f"value: {'finite' if _valid(v) else v[:12]}")
    event(f"exit {res.code}")
    if invalid:
        assert res.code == 2, (values, res.code, res.out[-500:])
        assert res.one_line and any(m in res.err for m in invalid), res.err
        # the file: the summary holding the value; a metric missing on both sides is the rules' fault
        gone = [m for m in invalid if values[m] == ("MISSING", "MISSING")]
        assert "summary.json" in res.err or (gone and "rules.yaml" in res.err and "neither" in res.err), res.err
        return
    regressions = [m for m, w, r, a in RULED if _regression(float(values[m][0]), float(values[m][1]), w, r, a)]
    assert res.code == (1 if regressions else 0), (values, res.code, res.err, res.out[-800:])
    for m in regressions:
        assert m in res.out


# --- rules files ---------------------------------------------------------------------------------

tolerance = st.one_of(
    st.floats(min_value=0, max_value=100), st.integers(min_value=0, max_value=100),  # the usual: accepted
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-10 ** 400, max_value=10 ** 400),
    st.floats(allow_nan=True, allow_infinity=True).map(lambda x: f"{x}%"),
    st.sampled_from([True, False, None, "five", "", "5 %", [1], {"v": 1}]),
)


def _accepted(value, percent_ok: bool) -> bool:
    """percent_ok: a rel (a fraction or a percentage, at most MAX_REL); else an abs (at most MAX_ABS)."""
    hi = MAX_REL if percent_ok else MAX_ABS
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, str):
        if not percent_ok:
            return False
        text = value.strip()
        try:
            number = float(text[:-1]) / 100 if text.endswith("%") else float(text)
        except ValueError:
            return False
        return math.isfinite(number) and 0 <= number <= hi
    if isinstance(value, (int, float)):
        try:
            return math.isfinite(float(value)) and 0 <= value <= hi
        except OverflowError:
            return False
    return False


@settings(max_examples=100, deadline=None)
@given(rel=tolerance, ab=tolerance, live=st.booleans())
def test_rule_tolerances_accepted_iff_finite_and_non_negative(rel, ab, live):
    rule = {"worse": "up"}
    spec = {"rel": rel, "abs": ab}
    if live:
        rule["live"] = spec
    else:
        rule.update(spec)
    ok = _accepted(rel, percent_ok=True) and _accepted(ab, percent_ok=False)
    event("accepted" if ok else "refused")
    try:
        rs = parse_rules({"rules": {"ttft_ms.p90": rule}}, "t.yaml")
    except UserError as exc:
        assert not ok, (rel, ab, str(exc))
        assert "t.yaml" in str(exc) and "ttft_ms.p90" in str(exc)
        return
    assert ok, (rel, ab)
    got = rs.live_rules["ttft_ms.p90"] if live else rs.rules["ttft_ms.p90"]
    assert math.isfinite(got.rel) and got.rel >= 0 and math.isfinite(got.abs) and got.abs >= 0


def _yaml_number(x: float) -> str:
    return ".nan" if math.isnan(x) else ".inf" if x == math.inf else "-.inf" if x == -math.inf else repr(x)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rel=st.floats(allow_nan=True, allow_infinity=True), ab=st.floats(allow_nan=True, allow_infinity=True))
def test_rules_file_tolerances_through_the_cli(small_run, rel, ab):
    """The same through a YAML file and the CLI: .nan, .inf and negatives are exit 2, one line."""
    with tempfile.TemporaryDirectory() as tmp:
        rules = Path(tmp) / "rules.yaml"
        rules.write_text(f"rules:\n  ttft_ms.p90: {{worse: up, rel: {_yaml_number(rel)}, abs: {_yaml_number(ab)}}}\n")
        res = cli("gate", small_run, "--baseline", small_run, "--rules", rules, "--history", Path(tmp) / "h")
    ok = all(math.isfinite(x) and 0 <= x <= hi for x, hi in ((rel, MAX_REL), (ab, MAX_ABS)))
    event("accepted" if ok else "refused")
    assert res.code == (0 if ok else 2), (rel, ab, res.err)
    if not ok:
        assert res.one_line and "rules.yaml" in res.err, res.err


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_rule_names_must_name_numeric_metrics_of_the_inputs(small_run, data):
    summary = json.loads((small_run / "summary.json").read_text())
    leaves = flatten(summary)
    numeric = sorted(n for n, v in leaves.items() if v is not None and why_not_number(v) is None)
    other = sorted(set(leaves) - set(numeric)) + ["seed", "provenance.cpu_cores", "ttft_ms.p91"]
    names = data.draw(st.lists(st.one_of(st.sampled_from(numeric), st.sampled_from(numeric), st.sampled_from(other),
                                         st.from_regex(r"[a-z_]{1,12}(\.[a-z0-9]{1,4})?", fullmatch=True)),
                               min_size=1, max_size=4, unique=True))
    with tempfile.TemporaryDirectory() as tmp:
        rules = Path(tmp) / "rules.yaml"
        rules.write_text("rules:\n" + "".join(f"  {json.dumps(n)}: {{worse: up, rel: 5%}}\n" for n in names))
        res = cli("gate", small_run, "--baseline", small_run, "--rules", rules, "--history", Path(tmp) / "h")
    bad = [n for n in names if n not in numeric]
    event("refused" if bad else "accepted")
    if bad:
        assert res.code == 2 and res.one_line, (names, res.code, res.err)
        assert any(n in res.err for n in bad), res.err
    else:
        assert res.code == 0 and "identical" in res.out, (names, res.err)


def test_property_helpers_plant_what_they_say(small_run, tmp_path):
    """The planting itself: a planted value lands in the file as written (else the properties test nothing)."""
    summary = json.loads((small_run / "summary.json").read_text())
    text = _summary_text(summary, {"ttft_ms.p90": "1e999", "slo_attainment": "MISSING", "goodput_rps": 2})
    assert '"p90": 1e999' in text and '"slo_attainment"' not in text and '"goodput_rps": 2' in text
    edited_run(small_run, tmp_path / "x", text)
    assert (tmp_path / "x" / "summary.json").read_text() == text
    assert (tmp_path / "x" / "records.parquet").read_bytes() == (small_run / "records.parquet").read_bytes()
    shutil.rmtree(tmp_path / "x")
