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


# -- issue 40: bad input refused before any folder or process, by class ---------------------------
# Each class lists cases over every command it reaches; each case: arguments ({tmp}, {designs},
# {trace}, {run}, {spec_NAME} filled in), the exit code, words the one line must hold and words it
# must not. `--out {tmp}/out` is appended where the command writes a folder: it must not exist after.

LIVE_PD = "live/same-dc-pd"
ENGINES = "live.engines=[{{role: P, datacenter: a, {p}}}, {{role: D, datacenter: a, cpus: [1]}}]"
SPECS = {  # extra designs specs, as text appended to the battery spec (inputs['designs'])
    "nan": "claims:\n  - {id: c, figure: f, article: .nan, metric: bcr, design: prfaas, against: naive}\n",
    "inf": "claims:\n  - {id: c, figure: f, article: .inf, metric: bcr, design: prfaas, against: naive}\n",
    "self": "claims:\n  - {id: c, figure: f, article: 10, metric: bcr, design: naive, against: naive}\n",
}
BIG_SPEC = ("name: big\nbudget: {H200: 16, H20: 32}\nsizes: [16]\nrequests: 1000000\nseeds: 20\niterations: 1\n"
            "reference: naive\ndesigns:\n  naive: {scenario: prfaas/naive-heterogeneous-pd}\n"
            "  prfaas: {scenario: prfaas/prfaas}\n")
WIDE_SPEC = ("name: wide\nbudget: {H200: 4096, H20: 8192}\nsizes: [12, 13, 14, 15, 16, 17, 18, 19, 20]\n"
             "requests: 60\nseeds: 1\n"
             "iterations: 1\nreference: naive\ndesigns:\n  naive: {scenario: prfaas/naive-heterogeneous-pd}\n"
             "  prfaas: {scenario: prfaas/prfaas}\n")
REPLAY = ["replay", "--endpoint", "http://127.0.0.1:9", "--trace", "{trace}"]

