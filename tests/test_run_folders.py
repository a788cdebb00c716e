"""Output places and run folders: refused before any work, claimed atomically, and after Ctrl-C
either gone or marked interrupted in every file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli
from tests.inprocess import cli

TINY = ["--set", "workload.synth.requests=30"]


@pytest.fixture
def places(tmp_path):
    """A file, a path under that file and an existing run folder."""
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text("{}")
    return {"file": (a_file, "is a file"), "under": (a_file / "sub", "lies under"),
            "run": (run, "existing run folder")}


def _commands(tmp_path: Path, out: str) -> list[list[str]]:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}\n')
    return [["run", "paper/pdd", *TINY, out], ["capacity", "paper/pdd", *TINY, out],
            ["compare", str(tmp_path), out], ["trace", "stats", str(trace), out],
            ["fidelity", str(tmp_path), out], ["replay", "--endpoint", "http://127.0.0.1:9", "--trace", str(trace), out],
            ["handoff-bench", "--loopback", "--trials", "2", out]]


@pytest.mark.parametrize("kind", ["file", "under", "run"])
def test_every_writing_command_refuses_a_bad_out_before_work(tmp_path, places, kind):
    place, words = places[kind]
    _commands(tmp_path, "")  # writes the trace the commands read
    before = sorted(p.name for p in tmp_path.rglob("*"))
    for option in ("--out", "--results"):
        for args in _commands(tmp_path, f"{option}={place}"):
            if option == "--results" and (kind == "run" or args[0] in ("trace", "fidelity")):
                continue  # an existing folder is a fine results root; these commands have no --results
            res = cli(*args)
            assert res.code == 2, (args, res.err)
            assert res.one_line and (words in res.err or "not a folder" in res.err), (args, res.err)
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_trace_synth_out_places(tmp_path, places):
    assert cli("trace", "synth", "--requests", "3", "--out", str(places["under"][0])).code == 2
    assert "folder, not a file" in cli("trace", "synth", "--requests", "3", "--out", str(tmp_path)).err


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_unwritable_out_refused(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    res = cli("run", "paper/pdd", *TINY, "--out", str(locked / "x"))
    assert res.code == 2 and "not writable" in res.err


def test_error_after_claim_removes_the_folder_and_the_rerun_works(tmp_path):
    out = tmp_path / "out"
    res = cli("run", "paper/pdd", *TINY, "--set", "network.wan=no-such-profile", "--out", str(out))
    assert res.code == 2 and not out.exists()
    assert cli("run", "paper/pdd", *TINY, "--out", str(out)).code == 0
    assert (out / "summary.json").is_file() and not (out / ".claim").exists()


_CLAIM = """
import sys, time
from pathlib import Path
from pddbench.core.io import claim_out_folder
from pddbench.core.errors import UserError
start = float(sys.argv[2])
while time.time() < start:
    pass
try:
    claim_out_folder(Path(sys.argv[1]))
    print("claimed")
except UserError as exc:
    print("refused", exc)
"""


@pytest.mark.parametrize("exists", [False, True])
def test_claim_is_atomic_among_processes(tmp_path, exists):
    out = tmp_path / "same"
    if exists:
        out.mkdir()
    start = time.time() + 1.5  # every process spins until then, so they race
    procs = [subprocess.Popen([sys.executable, "-c", _CLAIM, str(out), str(start)], stdout=subprocess.PIPE,
                              text=True, cwd=REPO) for _ in range(6)]
    results = [p.communicate(timeout=60)[0] for p in procs]
    assert sum(r.startswith("claimed") for r in results) == 1, results
    assert all(r.startswith(("claimed", "refused")) for r in results), results


def test_two_runs_same_out_exactly_one_proceeds(tmp_path):
    out = tmp_path / "same"
    args = [sys.executable, "-m", "pddbench", "run", "paper/pdd", *TINY, "--out", str(out)]
    procs = [subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    done = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _ in done)
    assert codes == [0, 2], done
    loser = next(err for code, err in done if code == 2)
    assert "Traceback" not in loser and len(loser.strip().splitlines()) == 1


def _long_run(out: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pddbench", "run", "paper/pdd", "--set", "workload.synth.requests=60000",
                             "--out", str(out)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("delay_s", [0.0, 1.5, 4.0])
def test_sigint_leaves_nothing_or_a_folder_marked_interrupted(tmp_path, delay_s):
    out = tmp_path / "run"
    proc = _long_run(out)
    deadline = time.time() + 60
    while not (out / ".claim").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.02)  # started: the folder is claimed
    time.sleep(delay_s)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    print(delay_s, proc.returncode, last)
    if proc.returncode == 0 or "after the run was complete" in last:  # finished before the signal
        assert json.loads((out / "summary.json").read_text())["interrupted"] is False
        assert not (out / ".claim").exists()
        return
    assert proc.returncode == 130 and last.startswith("interrupted"), err
    if not out.exists():
        assert "nothing kept" in last
        return
    assert "kept" in last and not (out / ".claim").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True
    assert "INTERRUPTED" in (out / "run.log").read_text()
    import pandas as pd

    assert (pd.read_parquet(out / "records.parquet")["failure_reason"] == "interrupted").any()
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["scenario.yaml", "records.parquet", "summary.json", "ttft_cdf.png", "ttft_legs.png",
         "hit_rate_over_time.png", "run.log"])


_LATE_SIGINT = """
import os, signal, sys, time
from pddbench.cli import main
try:
    main()  # as the console script does: the arguments from sys.argv
