"""Starting engines fails cleanly: a vLLM that can never become healthy is reported at once with
the line that says why, and a failed start leaves the caller's process as it was (its SIGTERM
handler, no engine processes). A leaked handler turned every later SIGTERM in a test session into
a KeyboardInterrupt and broke the network namespaces' helpers that inherit it."""

import os
import shutil
import signal
import socket

import pytest

from pddbench.core.errors import UserError
from pddbench.live import engines as engines_mod
from pddbench.live.engines import (EngineGroup, EngineSpec, _fatal_start_line, _interrupt_in, stray_engines,
                                   vllm_available)
from pddbench.live.net import ephemeral_port_low, free_port_base
from pddbench.live.placement import PLACEMENTS
from pddbench.schema.runtime_config import LiveConfig

# The lines a vLLM wrote when its NIXL side-channel port was taken (clean-clone CI, 2026-12-02).
NIXL_PORT_TAKEN = """\
(EngineCore pid=27605) WARNING 12-02 14:55:14 [vllm.py:725] Model Runner V2 requires Triton
Exception in thread nixl_handshake_listener:
Traceback (most recent call last):
  File "zmq/backend/cython/_zmq.py", line 190, in zmq.backend.cython._zmq._check_rc
zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:41722')
"""


def test_fatal_start_line_names_the_taken_address(tmp_path):
    log = tmp_path / "P.log"
    log.write_text(NIXL_PORT_TAKEN)
    assert "Address already in use (addr='tcp://127.0.0.1:41722')" in _fatal_start_line(log)
    log.write_text(NIXL_PORT_TAKEN.replace("Address already in use (addr='tcp://127.0.0.1:41722')", "boom"))
    assert _fatal_start_line(log) == "Exception in thread nixl_handshake_listener:"
    log.write_text("INFO Loading safetensors checkpoint shards\n")
    assert _fatal_start_line(log) is None
    assert _fatal_start_line(tmp_path / "missing.log") is None


def test_failed_start_puts_the_sigterm_handler_back(tmp_path, monkeypatch):
    def never_healthy(self, timeout_s=240.0):
        raise UserError(f"engine {self.spec.name} cannot start")

    monkeypatch.setattr(engines_mod.Engine, "start", lambda self: None)
    monkeypatch.setattr(engines_mod.Engine, "wait_healthy", never_healthy)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(UserError, match="cannot start"):
        with EngineGroup([EngineSpec("P", "/model", 1)], tmp_path):
            pass
    assert signal.getsignal(signal.SIGTERM) is before


def test_port_base_keeps_every_port_free_and_below_the_ephemeral_range():
    offsets = [1, 2, 3, 101, 102, 103]
    base = free_port_base(offsets)
    assert base + max(offsets) < ephemeral_port_low()
    for o in offsets:
        with socket.socket() as s:
            s.bind(("127.0.0.1", base + o))  # free when chosen


@pytest.mark.parametrize("kind", sorted(PLACEMENTS))
def test_default_live_ports_are_below_the_ephemeral_range(kind):
    # vLLM and every client take ephemeral ports while engines start; a fixed port among them can be lost
    base = LiveConfig().port_base
    specs = PLACEMENTS[kind].engines("/model", base)
    ports = [base] + [s.port for s in specs] + [s.side_channel_port for s in specs if s.side_channel_port]
    assert max(ports) < ephemeral_port_low()


@pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed (`make test` installs it)")
def test_engine_whose_side_channel_port_is_taken_fails_at_once(tmp_path, tiny_model):
    model = tiny_model
    base = free_port_base([1, 101])
    before = signal.getsignal(signal.SIGTERM)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", base + 101))
        taken.listen()
        spec = EngineSpec("P", model, base + 1, cpu=0, kv_role="kv_producer", side_channel_port=base + 101)
        with pytest.raises(UserError, match=f"cannot start: .*Address already in use.*{base + 101}"):
            with EngineGroup([spec], tmp_path / "logs"):
                pass
    assert signal.getsignal(signal.SIGTERM) is before
    assert stray_engines() == []


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("iptables") is None, reason="needs root and iptables")
def test_emulated_wan_comes_up_and_down_under_an_engine_groups_sigterm_handler():
    # pyroute2's namespace helpers are forks of this process: with the handler raising in them too,
    # `netem up` found no veth and `down` was interrupted (clean-clone CI, 2026-12-02)
    from netem.profile import load_profile
    from netem.topology import our_namespaces
    from pddbench.live.wan import emulated_wan

    old = signal.signal(signal.SIGTERM, _interrupt_in(os.getpid()))
    try:
        with emulated_wan(load_profile("fixed-30ms")) as state:
            assert set(state["shaping"]) == {"forward", "reverse"}
            assert len(our_namespaces()) == 2
    finally:
        signal.signal(signal.SIGTERM, old)
    assert our_namespaces() == []