ISSUE40 = {
    # 2: sizes count time: work past --max-hours is refused with the option that raises it
    2: [
        (["designs", "{spec_big}", "-j", "1"], 2, ["--max-hours", "~17 h"], []),
        (["crossovers", "--requests", "1000000", "--axes", "sla.tpot_ms", "-j", "1"], 2, ["--max-hours"], []),
        (["optimize", "paper/same-dc-pd", "--budget", "A=88", "--max-hours", "0.001"], 2, ["--max-hours"], []),
        (["designs", "{designs}", "-j", "1", "--max-hours", "0.0001"], 2, ["--max-hours"], []),
        (["sweep", "{sweep}", "--max-hours", "0.00001"], 2, ["--max-hours"], []),
    ],
    # 3: bad input that reached an internal error (exit 3), or failed after the folder was claimed
    3: [
        ([*REPLAY, "--vocab-lo", "100", "--vocab-hi", "50"], 2, ["--vocab-lo 100", "--vocab-hi 50"], ["internal"]),
        (["run", LIVE_PD, "--set", ENGINES.format(p="cpus: [4000]")], 2, ["live.engines.P.cpus", "4000"], []),
        (["run", LIVE_PD, "--repeat", "2", "--set", ENGINES.format(p="cpus: [4000]")], 2, ["live.engines.P.cpus"],
         []),
        (["run", LIVE_PD, "--set", "live.vocab_lo=100", "--set", "live.vocab_hi=50"], 2, ["live.vocab_lo"], []),
    ],
    # 4: nonsense that was accepted silently
    4: [
        (["designs", "{spec_nan}", "-j", "1"], 2, ["claims.0.article"], []),
        (["designs", "{spec_inf}", "-j", "1"], 2, ["claims.0.article"], []),
        (["designs", "{spec_self}", "-j", "1"], 2, ["with itself"], []),
        (["designs", "{designs}", "-j", "1", "--along", "deployment.prefill.instances=1..4"], 2,
         ["best-split search chooses"], []),
        (["designs", "{designs}", "-j", "1", "--along", "deployment.decode.chips_per_instance=1..8"], 2,
         ["best-split search chooses"], []),
        (["designs", "{designs}", "-j", "1", "--points", "4"], 2, ["--points 4", "--along"], []),
        (["designs", "{designs}", "-j", "1", "--steps", "1"], 2, ["--steps 1", "--along"], []),
        (["run", "paper/pdd", "--set", ENGINES.format(p="cpus: [0]")], 2, ["live.engines", "runtime: sim"], []),
        (["run", "paper/pdd", "--set", "live.ray_address=127.0.0.1:1"], 2, ["live.ray_address", "runtime: sim"], []),
        ([*REPLAY, "--model", ""], 2, ["--model"], []),
        ([*REPLAY, "--model", "  "], 2, ["--model"], []),
        (["replay", "--endpoint", "http://127.0.0.1:0", "--trace", "{trace}"], 2, ["port 0"], []),
        (["handoff-bench", "--loopback", "--trials", "2", "--md-endpoint", "http://127.0.0.1:0"], 2, ["port 0"], []),
        (["optimize", "live/pdd", "--budget", "A=8"], 2, ["runtime: sim"], ["they use )"]),
    ],
    # 5: a layout this host cannot run (GPUs: see test_issue40_gpu_layouts)
    5: [
        (["run", LIVE_PD, "--set", ENGINES.format(p="cpus: [0, 4095]")], 2, ["4095", "cores available"], []),
    ],
    # 6: side effects before validation (netem and gate: see the tests below)
    6: [
        (["gate", "{run}", "--baseline", "{run}", "--history", "{hist}", "--junit", "/proc/x.xml"], 2,
         ["--junit /proc/x.xml"], [".tmp"]),
        (["gate", "{run}", "--baseline", "{run}", "--history", "{hist}", "--markdown", "/proc/x.md"], 2,
         ["--markdown /proc/x.md"], [".tmp"]),
        (["gate", "{run}", "--baseline", "{run}", "--history", "{hist}", "--json", "/proc/x.json"], 2,
         ["--json /proc/x.json"], [".tmp"]),
        (["run", "paper/pdd", *TINY, "--results", "/proc/results"], 2, ["--results"], []),
    ],
    # 7: messages that named options the command lacks or blamed the wrong thing
    7: [
        (["designs", "{spec_wide}", "-j", "1"], 2, ["--max-searches", "sizes"], ["--max-splits", "--sizes"]),
        (["designs", "{spec_small}", "-j", "1"], 2, ["spec-small.yaml: sizes 1,2"], ["--sizes"]),
        (["optimize", "paper/same-dc-pd", "--budget", "A=88", "--sizes", "16-4"], 2, ["runs backwards", "4-16"],
         ["at least 1"]),
        (["crossovers", "--axes", ","], 2, ["names no axis"], ["no axis is not"]),
        (["crossovers", "--axes", "foo,bar"], 2, ["foo, bar are not axes"], []),
        (["designs", "{designs}", "-j", "1", "--along", "sla.tpot_ms=400..40"], 2, ["LO 400 is not below HI 40"], []),
        (["run", "paper/pdd", "--set", "workload.synth.rate_rps=1e-6"], 2, ["workload.synth.rate_rps"],
         ["raise workload.rate_scale"]),
    ],
}
ISSUE40_CASES = [(c, i, case) for c, cases in ISSUE40.items() for i, case in enumerate(cases)]
WRITES_FOLDER = {"run", "designs", "crossovers", "optimize", "sweep", "replay", "handoff-bench"}


@pytest.fixture(scope="module")
def specs(inputs):
    tmp = Path(inputs["tmp"])
    base = Path(inputs["designs"]).read_text()
    out = {}
    for name, extra in {**SPECS, "big": None, "wide": None, "small": None}.items():
        path = tmp / f"spec-{name}.yaml"
        path.write_text(BIG_SPEC if name == "big" else WIDE_SPEC if name == "wide" else
                        base.replace("sizes: [16]", "sizes: [1, 2]") if name == "small" else base + extra)
        out[f"spec_{name}"] = str(path)
    return out


