"""docs/metrics.md defines every record field and every summary key, each once: checked against
the schema, a small simulation, a live replay against the fixed-latency stand-in server (no
vLLM) and the keys the live scenario runner adds (read from its source: it needs vLLM to run)."""

import ast
import json
import re
import subprocess
import sys
from collections import Counter

import pytest

from pddbench.metrics.records import RECORD_FIELDS, read_records
from tests.conftest import REPO, run_cli

DOC = REPO / "docs" / "metrics.md"
# dict-valued summary entries whose keys are data (instance names, reasons seen, counters), not names
FREE_FORM = {"failure_reasons", "pipelines", "handoff_modes", "instances", "engine_metrics", "link_calibration",
             "engines"}


def _section(title: str) -> tuple[list[str], set[str]]:
    """(names defined in the first column of the section's table, every `name` in the section)."""
    text = DOC.read_text()
    body = text.split(f"## {title}", 1)[1].split("\n## ", 1)[0]
    defined = []
    for line in body.splitlines():
        if line.startswith("|") and not line.startswith("| ---"):
            defined += re.findall(r"`([^`]+)`", line.split("|")[1])
    return defined, set(re.findall(r"`([^`]+)`", body))


def _once(defined: list[str]) -> set[str]:
    twice = [k for k, n in Counter(defined).items() if n > 1]
    assert not twice, f"docs/metrics.md defines these more than once: {twice}"
    return set(defined)


def _check_summary(summary: dict) -> None:
    defined, mentioned = _section("Summary metrics")
    defined = _once(defined)
    missing = set(summary) - defined
    assert not missing, f"summary keys docs/metrics.md does not define: {sorted(missing)}"
    for key, value in summary.items():
        if isinstance(value, dict) and key not in FREE_FORM:
            nested = set(value) - mentioned - {""}
            assert not nested, f"summary[{key!r}] has keys docs/metrics.md does not name: {sorted(nested)}"


def test_doc_defines_exactly_the_record_fields():
    defined = _once(_section("Per-request record")[0])
    assert defined == set(RECORD_FIELDS), (sorted(set(RECORD_FIELDS) - defined), sorted(defined - set(RECORD_FIELDS)))


def test_simulated_run_keys_are_defined(tmp_path):
    out = tmp_path / "run"
    res = run_cli("run", REPO / "scenarios" / "paper" / "pdd.yaml", "--set", "workload.synth.requests=200", "--out", out)
    assert res.returncode == 0, res.stderr
    assert list(read_records(out / "records.parquet").columns) == list(RECORD_FIELDS)
    _check_summary(json.loads((out / "summary.json").read_text()))


def test_live_replay_summary_keys_are_defined(tmp_path):
    from pddbench.live.net import free_port, wait_port

    port = free_port()
    srv = subprocess.Popen([sys.executable, "-m", "pddbench.live.fixed_server", "--port", str(port),
                            "--ttft-ms", "5", "--itl-ms", "1"])
    try:
        wait_port("127.0.0.1", port, timeout_s=10)
        trace = tmp_path / "t.jsonl"
        trace.write_text("".join(json.dumps({"timestamp": i * 20, "input_length": 100, "output_length": 3,
                                             "hash_ids": [i]}) + "\n" for i in range(5)))
        res = run_cli("replay", "--endpoint", f"http://127.0.0.1:{port}", "--trace", trace, "--out", tmp_path / "r")
        assert res.returncode == 0, res.stderr
    finally:
        srv.terminate()
        srv.wait()
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert {"seed", "offered_rps", "interrupted"} <= set(summary)
    assert list(read_records(tmp_path / "r" / "records.parquet").columns) == list(RECORD_FIELDS)
    _check_summary(summary)


def _summary_keys_written_in(path) -> set[str]:
    """String keys a module puts into a dict named `summary`: summary.update({...}),
    summary.update({k: other[k] for k in (...)}) and summary["key"] = ..."""
    keys: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update"
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "summary" and node.args):
            arg = node.args[0]
            if isinstance(arg, ast.Dict):
                keys |= {k.value for k in arg.keys if isinstance(k, ast.Constant)}
            elif isinstance(arg, ast.DictComp):
                keys |= {c.value for g in arg.generators for c in ast.walk(g.iter) if isinstance(c, ast.Constant)}
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) and \
                isinstance(node.value, ast.Name) and node.value.id == "summary" and isinstance(node.slice, ast.Constant):
            keys.add(node.slice.value)
    return keys


@pytest.mark.parametrize("module", ["live/live_summary.py", "live/replay.py", "measure/runner.py"])
def test_keys_the_runners_add_are_defined(module):
    keys = _summary_keys_written_in(REPO / "pddbench" / module)
    assert keys, f"found no summary keys in pddbench/{module}: has it moved? update this test"
    _check_summary(dict.fromkeys(keys))