finally:  # Ctrl-C while the process winds down, after the command's outcome is decided
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.5)
"""


@pytest.mark.parametrize("ok", [True, False])
def test_ctrl_c_after_the_outcome_does_not_change_it(tmp_path, ok):
    """A complete run stays exit 0 and an error stays exit 2: not -2, the SIGINT death that a
    caller reads as a crash (seen when Ctrl-C landed during interpreter shutdown)."""
    args = ["run", "paper/pdd", *TINY, "--out", str(tmp_path / "run")] if ok else ["run", "paper/nope"]
    res = subprocess.run([sys.executable, "-c", _LATE_SIGINT, *args], cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == (0 if ok else 2) and "Traceback" not in res.stderr, (res.returncode, res.stderr)


def test_main_called_in_process_keeps_the_callers_ctrl_c():
    before = signal.getsignal(signal.SIGINT)
    assert cli("run", "paper/nope").code == 2
    assert signal.getsignal(signal.SIGINT) is before  # else this process and its children ignore Ctrl-C


_SIGINT_AT_WROTE = """
import sys
import pddbench.cli as cli
print_ = cli.console.print
def interrupting_print(*a, **k):
    if a and "wrote" in str(a[0]):
        raise KeyboardInterrupt  # Ctrl-C after the folder is complete, before the command returns
    return print_(*a, **k)
