"""The userspace delay line: `ip netns exec NS python -m netem.delayline ...`.

An iptables NFQUEUE rule sends the namespace's egress packets here (metadata only: the packets
stay in the kernel); each is released (ACCEPT) at its due time from netem.scheduler, or dropped.
Lateness (release time - due time) is measured per packet. SIGUSR1 writes the stats since the
last SIGUSR1 to --stats and resets them; SIGTERM/SIGINT write them and exit.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import select
import signal
import socket
import sys
import time

from netem.nfqueue import NF_ACCEPT, NF_DROP, NfQueue
from netem.profile import LinkProfile
from netem.scheduler import DelayScheduler


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


class Stats:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.packets = self.dropped = self.held = 0
        self.lateness: list[float] = []
        self.cpu0 = time.process_time()
        self.t0 = time.monotonic()

    def snapshot(self, sched: DelayScheduler) -> dict:
        lat = self.lateness
        return {
            "packets": self.packets, "dropped": self.dropped, "held": sched.held,
            "lateness_ms": {"p50": _pct(lat, 50), "p99": _pct(lat, 99), "max": max(lat) if lat else None,
                            "mean": sum(lat) / len(lat) if lat else None},
            "cpu_s": round(time.process_time() - self.cpu0, 4),
            "wall_s": round(time.monotonic() - self.t0, 4),
        }


def _write(path: str, obj: dict) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as fh:
        json.dump(obj, fh)
    os.replace(tmp, path)


def run(queue: int, profile: LinkProfile, direction: str, stats_path: str, ready_path: str) -> None:
    nfq = NfQueue(queue, profile.queue_limit_packets)
    now_ms = lambda: time.monotonic() * 1000.0  # noqa: E731 - the live line runs on real time
    sched = DelayScheduler(profile, direction, start_ms=now_ms())
    stats = Stats()
    heap: list[tuple[float, int, int]] = []
    seq = 0
    flags = {"dump": False, "stop": False}
    signal.signal(signal.SIGUSR1, lambda *_: flags.__setitem__("dump", True))
    signal.signal(signal.SIGTERM, lambda signum, _f: flags.__setitem__("stop", signum))
    signal.signal(signal.SIGINT, lambda signum, _f: flags.__setitem__("stop", signum))
    nfq.sock.setblocking(False)
    _write(ready_path, {"pid": os.getpid(), "queue": queue, "direction": direction})
    while not flags["stop"]:
        timeout = 0.2 if not heap else max(0.0, (heap[0][0] - now_ms()) / 1000.0)
        try:
            readable, _, _ = select.select([nfq], [], [], timeout)
        except InterruptedError:
            readable = []
        out: list[tuple[int, int]] = []
        if readable:
            while True:
                try:
                    ids = nfq.receive()
                except (BlockingIOError, socket.timeout):
                    break
                t = now_ms()
                for pid in ids:
                    stats.packets += 1
                    due = sched.release_time(t)
                    if due is None:
                        stats.dropped += 1
                        out.append((pid, NF_DROP))
                    else:
                        heapq.heappush(heap, (due, seq, pid))
                        seq += 1
        t = now_ms()
        while heap and heap[0][0] <= t:
            due, _, pid = heapq.heappop(heap)
            stats.lateness.append(t - due)
            out.append((pid, NF_ACCEPT))
        for i in range(0, len(out), 512):
            nfq.verdicts(out[i:i + 512])
        if flags["dump"]:
            flags["dump"] = False
            _write(stats_path, stats.snapshot(sched))
            stats.reset()
    _write(stats_path, stats.snapshot(sched))
    nfq.close()
    print(f"delay line {direction}: stopped by signal {flags['stop']}", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--queue", type=int, required=True)
    p.add_argument("--profile", required=True, help="resolved profile JSON")
    p.add_argument("--direction", choices=["forward", "reverse"], required=True)
    p.add_argument("--stats", required=True)
    p.add_argument("--ready", required=True)
    a = p.parse_args(argv)
    with open(a.profile) as fh:
        profile = LinkProfile.model_validate(json.load(fh))
    try:
        run(a.queue, profile, a.direction, a.stats, a.ready)
    except OSError as exc:
        print(f"delay line: {exc}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
