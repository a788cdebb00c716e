"""Small socket helpers for live runs: a free loopback port, and waiting for a listener
(inside a network namespace when given one)."""

from __future__ import annotations

import random
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterable

from pddbench.core.errors import UserError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ephemeral_port_low() -> int:
    """The lowest port the kernel hands out for port 0 and outgoing connections."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port_base(offsets: Iterable[int], lowest: int = 10000) -> int:
    """A base port such that every base + offset is free on loopback and below the kernel's
    ephemeral range. Engines listen on fixed ports chosen before they start, while vLLM and every
    client take ephemeral ports of their own meanwhile: a fixed port inside that range can be
    taken between our choice and the engine's bind (a NIXL side channel lost that way hung a
    run's start for 240 s)."""
    offsets = sorted(set(offsets))
    top = ephemeral_port_low() - offsets[-1] - 1
    rng = random.Random()  # not a measurement: ports need no seed
    for _ in range(200 if top > lowest else 0):
        base = rng.randrange(lowest, top)
        if all(_bindable(base + o) for o in offsets):
            return base
    raise UserError(f"no free ports below {ephemeral_port_low()} for offsets {offsets}")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


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