cli.console.print = interrupting_print
cli.main(sys.argv[1:])
"""


def test_ctrl_c_just_after_a_complete_folder_says_it_is_kept(tmp_path):
    out = tmp_path / "run"
    res = subprocess.run([sys.executable, "-c", _SIGINT_AT_WROTE, "run", "paper/pdd", *TINY, "--out", str(out)],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    last = res.stderr.strip().splitlines()[-1]
    assert res.returncode == 130 and "Traceback" not in res.stderr, res.stderr
    assert "after the run was complete" in last and str(out) in " ".join(res.stderr.split()), res.stderr
    assert json.loads((out / "summary.json").read_text())["interrupted"] is False
    assert not (out / ".claim").exists()


def test_cli_subprocess_one_line_errors(tmp_path):
    for args in (["run"], ["run", "paper/pdd", "--nope"], ["trace", "stats", str(tmp_path)],
                 ["trace", "stats", "x", "--window-s", "nan"]):
        res = run_cli(*args)
        assert res.returncode == 2 and "Traceback" not in res.stderr, (args, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1 and res.stderr.startswith("error:"), (args, res.stderr)


def test_json_outputs_are_standard_json(tmp_path):
    """NaN and Infinity are not JSON (our own strict reader, jq and browsers refuse them): every
    JSON the project writes holds null there, numpy values included."""
    import numpy as np

    from pddbench.core.io import write_json
    from pddbench.core.loading import read_json

    path = tmp_path / "x.json"
    write_json(path, {"range": (0.0, float("inf")), "p90": float("nan"), "arr": np.array([1.5, -np.inf]),
                      "n": np.int64(3), "f": np.float32(0.5), "ok": True, "nested": [{"v": np.float64("nan")}]})
    assert read_json(path, "x") == {"range": [0.0, None], "p90": None, "arr": [1.5, None], "n": 3, "f": 0.5,
                                    "ok": True, "nested": [{"v": None}]}


def _ctrl_c_while_a_class_is_made() -> BaseException:
    """What a Ctrl-C landing during an import's class creation raises: on Python 3.11 a
    RuntimeError ("Error calling __set_name__") whose cause is the KeyboardInterrupt."""
    class Descriptor:
        def __set_name__(self, owner, name):
            raise KeyboardInterrupt

    try:
        type("Roofline", (), {"field": Descriptor()})
    except BaseException as exc:  # noqa: BLE001 - the point is which one it is
        return exc
    raise AssertionError("no exception")


def _serializer_raising(exc_type):
    """What pydantic raises when `exc_type` is raised inside a Python field serializer (a scenario's
    model_dump_json runs one): pydantic-core keeps only the text, no cause."""
    from pydantic import BaseModel, field_serializer

    class Model(BaseModel):
        x: int = 1

        @field_serializer("x")
        def _x(self, v):
            raise exc_type()

    try:
        Model().model_dump_json()
    except BaseException as exc:  # noqa: BLE001 - the point is which one it is
        return exc
    raise AssertionError("no exception")


def test_a_ctrl_c_python_wrapped_is_an_interrupt_and_other_errors_are_not():
    from pddbench.core.errors import is_interrupt

    wrapped = _ctrl_c_while_a_class_is_made()
    assert is_interrupt(wrapped)
    # the CI flake behind this one: Ctrl-C during crossovers' model_dump_json gave exit 3, not 130
    in_serializer = _serializer_raising(KeyboardInterrupt)
    assert not isinstance(in_serializer, KeyboardInterrupt) and is_interrupt(in_serializer)
    assert not is_interrupt(_serializer_raising(ValueError))  # a serializer's own bug stays a bug
    assert is_interrupt(KeyboardInterrupt())
    plain = RuntimeError("a bug")
    plain.__cause__ = ValueError("its cause")
    assert not is_interrupt(plain) and not is_interrupt(ValueError("x"))
    cycle = RuntimeError("a")
    cycle.__context__ = RuntimeError("b")
    cycle.__context__.__context__ = cycle
    assert not is_interrupt(cycle)  # a cyclic chain ends


@pytest.mark.parametrize("wrapper", ["class", "serializer"])
@pytest.mark.parametrize("kept", [False, True])
def test_a_wrapped_ctrl_c_in_a_run_folder_is_handled_as_ctrl_c(tmp_path, kept, wrapper):
    """The CI flakes behind this: SIGINT during `pddbench run`'s import of the simulator became
    "internal error (RuntimeError: Error calling __set_name__ ...)", and during `crossovers`'
    model_dump_json of a scenario "internal error (PydanticSerializationError ...)", exit 3,
    instead of exit 130 and a folder removed or marked interrupted."""
    from pddbench.core.errors import Interrupted
    from pddbench.core.io import run_folder

    out = tmp_path / "run"
    with pytest.raises(Interrupted, match="kept 5 requests" if kept else "nothing kept"):
        with run_folder(out, tmp_path / "results", "x") as folder:
            (folder.path / "summary.json").write_text("{}")
            if kept:
                folder.interrupted("5 requests")
            raise _ctrl_c_while_a_class_is_made() if wrapper == "class" else _serializer_raising(KeyboardInterrupt)
    assert out.exists() == kept and not (out / ".claim").exists()


def test_a_task_that_a_wrapped_ctrl_c_stops_raises_and_a_failing_one_is_recorded(monkeypatch):
    """In-process (-j 1) a task runs in this process: a Ctrl-C that pydantic wrapped must stop the
    run like Ctrl-C, not become a point "failed" and then an internal error."""
    import json

    from pddbench.core.errors import is_interrupt
    from pddbench.sweep import tasks

    def raising(exc_type):
        def kind(task, files):
            raise _serializer_raising(exc_type)
        return kind

    monkeypatch.setitem(tasks.KINDS, "wrapped", raising(KeyboardInterrupt))
    monkeypatch.setitem(tasks.KINDS, "buggy", raising(ValueError))
    with pytest.raises(Exception) as info:
        tasks.execute(json.dumps({"kind": "wrapped", "files": []}))
    assert is_interrupt(info.value)
    out = json.loads(tasks.execute(json.dumps({"kind": "buggy", "files": []})))
    assert out["status"] == "failed" and "PydanticSerializationError" in out["error"]
