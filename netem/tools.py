"""Small network tools run inside the namespaces for calibration and tests (`python -m netem.tools`):
- `echo PORT`: UDP echo server; prints "ready" once bound.
- `probe HOST PORT COUNT INTERVAL_MS`: UDP probes sent on a fixed schedule (not waiting for
  replies); prints JSON with each probe's RTT (ms) and the ids of probes never answered.
- `sink PORT`: TCP sink; prints bytes and first-to-last-byte seconds when the sender closes.
- `send HOST PORT SECONDS|--bytes N`: TCP bulk sender.
"""

from __future__ import annotations

import json
import socket
import struct
import sys
import threading
import time


STEADY_AFTER_S = 0.5


def udp_echo(port: int) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", port))
    print("ready", flush=True)
    while True:
        data, addr = s.recvfrom(65536)
        s.sendto(data, addr)


def udp_probe(host: str, port: int, count: int, interval_ms: float, wait_s: float = 3.0) -> dict:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect((host, port))
    sent: dict[int, float] = {}
    rtt: dict[int, float] = {}
    done = threading.Event()

    def receive() -> None:
        s.settimeout(0.2)
        while not done.is_set():
            try:
                data = s.recv(2048)
            except socket.timeout:
                continue
            now = time.perf_counter()
            seq = struct.unpack_from("!I", data)[0]
            if seq in sent:
                rtt[seq] = (now - sent[seq]) * 1000
    t = threading.Thread(target=receive, daemon=True)
    t.start()
    start = time.perf_counter()
    for i in range(count):
        target = start + i * interval_ms / 1000
        while (now := time.perf_counter()) < target:
            time.sleep(min(0.001, target - now))
        sent[i] = time.perf_counter()
        s.send(struct.pack("!I", i) + b"\0" * 60)
    deadline = time.perf_counter() + wait_s
    while len(rtt) < count and time.perf_counter() < deadline:
        time.sleep(0.01)
    done.set()
    t.join()
    return {"rtt_ms": [rtt[i] for i in sorted(rtt)], "lost": [i for i in range(count) if i not in rtt], "sent": count}


def tcp_sink(port: int) -> None:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(1)
    print("ready", flush=True)
    conn, _ = srv.accept()
    total, first, last = 0, None, None
    steady_bytes, steady_from = 0, None  # after a warm-up, so slow start does not count
    buf = bytearray(1 << 20)
    while True:
        n = conn.recv_into(buf)
        if n == 0:
            break
        now = time.monotonic()
        if first is None:
            first = now
        elif now - first >= STEADY_AFTER_S:
            if steady_from is None:
                steady_from = now
            else:
                steady_bytes += n
        last = now
        total += n
    steady_s = (last - steady_from) if steady_from and last else 0.0
    print(json.dumps({"bytes": total, "seconds": (last - first) if first and last else 0.0,
                      "steady_bytes": steady_bytes, "steady_seconds": steady_s}), flush=True)


def tcp_send(host: str, port: int, seconds: float | None, nbytes: int | None) -> dict:
    s = socket.create_connection((host, port), timeout=30)
    chunk = b"\0" * (1 << 20)
    sent, start = 0, time.monotonic()
    while True:
        if nbytes is not None and sent >= nbytes:
            break
        if seconds is not None and time.monotonic() - start >= seconds:
            break
        n = chunk if nbytes is None else chunk[: min(len(chunk), nbytes - sent)]
        s.sendall(n)
        sent += len(n)
    s.shutdown(socket.SHUT_WR)
    s.recv(1)  # wait for the sink to close: everything was received
    s.close()
    return {"bytes": sent, "seconds": time.monotonic() - start}


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "echo":
        udp_echo(int(args[0]))
    elif cmd == "probe":
        print(json.dumps(udp_probe(args[0], int(args[1]), int(args[2]), float(args[3]))))
    elif cmd == "sink":
        tcp_sink(int(args[0]))
    elif cmd == "send":
        if args[2] == "--bytes":
            print(json.dumps(tcp_send(args[0], int(args[1]), None, int(args[3]))))
        else:
            print(json.dumps(tcp_send(args[0], int(args[1]), float(args[2]), None)))
    else:
        sys.exit(f"unknown tool {cmd}")
