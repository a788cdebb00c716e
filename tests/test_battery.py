"""A battery over every command of the CLI: output options pointed at what is not a regular file
(a character device made with mknod, a FIFO with no reader, symlinks), standard output closed or
full, and a crash inside a command. The command list is read from the CLI itself, so a new command
or output option fails `test_battery_covers_every_output_option` until it is added here."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.inprocess import cli

TINY = ["--set", "workload.synth.requests=30"]
FOLDER, FILE = "folder", "file"

# command -> (minimal arguments, {output option: folder or file}); {run}, {trace}, {sweep}, {tmp}
# are filled in by the fixture below
COMMANDS: dict[str, tuple[list[str], dict[str, str]]] = {
    "run": (["paper/pdd", *TINY], {"--out": FOLDER, "--results": FOLDER}),
    "capacity": (["paper/pdd", *TINY, "--iterations", "1"], {"--out": FOLDER, "--results": FOLDER}),
    "optimize": (["paper/pdd", "--budget", "A=88", *TINY], {"--out": FOLDER, "--results": FOLDER}),
    "crossovers": (["--axes", "chips.B.price_per_hour", "--requests", "60", "--iterations", "1", "--steps", "0", "-j", "1"],
                   {"--out": FOLDER, "--results": FOLDER}),
    "designs": (["{designs}", "-j", "1"], {"--out": FOLDER, "--results": FOLDER}),
    "sweep": (["{sweep}"], {"--out": FOLDER, "--results": FOLDER}),
    "compare": (["{run}"], {"--out": FOLDER, "--results": FOLDER}),
    "replay": (["--endpoint", "http://127.0.0.1:9", "--trace", "{trace}"], {"--out": FOLDER, "--results": FOLDER}),
    "replay-bench": (["--duration-s", "1", "--rate", "10"], {"--out": FOLDER}),
    "handoff-bench": (["--loopback", "--trials", "2"], {"--out": FOLDER, "--results": FOLDER}),
    "fidelity": (["{run}"], {"--out": FOLDER}),
    "gate": (["{run}", "--baseline", "{run}", "--history", "{tmp}/history"],
             {"--markdown": FILE, "--junit": FILE, "--json": FILE, "--history": FOLDER}),
    "history": (["--history", "{tmp}/history"], {"--out": FOLDER, "--history": FOLDER}),
    "reproduce": (["--requests", "30"], {"--results": FOLDER}),
    "trace stats": (["{trace}"], {"--out": FOLDER}),
    "trace synth": (["--requests", "5"], {"--out": FILE}),
    "netem calibrate": ([], {"--out": FOLDER}),
    "model tiny": ([], {"--out": FOLDER}),
}


def _cli_commands() -> dict[str, object]:
    import typer

    from pddbench.cli import app

    found: dict[str, object] = {}

    def walk(command, path):
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                walk(sub, [*path, name])
        else:
            found[" ".join(path)] = command

    walk(typer.main.get_command(app), [])
    return found


def _output_options(command) -> set[str]:
    names = set()
    for p in command.params:
        if p.param_type_name != "option" or getattr(p, "is_flag", False):
            continue
        if p.opts[0] in ("--out", "--results", "--markdown", "--junit", "--json", "--history"):
            names.add(p.opts[0])
    return names


def test_battery_covers_every_output_option():
    commands = _cli_commands()
    for name, command in commands.items():
        options = _output_options(command)
        if options:
            assert name in COMMANDS, f"add `{name}` to the battery"
            assert options == set(COMMANDS[name][1]), (name, options)
    assert set(COMMANDS) <= set(commands)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("battery")
    run = tmp / "run"
    assert cli("run", "paper/pdd", *TINY, "--out", str(run)).code == 0
    trace = tmp / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}\n')
    sweep = tmp / "sweep.yaml"
    sweep.write_text("base: paper/pdd\nname: battery\nmeasure: run\nset:\n  - workload.synth.requests=30\n"
                     "axes:\n  sla.ttft_ms: [1000, 2000]\n")
    designs = tmp / "designs.yaml"
    designs.write_text("name: battery\nbudget: {H200: 16, H20: 32}\nsizes: [16]\nrequests: 60\nseeds: 1\n"
                       "iterations: 1\nreference: naive\ndesigns:\n  naive: {scenario: prfaas/naive-heterogeneous-pd}\n"
                       "  prfaas: {scenario: prfaas/prfaas}\n")
    return {"run": str(run), "trace": str(trace), "sweep": str(sweep), "tmp": str(tmp), "designs": str(designs)}


def _args(name: str, inputs: dict) -> list[str]:
    return [*name.split(), *(a.format(**inputs) for a in COMMANDS[name][0])]


def _node(kind: str, where: Path) -> Path:
    """A character device (the kernel's null device, made with mknod), a FIFO, or symlinks."""
    where.mkdir(parents=True, exist_ok=True)
    node = where / kind
    if kind in ("chardev", "link-to-chardev"):
        dev = where / "chardev"
        if not dev.exists():
            os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        if kind == "link-to-chardev":
            node.symlink_to(dev)
    elif kind == "fifo":
        os.mkfifo(node)
    elif kind == "link-to-file":
        (where / "target.txt").write_text("old\n")
        node.symlink_to(where / "target.txt")
    return node


def _identity(path: Path) -> tuple:
    st = os.lstat(path)
    return (stat.S_IFMT(st.st_mode), st.st_rdev, os.readlink(path) if path.is_symlink() else None)


CASES = [(name, option, kind) for name, (_, options) in COMMANDS.items() for option in options
         for kind in ("chardev", "fifo", "link-to-chardev", "link-to-file")]


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
@pytest.mark.parametrize("name,option,kind", CASES, ids=[f"{n}{o}-{k}" for n, o, k in CASES])
def test_output_onto_a_node_never_replaces_it(tmp_path, inputs, name, option, kind):
    node = _node(kind, tmp_path / "nodes")
    before = _identity(node)
    res = cli(*_args(name, inputs), option, str(node))
    assert _identity(node) == before, f"{name} {option} replaced a {kind}"
    assert "Traceback" not in res.err and res.code != 3, res.err
    if COMMANDS[name][1][option] == FOLDER:
        if kind != "link-to-file" or res.code != 0:
            assert res.code == 2 and res.one_line, (res.code, res.err)
    elif kind == "fifo":  # nobody reads it: refused, not waited on
        assert res.code == 2 and res.one_line, res.err
    elif res.code == 0 and kind == "link-to-file":
        assert (tmp_path / "nodes" / "target.txt").read_text() != "old\n"  # written through the link


def test_fifo_with_a_reader_receives_the_output(tmp_path):
    fifo = tmp_path / "out.jsonl"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE, text=True)
    res = cli("trace", "synth", "--requests", "4", "--out", str(fifo))
    out, _ = reader.communicate(timeout=60)
    assert res.code == 0, res.err
    assert len(out.splitlines()) == 4 and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def _pddbench(args: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pddbench", *args], cwd=REPO, text=True,
                          capture_output="stdout" not in kw, timeout=300, **kw)