@pytest.mark.parametrize("klass,i,case", ISSUE40_CASES, ids=[f"class{c}-{i}-{' '.join(k[0][:2])}"
                                                              for c, i, k in ISSUE40_CASES])
def test_issue40_bad_input_is_refused_before_any_folder(tmp_path, inputs, specs, klass, i, case):
    args, code, says, never = case
    names = {**inputs, **specs, "hist": str(tmp_path / "history")}
    filled = [a.format(**names) if "{" in a and "}" in a and "[" not in a else a for a in args]
    out = tmp_path / "out"
    extra = ["--out", str(out)] if args[0] in WRITES_FOLDER and "--results" not in args else []
    res = cli(*filled, *extra)
    assert res.code == code and res.one_line, (res.code, res.err)
    for w in says:
        assert w in res.err, (w, res.err)
    for w in never:
        assert w not in res.err, (w, res.err)
    assert not out.exists(), f"{args[0]} left {out}"
    assert not (tmp_path / "history").exists(), "appended to the history before failing"


@pytest.mark.parametrize("visible,gpus,says", [("", "[0]", "no GPU is visible"),
                                               ("0", "[0, 1]", "do not exist here"),
                                               ("0,1", "[2]", "ids 0..1")])
def test_issue40_gpu_layouts_this_host_lacks(tmp_path, monkeypatch, visible, gpus, says):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    out = tmp_path / "out"
    for extra in ([], ["--repeat", "2"]):
        res = cli("run", LIVE_PD, "--set", ENGINES.format(p=f"device: gpu, gpus: {gpus}"), *extra, "--out", out)
        assert res.code == 2 and res.one_line and says in res.err, res.err
        assert not out.exists()


def test_issue40_engine_teardown_holds_ctrl_c(tmp_path, monkeypatch):
    """A Ctrl-C that lands during an engine's stop waits until it is down (then interrupts)."""
    import signal

    from pddbench.live.engines import Engine, EngineSpec, held_signals

    monkeypatch.setattr(EngineSpec, "command", lambda self: ["sleep", "60"])
    e = Engine(EngineSpec("P", "/m", 1), tmp_path)
    e.start()
    with pytest.raises(KeyboardInterrupt):
        with held_signals():
            os.kill(os.getpid(), signal.SIGINT)
            e.stop()  # not cut short by the pending Ctrl-C
    assert e.proc.poll() is not None


def _wait_line(proc, words: str, timeout_s: float = 120) -> str:
    import time

    seen, deadline = "", time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        seen += line
        if words in line:
            return seen
    raise AssertionError(seen)


def test_issue40_sigterm_leaves_no_claimed_folder(tmp_path, specs):
    """SIGTERM during the work unwinds like Ctrl-C: the claimed folder is removed; exit 143."""
    import signal

    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "pddbench", "designs", specs["spec_big"], "-j", "1",
                             "--max-hours", "1000", "--out", str(out)], cwd=REPO, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _wait_line(proc, "best split of")
        assert out.exists()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=120)
    finally:
        proc.kill()
    assert rc == 143 and not out.exists(), (rc, proc.stderr.read())


@pytest.fixture
def fake_fleet(tmp_path):
    """Engines as attach mode checks them: /health, /v1/models serving 'tiny', a KV side channel."""
    import http.server
    import socket
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b'{"data": [{"id": "tiny"}]}' if self.path == "/v1/models" else b"{}"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    servers, lines = [], []
    for role in ("P", "D"):
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        side = socket.create_server(("127.0.0.1", 0))
        servers += [srv, side]
        lines.append(f"{role}: {{url: 'http://127.0.0.1:{srv.server_address[1]}', "
                     f"kv_side_channel: '127.0.0.1:{side.getsockname()[1]}'}}")
    inv = tmp_path / "fleet.yaml"
    inv.write_text("\n".join(lines) + "\n")
    yield inv
    for s in servers:
        (s.shutdown() or s.server_close()) if hasattr(s, "shutdown") and hasattr(s, "serve_forever") else s.close()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("sig,code", [("SIGINT", 130), ("SIGTERM", 143)])
