"""The request front (PD proxy or PDD router) as its own process, stopped whatever happens."""

from __future__ import annotations

import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from pddbench.live.net import wait_port


@contextmanager
def running_front(module: str, args: list[str], host: str, port: int, netns: str | None,
                  log: Path) -> Iterator[str]:
    """Start `python -m module` on host:port (inside `netns` when given), yield its URL once it
    listens, and stop it on exit, also when it never came up or the block fails."""
    cmd = [sys.executable, "-m", module, "--host", host, "--port", str(port), *args]
    if netns:
        cmd = ["ip", "netns", "exec", netns, *cmd]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_port(host, port, netns, timeout_s=120)  # fronts warm their KV paths first
        yield f"http://{host}:{port}"
    finally:
        stop(proc)


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
