"""The userspace delay line: `ip netns exec NS python -m netem.delayline ...`.

An iptables NFQUEUE rule sends the namespace's egress packets here (metadata only: the packets
stay in the kernel); each is released (ACCEPT) at its due time from netem.scheduler, or dropped.
Lateness (release time - due time) is measured per packet. SIGUSR1 writes the stats since the
last SIGUSR1 to --stats and resets them; SIGTERM/SIGINT write them and exit.

Holding time under CPU load (two cores shared with vLLM engines or CPU-bound jobs):
- the line runs SCHED_FIFO where permitted (a wake-up then preempts the CPU-bound tasks at once
  instead of waiting for the fair scheduler); otherwise it falls back to the lowest nice value it
  may set, and says so in its stats (`scheduling`);
- a packet is dated from the kernel's receive timestamp (NFQA_TIMESTAMP), not from when the
  process read it, so a late read no longer lengthens the delay unseen; the read lag is reported;
- it sleeps until `spin_us` before the next due time and spins the rest (a timer wake-up is
  itself late by tens of µs to ms under load);
  Spinning is for a sparse line (at most SPIN_MAX_QUEUED packets held): under bulk traffic the
  line wakes every few µs anyway, and spinning there cost ~0.45 core per direction at 1 Gbit/s;
- its memory is locked (mlockall, MCL_CURRENT only: MCL_FUTURE would populate every later
  allocation) since this VM reclaims idle pages (kdamond);
- the cyclic garbage collector is off (the packet path makes no reference cycles).
"""

from __future__ import annotations

import argparse
import errno
import gc
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


SPIN_MAX_QUEUED = 8


