from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MOONCAKE = REPO / "traces" / "mooncake" / "synthetic_trace.jsonl"

# A suite started in the background (`cmd &`, nohup, some CI runners) inherits SIGINT ignored, and
# so would every pddbench it starts: the Ctrl-C tests would then send a signal nobody hears. A
# Python handler is reset to the default on exec, so this gives children a normal Ctrl-C.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run the real `pddbench` entry point in a subprocess, as a user would."""
    return subprocess.run([sys.executable, "-m", "pddbench", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd or REPO, timeout=timeout)


@pytest.fixture(scope="session")
def mooncake_path() -> Path:
    return MOONCAKE


@pytest.fixture(scope="session")
def mooncake_requests():
    from pddbench.workload.trace import load_trace

    return load_trace(MOONCAKE)