def _xcomp(code: int, env: dict | None = None) -> int:
    """arch_prctl(code) in a fresh Python started with `env` (0 where there is no such call)."""
    import subprocess
    import sys

    probe = ("import ctypes; b = ctypes.c_ulong(0); libc = ctypes.CDLL(None); "
             f"print(b.value if libc.syscall(158, {code}, ctypes.byref(b)) == 0 else 0)")
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    return int(out.stdout.strip() or 0)


@pytest.mark.skipif(not (os.uname().sysname == "Linux" and os.uname().machine == "x86_64"), reason="x86 Linux only")
@pytest.mark.parametrize("kv_role", [None, "kv_consumer"])
def test_every_engine_process_may_use_amx_where_the_cpu_has_it(kv_role, tmp_path):
    """vLLM's CPU attention uses AMX wherever the CPU has it without asking the kernel for the tile
    state; a process that did not ask dies of SIGILL (seen on an Intel Xeon: D's worker, exit -4).
    Every engine's environment loads engine_site/sitecustomize.py, which asks: its processes hold the
    permission exactly where the kernel offers AMX (ARCH_GET_XCOMP_SUPP bit 18)."""
    xtiledata = 1 << 18
    env = EngineSpec("e", str(tmp_path), 8000, kv_role=kv_role).env()
    assert str(engines_mod.ENGINE_SITE) in env["PYTHONPATH"].split(os.pathsep)
    offered = bool(_xcomp(0x1021) & xtiledata)
    assert bool(_xcomp(0x1022, env) & xtiledata) == offered
    if offered:  # a plain process has not asked: the site is what makes the difference
        assert not _xcomp(0x1022, {**os.environ, "PYTHONPATH": ""}) & xtiledata


def _in_engine_env(code: str, **extra: str) -> str:
    """stdout of `code` run by a fresh Python with a CPU engine's environment (its site loaded)."""
    import subprocess
    import sys

    env = {k: v for k, v in EngineSpec("e", "/model", 8000).env().items()
           if k not in ("PDDBENCH_ENGINE_FORK", "VLLM_WORKER_MULTIPROC_METHOD")}
    out = subprocess.run([sys.executable, "-c", code], env={**env, **extra}, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip()


def test_the_start_method_vllm_sets_to_spawn_is_set_back_to_fork():
    # what vLLM's CpuPlatform.check_and_update_config does, then the site's wrapper around it
    code = ("import os, sitecustomize\n"
            "class Cpu:\n"
            "    @classmethod\n"
            "    def check_and_update_config(cls, cfg):\n"
            "        cfg.append(cls)\n"
            "        os.environ['VLLM_WORKER_MULTIPROC_METHOD'] = 'spawn'\n"
            "sitecustomize._keep_fork(Cpu)\n"
            "seen = []\n"
            "Cpu.check_and_update_config(seen)\n"
            "print(os.environ['VLLM_WORKER_MULTIPROC_METHOD'], seen == [Cpu])")
    assert _in_engine_env(code) == "fork True"


@pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed (`make test` installs it)")
def test_cpu_engines_fork_their_core_and_worker_unless_told_to_spawn():
    # the site patches the real vLLM's CPU platform as it is imported (a vLLM that renamed it would
    # show here), and leaves it alone when the user asks for spawn either way
    code = ("import vllm.platforms.cpu as c; "
            "print(c.CpuPlatform.check_and_update_config.__func__.__module__)")
    assert _in_engine_env(code) == "sitecustomize"
    assert _in_engine_env(code, PDDBENCH_ENGINE_FORK="0") == "vllm.platforms.cpu"
    assert _in_engine_env(code, VLLM_WORKER_MULTIPROC_METHOD="spawn") == "vllm.platforms.cpu"