def lock_memory() -> str:
    """mlockall(MCL_CURRENT): the pages mapped now (code, libraries, heap so far); returns
    "locked" or why not."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        if libc.mlockall(1) != 0:
            return f"mlockall failed: {os.strerror(ctypes.get_errno())}"
    except OSError as exc:
        return f"mlockall unavailable: {exc}"
    return "locked"


def set_realtime(priority: int, nice_fallback: int = -20) -> dict:
    """Make the calling process (and threads it starts later) SCHED_FIFO at `priority`; where
    that is refused (no CAP_SYS_NICE, RT runtime 0 in the cgroup), the lowest nice value allowed.
    Returns what was set, for the record."""
    info: dict = {"requested": f"SCHED_FIFO:{priority}" if priority > 0 else "SCHED_OTHER"}
    if priority > 0:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
        except (OSError, AttributeError) as exc:
            info["fallback_reason"] = f"SCHED_FIFO refused: {exc}"
        else:
            info.update(policy="SCHED_FIFO", priority=priority)
            return info
    try:
        now = os.nice(0)
        os.nice(max(nice_fallback - now, -40))
    except OSError as exc:
        info["nice_reason"] = str(exc)
    info.update(policy="SCHED_OTHER", priority=0, nice=os.nice(0))
    return info


class Stats:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.packets = self.dropped = self.held = self.stamped = self.unstamped = self.overruns = 0
        self.lateness: list[float] = []
        self.rx_lag: list[float] = []  # kernel receive -> read by this process (ms)
        self.cpu0 = time.process_time()
        self.t0 = time.monotonic()

    def snapshot(self, sched: DelayScheduler, scheduling: dict | None = None) -> dict:
        lat, lag = self.lateness, self.rx_lag
        return {
            "packets": self.packets, "dropped": self.dropped, "held": sched.held,
            "lateness_ms": {"p50": _pct(lat, 50), "p99": _pct(lat, 99), "max": max(lat) if lat else None,
                            "mean": sum(lat) / len(lat) if lat else None},
            "rx_lag_ms": {"p50": _pct(lag, 50), "p99": _pct(lag, 99), "max": max(lag) if lag else None},
            "dated_by": {"kernel_timestamp": self.stamped, "read_time": self.unstamped},
            "overruns": self.overruns,  # ENOBUFS: queue messages lost, their packets never released
            "scheduling": scheduling,
            "cpu_s": round(time.process_time() - self.cpu0, 4),
            "wall_s": round(time.monotonic() - self.t0, 4),
        }


def _write(path: str, obj: dict) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as fh:
        json.dump(obj, fh)
    os.replace(tmp, path)


MAX_RX_LAG_MS = 1000.0  # a kernel stamp further back than this (or in the future) is not trusted


def run(queue: int, profile: LinkProfile, direction: str, stats_path: str, ready_path: str,
        rt_priority: int = 50, spin_us: float = 200.0, kernel_time: bool = True) -> None:
    scheduling = set_realtime(rt_priority)
    scheduling["spin_us"] = spin_us
    gc.disable()
    scheduling["gc"] = "disabled"
    scheduling["memory"] = lock_memory()
    scheduling["spin_max_queued"] = SPIN_MAX_QUEUED
    nfq = NfQueue(queue, profile.queue_limit_packets)
    stamp_sock = NfQueue.enable_rx_timestamps() if kernel_time else None
    scheduling["dated_by"] = "kernel receive timestamp" if kernel_time else "read time"
    mono, wall = time.monotonic, time.time
    now_ms = lambda: mono() * 1000.0  # noqa: E731 - the live line runs on real time
    sched = DelayScheduler(profile, direction, start_ms=now_ms())
    stats = Stats()
    heap: list[tuple[float, int, int]] = []
    push, pop = heapq.heappush, heapq.heappop
    seq = 0
    spin_ms = spin_us / 1000.0
    flags = {"dump": False, "stop": False}
    signal.signal(signal.SIGUSR1, lambda *_: flags.__setitem__("dump", True))
    signal.signal(signal.SIGTERM, lambda signum, _f: flags.__setitem__("stop", signum))
    signal.signal(signal.SIGINT, lambda signum, _f: flags.__setitem__("stop", signum))
    nfq.sock.setblocking(False)
    _write(ready_path, {"pid": os.getpid(), "queue": queue, "direction": direction, "scheduling": scheduling})
    while not flags["stop"]:
        early = spin_ms if len(heap) <= SPIN_MAX_QUEUED else 0.0
        timeout = 0.2 if not heap else max(0.0, (heap[0][0] - early - now_ms()) / 1000.0)
        try:
            readable, _, _ = select.select([nfq], [], [], timeout)
        except InterruptedError:
            readable = []
        out: list[tuple[int, int]] = []
        if readable:
            while True:
                try:
                    pkts = nfq.receive_packets()
                except (BlockingIOError, socket.timeout):
                    break
                except OSError as exc:
                    if exc.errno != errno.ENOBUFS:
                        raise
                    stats.overruns += 1  # the socket buffer overflowed: recorded, the line goes on
                    continue
                t, w = now_ms(), wall()
                for pid, ts in pkts:
                    stats.packets += 1
                    arrival = t
                    if ts is not None:
                        lag = (w - ts) * 1000.0
                        if 0.0 <= lag <= MAX_RX_LAG_MS:
                            arrival = t - lag
                            stats.rx_lag.append(lag)
                            stats.stamped += 1
                        else:
                            stats.unstamped += 1
                    else:
                        stats.unstamped += 1
                    due = sched.release_time(arrival)
                    if due is None:
                        stats.dropped += 1
                        out.append((pid, NF_DROP))
                    else:
                        push(heap, (due, seq, pid))
                        seq += 1
        t = now_ms()
        if heap and spin_ms > 0 and len(heap) <= SPIN_MAX_QUEUED and t < heap[0][0] <= t + spin_ms:
            due = heap[0][0]
            while t < due:  # at most spin_us: a timer would wake later than this
                t = now_ms()
        while heap and heap[0][0] <= t:
            due, _, pid = pop(heap)
            stats.lateness.append(t - due)
            out.append((pid, NF_ACCEPT))
        for i in range(0, len(out), 512):
            nfq.verdicts(out[i:i + 512])
        if flags["dump"]:
            flags["dump"] = False
            _write(stats_path, stats.snapshot(sched, scheduling))
            stats.reset()
    _write(stats_path, stats.snapshot(sched, scheduling))
    nfq.close()
    if stamp_sock is not None:
        stamp_sock.close()
    print(f"delay line {direction}: stopped by signal {flags['stop']}", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--queue", type=int, required=True)
    p.add_argument("--profile", required=True, help="resolved profile JSON")
    p.add_argument("--direction", choices=["forward", "reverse"], required=True)
    p.add_argument("--stats", required=True)
    p.add_argument("--ready", required=True)
    p.add_argument("--rt-priority", type=int, default=int(os.environ.get("PDDBENCH_NETEM_RT_PRIORITY", 50)),
                   help="SCHED_FIFO priority (0: stay SCHED_OTHER, at the lowest nice value allowed)")
    p.add_argument("--spin-us", type=float, default=float(os.environ.get("PDDBENCH_NETEM_SPIN_US", 200)),
                   help="spin this long before each due time instead of sleeping (0: never spin)")
    p.add_argument("--read-time", action="store_true",
                   help="date packets from when they are read, not from the kernel's receive timestamp")
    a = p.parse_args(argv)
    with open(a.profile) as fh:
        profile = LinkProfile.model_validate(json.load(fh))
    try:
        run(a.queue, profile, a.direction, a.stats, a.ready, rt_priority=a.rt_priority, spin_us=a.spin_us,
            kernel_time=not a.read_time)
    except OSError as exc:
        print(f"delay line: {exc}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
