"""Small socket helpers for live runs: a free loopback port, and waiting for a listener
(inside a network namespace when given one)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

from pddbench.errors import UserError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(host: str, port: int, netns: str | None = None, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    probe = f"import socket;socket.create_connection(({host!r},{port}),timeout=0.5).close()"
    while time.monotonic() < deadline:
        if netns:
            ok = subprocess.run(["ip", "netns", "exec", netns, sys.executable, "-c", probe], capture_output=True).returncode == 0
        else:
            try:
                socket.create_connection((host, port), timeout=0.5).close()
                ok = True
            except OSError:
                ok = False
        if ok:
            return
        time.sleep(0.05 if netns is None else 0.2)
    raise UserError(f"nothing listens on {host}:{port} after {timeout_s:.0f} s")
