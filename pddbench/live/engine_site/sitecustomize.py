"""Loaded at start-up by every CPU engine we launch (the engine's env puts this folder on
PYTHONPATH; its engine core and worker, forked or spawned, have it too). Fixes for vLLM on small
CPU hosts:

1. NIXL's progress thread polls UCX with zero delay (the Python API hard-codes pthrDelay=0): one
   full core per engine, which on a 2-core machine starves the engines themselves. This sets the
   delay between its polls to PDDBENCH_NIXL_PROGRESS_DELAY_US (default 200 us; 0 keeps NIXL's busy
   polling). The thread itself stays on: UCX over TCP needs the target side to make progress for
   the initiator's reads.
2. On CPU, vLLM's NIXL worker moves the worker's main thread to the last core of each NUMA node
   ("reserve cores for KV transfer"). With one OpenMP thread per engine that thread is the one
   running the model, so every engine ended up computing on the same last core, away from the
   core it was pinned to (P's prefill ran 3-5x slower whenever D decoded). The engine's own
   pinning (VLLM_CPU_OMP_THREADS_BIND) is kept: that reservation is skipped
   (PDDBENCH_NIXL_KEEP_PINNING=0 restores vLLM's behaviour).
3. On x86 Linux a process must ask the kernel for the AMX tile state (arch_prctl
   ARCH_REQ_XCOMP_PERM, XTILEDATA) before its first AMX instruction, or it dies of SIGILL. vLLM's
   CPU attention picks its AMX kernel wherever the CPU has AMX and never asks: on an Intel Xeon
   with AMX, D's first step over a KV cache it received killed its worker (exit -4). Asked here,
   once per process; where the kernel or CPU has no AMX the call fails and nothing changes.
4. vLLM's CPU platform forces the `spawn` start method for the engine core and its worker, so
   each re-imports torch and vLLM: ~11 of an engine's ~21 s to start here (2-core EPYC), the
   core busy. Here they are forked from a process that has imported everything and run no
   OpenMP region yet (vLLM's own default off CPU): ~10 s. The processes, their pinning and what
   they compute are the same. PDDBENCH_ENGINE_FORK=0, or VLLM_WORKER_MULTIPROC_METHOD=spawn,
   keeps vLLM's spawn."""

import importlib.abc
import importlib.machinery
import os
import platform
import sys


def _request_amx() -> None:
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.syscall(158, 0x1023, 18)  # SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA
    except Exception:  # no libc syscall here: nothing to ask
        pass


_request_amx()

_DELAY_US = int(os.environ.get("PDDBENCH_NIXL_PROGRESS_DELAY_US", "200"))

if _DELAY_US > 0:
    try:
        from nixl import _api
    except Exception:  # no NIXL in this environment: nothing to configure
        _api = None
    if _api is not None:
        _agent = _api.nixlBind.nixlAgent

        def _agent_with_delay(name, config, *args, **kwargs):
            config.pthrDelay = _DELAY_US
            return _agent(name, config, *args, **kwargs)

        _api.nixlBind.nixlAgent = _agent_with_delay

if os.environ.get("PDDBENCH_NIXL_KEEP_PINNING", "1") == "1" and hasattr(os, "sched_setaffinity"):
    _setaffinity = os.sched_setaffinity

    def _setaffinity_unless_nixl(pid, cpus):
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if ".nixl." in caller:
            return
        _setaffinity(pid, cpus)

    os.sched_setaffinity = _setaffinity_unless_nixl


class _ForkAfterCpuConfig(importlib.abc.MetaPathFinder):
    """Patches vllm.platforms.cpu as it is imported: after CpuPlatform.check_and_update_config
    has set the start method to spawn, it is set back to fork."""

    def find_spec(self, name, path, target=None):
        if name != "vllm.platforms.cpu":
            return None
        sys.meta_path.remove(self)  # once: the module is imported once per process
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_patch(module):
            exec_module(module)
            _keep_fork(module.CpuPlatform)

        spec.loader.exec_module = exec_then_patch
        return spec


def _keep_fork(platform_cls) -> None:
    update = platform_cls.check_and_update_config.__func__

    def check_and_update_config(cls, vllm_config):
        update(cls, vllm_config)
        os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "fork"

    platform_cls.check_and_update_config = classmethod(check_and_update_config)


if os.environ.get("PDDBENCH_ENGINE_FORK", "1") == "1" and os.environ.get("VLLM_WORKER_MULTIPROC_METHOD", "fork") == "fork":
    sys.meta_path.insert(0, _ForkAfterCpuConfig())