# commands that print their result on standard output: a full or closed stdout must not be exit 0
PRINTING = ["trace synth", "trace stats", "netem status"]


@pytest.mark.parametrize("name", PRINTING)
def test_closed_or_full_stdout_is_an_error(inputs, name):
    args = [*name.split(), *(["--requests", "500"] if name == "trace synth" else
                             [inputs["trace"]] if name == "trace stats" else ["--json"])]
    closed = subprocess.run([sys.executable, "-m", "pddbench", *args], cwd=REPO, text=True, timeout=300,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=lambda: os.close(1))
    assert closed.returncode == 2 and "standard output is closed" in closed.stderr, closed.stderr
    with open("/dev/full", "w") as full:
        res = subprocess.run([sys.executable, "-m", "pddbench", *args], cwd=REPO, text=True, timeout=300,
                             stdout=full, stderr=subprocess.PIPE)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_closed_stdin_for_a_trace_from_stdin():
    res = subprocess.run([sys.executable, "-m", "pddbench", "trace", "stats", "-"], cwd=REPO, text=True,
                         timeout=300, capture_output=True, preexec_fn=lambda: os.close(0))
    assert res.returncode == 2 and "standard input is closed" in res.stderr, res.stderr


def test_broken_pipe_is_one_line_and_not_success():
    res = subprocess.run(f"'{sys.executable}' -m pddbench trace synth --requests 20000 | head -c 10 >/dev/null; "
                         "exit ${PIPESTATUS[0]}", shell=True, executable="/bin/bash", cwd=REPO, text=True,
                         capture_output=True, timeout=300)
    assert res.returncode == 2 and "closed by its reader" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


def test_a_crash_is_exit_3_with_the_traceback_in_a_log(monkeypatch, tmp_path):
    import pddbench.workload.synth as synth

    def boom(*a, **k):
        raise ZeroDivisionError("planted")

    monkeypatch.setattr(synth, "synth_trace", boom)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    res = cli("trace", "synth", "--requests", "3")
    assert res.code == 3 and res.one_line and "internal error" in res.err, res.err
    logs = list(tmp_path.glob("pddbench-crash-*.log"))
    assert len(logs) == 1 and "planted" in logs[0].read_text() and str(logs[0]) in " ".join(res.err.split())


@pytest.mark.parametrize("args,words", [
    (["replay", "--endpoint", "http://127.0.0.1:9", "--trace", "{trace}", "--arrival", "gamma"], "--arrival"),
    (["replay", "--endpoint", "http://127.0.0.1:9", "--trace", "{trace}", "--rate", "5", "--concurrency", "2"],
     "choose one"),
    (["replay", "--endpoint", "http://127.0.0.1:9", "--trace", "{trace}", "--time-scale", "2", "--rate", "5"],
     "choose one"),
    (["handoff-bench", "--loopback", "--profile", "cross-city-10g"], "--loopback"),
    (["sweep", "{sweep}", "--out", "{tmp}/o1", "--resume", "{tmp}/o2"], "--resume"),
])
def test_options_that_contradict_each_other_are_one_line(inputs, args, words):
    res = cli(*(a.format(**inputs) for a in args))
    assert res.code == 2 and res.one_line and words in res.err, res.err


@pytest.mark.parametrize("text", ["- a\n", "42\n", "", "null\n", "{}\n", "'x'\n"])
@pytest.mark.parametrize("command", ["run", "sweep", "gate-rules", "netem up", "capacity", "twin"])
def test_a_yaml_whose_top_level_has_the_wrong_shape_is_one_line(tmp_path, inputs, command, text):
    bad = tmp_path / "top.yaml"
    bad.write_text(text)
    args = {"run": ["run", bad], "sweep": ["sweep", bad], "capacity": ["capacity", bad],
            "gate-rules": ["gate", inputs["run"], "--baseline", inputs["run"], "--rules", bad, "--history", tmp_path / "h"],
            "netem up": ["netem", "up", bad], "twin": ["fidelity", inputs["run"], "--twin", bad]}[command]
    if command == "netem up" and os.geteuid() != 0:
        pytest.skip("netem needs root")
    res = cli(*map(str, args))
    assert res.code == 2 and res.one_line and "internal error" not in res.err, res.err
