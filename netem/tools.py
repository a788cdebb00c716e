"""Small network tools run inside the namespaces for calibration and tests:
`python -m netem.tools echo PORT` (UDP echo), `python -m netem.tools sink PORT` (TCP sink that
reports bytes and seconds on stdout when the sender closes)."""

from __future__ import annotations

import json
import socket
import sys
import time


def udp_echo(port: int) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", port))
    while True:
        data, addr = s.recvfrom(65536)
        s.sendto(data, addr)


def tcp_sink(port: int) -> None:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(1)
    print("ready", flush=True)
    conn, _ = srv.accept()
    total, first, last = 0, None, None
    buf = bytearray(1 << 20)
    while True:
        n = conn.recv_into(buf)
        if n == 0:
            break
        now = time.monotonic()
        first = first or now
        last = now
        total += n
    print(json.dumps({"bytes": total, "seconds": (last - first) if first and last else 0.0}), flush=True)


if __name__ == "__main__":
    cmd, port = sys.argv[1], int(sys.argv[2])
    {"echo": udp_echo, "sink": tcp_sink}[cmd](port)
