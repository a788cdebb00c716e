"""Property: nothing a user can feed the CLI ends in a traceback. Trace lines, scenario YAML and
--set values are generated from the schema and mutated; every example must exit 0, or exit 2 with
one line naming the file, and leave nothing in --out on exit 2.

A bounded number of examples runs in the normal suite; PDDBENCH_FUZZ_EXAMPLES=2000 (nightly)
runs more."""

from __future__ import annotations

import gzip
import json
import os
import uuid
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import run_cli
from tests.inprocess import cli

EXAMPLES = int(os.environ.get("PDDBENCH_FUZZ_EXAMPLES", "0"))
FAST = settings(max_examples=EXAMPLES or 40, deadline=None, derandomize=not EXAMPLES,
                suppress_health_check=list(HealthCheck))
SLOW = settings(max_examples=EXAMPLES // 10 or 8, deadline=None, derandomize=not EXAMPLES,
                suppress_health_check=list(HealthCheck))

WEIRD = st.sampled_from([-1, 0, 1, 2**63, 2**64 + 1, 10**30, 1e308, -1e-300, 1e-300, "x", "", None, True, [], {},
                         [1, [2, [3]]], float("inf"), float("nan"), "9" * 5000, 1.5, "1e999"])


# -- traces ------------------------------------------------------------------------------------

@st.composite
def trace_lines(draw) -> list[dict]:
    n = draw(st.integers(1, 6))
    t, lines = 0, []
    for _ in range(n):
        t += draw(st.integers(0, 5000))
        inp = draw(st.integers(1, 2000))
        lines.append({"timestamp": t, "input_length": inp, "output_length": draw(st.integers(0, 50)),
                      "hash_ids": list(range(-(-inp // 512)))})
    return lines


@st.composite
def trace_bytes(draw) -> bytes:
    lines = draw(trace_lines())
    mutation = draw(st.sampled_from(["none", "field", "drop", "epoch", "dup", "raw", "deep", "encoding"]))
    i = draw(st.integers(0, len(lines) - 1))
    key = draw(st.sampled_from(["timestamp", "input_length", "output_length", "hash_ids", "session_id", "turn"]))
    if mutation == "field":
        lines[i][key] = draw(WEIRD)
    elif mutation == "drop":
        lines[i].pop(key, None)
    elif mutation == "epoch":
        lines[i]["timestamp"] = 1_700_000_000_000 + lines[i]["timestamp"]
    text = [json.dumps(line) for line in lines]  # inf/nan become Infinity/NaN, as careless writers do
    if mutation == "dup":
        text[i] = text[i][:-1] + ', "timestamp": 0}'
    elif mutation == "raw":
        text[i] = draw(st.text(max_size=40))
    elif mutation == "deep":
        text[i] = "[" * 5000 + "]" * 5000
    data = ("\n".join(text) + "\n")
    if mutation == "encoding":
        return draw(st.sampled_from([
            lambda s: s.encode("utf-16"), lambda s: s.encode("utf-16-le"), lambda s: b"\xef\xbb\xbf" + s.encode(),
            lambda s: gzip.compress(s.encode()), lambda s: gzip.compress(s.encode())[:20],
            lambda s: s.replace('"', '"\xe9', 1).encode("latin-1")]))(data)
    return data.encode()


def _check(res, tmp_path: Path, name: str, out: Path | None = None) -> None:
    assert "Traceback" not in res.err, res.err
    assert res.code in (0, 2), (res.code, res.err)
    if res.code == 2:
        assert res.one_line, res.err
        assert name in res.err or "--set" in res.err or "--out" in res.err, res.err
        assert out is None or not out.exists(), list(out.iterdir())


@FAST
@given(data=trace_bytes(), with_out=st.booleans())
def test_trace_stats_never_crashes(tmp_path_factory, data, with_out):
    tmp = tmp_path_factory.mktemp("trace")
    path = tmp / f"t-{uuid.uuid4().hex[:6]}.jsonl"
    path.write_bytes(data)
    out = tmp / "out"
    res = cli("trace", "stats", path, "--json", *(["--out", out] if with_out and len(data) < 3000 else []))
    _check(res, tmp, path.name, out if with_out else None)


# -- scenarios ---------------------------------------------------------------------------------

def _base_scenario() -> dict:
    from pddbench.schema.scenario import read_yaml
    from pddbench.core.shipped import resolve_scenario

    data, _ = read_yaml(resolve_scenario("paper/pdd"))
    data["workload"] = {"source": "synth", "synth": {"requests": 12, "seed": 1}}
    return data


def _leaves(node, path=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, (*path, k))
    else:
        yield path


@st.composite
def scenario_and_sets(draw):
    data = _base_scenario()
    leaves = list(_leaves(data))
    sets = []
    for _ in range(draw(st.integers(0, 2))):
        path = draw(st.sampled_from(leaves))
        value = draw(WEIRD)
        if draw(st.booleans()):
            node = data
            for part in path[:-1]:
                node = node[part]
            node[path[-1]] = value
        else:
            sets.append(f"{'.'.join(map(str, path))}={yaml.safe_dump(value, default_flow_style=True).strip().removesuffix('...').strip() if value != '' else ''}")
    if draw(st.booleans()):
        data[draw(st.sampled_from(["nonsense", "workload"]))] = draw(WEIRD)
    return data, sets


@SLOW
@given(case=scenario_and_sets())
def test_run_never_crashes(tmp_path_factory, case):
    data, sets = case
    tmp = tmp_path_factory.mktemp("sc")
    path = tmp / "sc.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    out = tmp / "out"
    args = [a for s in sets for a in ("--set", s)]
    _check(cli("run", path, *args, "--out", out), tmp, path.name, out)


@FAST
@given(text=st.text(max_size=200), encoding=st.sampled_from(["utf-8", "utf-16", "latin-1", "utf-8-sig"]))
def test_scenario_text_never_crashes(tmp_path_factory, text, encoding):
    tmp = tmp_path_factory.mktemp("yaml")
    path = tmp / "s.yaml"
    try:
        path.write_bytes(text.encode(encoding))
    except UnicodeEncodeError:
        path.write_bytes(text.encode("utf-8"))
    out = tmp / "out"
    res = cli("run", path, "--set", "workload.synth.requests=5", "--out", out)
    _check(res, tmp, "s.yaml", out)


@pytest.mark.parametrize("args", [
    ["trace", "stats", "/dev/null"], ["trace", "stats", "."], ["run", "/dev/null"], ["run", "."],
    ["run", "paper/pdd", "--set", "workload.trace="], ["run", "paper/pdd", "--set", "sla.ttft_ms=.inf"],
    ["run", "paper/pdd", "--set", "workload.rate_scale=1e-300"], ["trace", "synth", "--target-hist", "nan,0,0,0,0,0,1"],
])
def test_subprocess_cases(args, tmp_path):
    res = run_cli(*args, "--out" if args[0] == "run" else "--json", *( [str(tmp_path / "o")] if args[0] == "run" else []))
    if args[:2] == ["trace", "synth"]:
        res = run_cli(*args)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and res.stderr.startswith("error:"), res.stderr
    assert not (tmp_path / "o").exists()