def test_issue40_serve_stopped_by_a_signal_is_not_success(fake_fleet, sig, code):
    """Class 8: serve stops cleanly on Ctrl-C / SIGTERM, and says so by its exit status; class 4:
    pd-proxy serves without live.model_dir (it reads no model)."""
    import signal
    import time
    import urllib.request

    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "pddbench", "serve", "pd-proxy", LIVE_PD, "--inventory",
                             str(fake_fleet), "--no-warm-up", "--port", str(port), "--set", "live.model_dir=null"],
                            cwd=REPO, text=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        for _ in range(300):
            assert proc.poll() is None, proc.stderr.read()
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).close()
                break
            except OSError:
                time.sleep(0.2)
        proc.send_signal(getattr(signal, sig))
        rc = proc.wait(timeout=60)
    finally:
        proc.kill()
    err = proc.stderr.read()
    assert rc == code and "Traceback" not in err, (rc, err)


def test_issue40_serve_refusals_name_the_cause(tmp_path):
    import errno

    from pddbench.live.serve import bind_error

    assert "--host 10.77.0.1" in bind_error("10.77.0.1", 8000, OSError(errno.EADDRNOTAVAIL, "x"))
    assert "choose another port" in bind_error("127.0.0.1", 8000, OSError(errno.EADDRINUSE, "x"))
    inv = tmp_path / "fleet.yaml"
    inv.write_text("P: {url: 'http://127.0.0.1:9'}\nRLD: {url: 'http://127.0.0.1:9'}\nMD: {url: 'http://127.0.0.1:9'}\n")
    res = cli("serve", "pdd-router", "live/pdd", "--inventory", inv, "--set", "live.model_dir=null")
    assert res.code == 2 and "give live.model_dir" in res.err, res.err


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/sbin/iptables").exists(), reason="netem needs root")
def test_issue40_netem_refusal_touches_nothing_it_did_not_make(tmp_path):
    """netem up --dev with no such interface: refused before the state folder or another
    emulation's delay line (found by its command line) is touched."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "keep.txt").write_text("someone's\n")
    line = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "netem.delayline", "--x",
                             f"{state}/x"])
    try:
        env = {**os.environ, "PDDBENCH_NETEM_STATE": str(state)}
        res = subprocess.run([sys.executable, "-m", "pddbench", "netem", "up", "fixed-30ms", "--dev", "nosuchif0",
                              "--peer", "10.99.0.0/24"], cwd=REPO, env=env, capture_output=True, text=True,
                             timeout=120)
        assert res.returncode == 2 and "--dev nosuchif0" in res.stderr, res.stderr
        assert line.poll() is None, "killed a delay line it had not started"
        assert (state / "keep.txt").exists()
    finally:
        line.kill()
        line.wait()


def test_issue40_gate_appends_no_history_when_a_report_fails(inputs, tmp_path, monkeypatch):
    """Even past the checks (a write that fails late), the history is appended only after the reports."""
    import pddbench.gate.report as report

    def boom(*a, **k):
        raise OSError(28, "No space left on device", str(tmp_path / "r.md"))

    monkeypatch.setattr(report, "write_text", boom)
    res = cli("gate", inputs["run"], "--baseline", inputs["run"], "--history", tmp_path / "h", "--markdown",
              tmp_path / "r.md")
    assert res.code == 2 and res.one_line and str(tmp_path / "r.md") in res.err, res.err
    assert not (tmp_path / "h" / "gate_history.parquet").exists()
