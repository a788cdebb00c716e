"""Kernel netem through raw rtnetlink: delay, jitter with a distribution table, loss (Bernoulli
or Gilbert-Elliott), rate. pyroute2's netem encoder sends no distribution table, so the
RTM_NEWQDISC message is built here (layouts from linux/pkt_sched.h) and sent on a netlink socket
opened inside the namespace.
"""

from __future__ import annotations

import errno
import os
import socket
import statistics
import struct

from netem.link_model import effective_delay_ms, effective_rate_gbps
from netem.profile import Jitter, LinkProfile

RTM_NEWQDISC = 36
NLM_F_REQUEST, NLM_F_ACK, NLM_F_EXCL, NLM_F_CREATE = 1, 4, 0x200, 0x400
TCA_KIND, TCA_OPTIONS = 1, 2
TCA_NETEM_DELAY_DIST, TCA_NETEM_LOSS, TCA_NETEM_RATE64 = 2, 5, 8
TCA_NETEM_LATENCY64, TCA_NETEM_JITTER64, TCA_NETEM_PRNG_SEED = 10, 11, 14
NETEM_LOSS_GE = 2
TC_H_ROOT = 0xFFFFFFFF
NETEM_DIST_SCALE = 8192
TABLE_SIZE = 4096
U32 = 0xFFFFFFFF


def _attr(atype: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("=HH", length, atype) + payload + b"\0" * ((4 - length % 4) % 4)


def _prob(p: float) -> int:
    return min(U32, int(round(p * U32)))


def distribution_table(j: Jitter) -> list[int] | None:
    """netem's table: TABLE_SIZE quantiles of the standardised offset, times NETEM_DIST_SCALE;
    netem draws delay = latency + jitter * table[i] / NETEM_DIST_SCALE."""
    if j.distribution in ("none",):
        return None
    norm = statistics.NormalDist()
    qs = [(i + 0.5) / TABLE_SIZE for i in range(TABLE_SIZE)]
    if j.distribution == "normal":
        vals = [norm.inv_cdf(q) for q in qs]
    elif j.distribution == "uniform":
        vals = [2 * q - 1 for q in qs]
    elif j.distribution == "pareto":
        vals = [(1 - q) ** (-1 / j.pareto_shape) - 1 for q in qs]
    elif j.distribution == "lognormal":
        vals = [2.718281828459045 ** norm.inv_cdf(q) - 1 for q in qs]
    else:  # empirical: offsets in units of sd_ms (1 ms when unset)
        unit = j.sd_ms or 1.0
        s = sorted(j.samples_ms)
        vals = [s[min(len(s) - 1, int(q * len(s)))] / unit for q in qs]
    return [max(-32768, min(32767, int(round(v * NETEM_DIST_SCALE)))) for v in vals]


def netem_options(profile: LinkProfile, direction: str = "forward") -> bytes:
    over = getattr(profile, direction)
    delay_ms = effective_delay_ms(profile, direction=direction)
    rate = effective_rate_gbps(profile, direction=direction, emulated=True)
    loss = over.loss or profile.loss
    jit = over.jitter or profile.jitter
    jitter_ms = jit.sd_ms if jit.distribution != "empirical" else (jit.sd_ms or 1.0)
    bernoulli = loss.p if loss.model == "bernoulli" else 0.0
    # struct tc_netem_qopt {latency, limit, loss, gap, duplicate, jitter}; 64-bit ns attrs carry delays.
    qopt = struct.pack("=IIIIII", 0, profile.queue_limit_packets, _prob(bernoulli), 0, 0, 0)
    attrs = _attr(TCA_NETEM_LATENCY64, struct.pack("=q", int(delay_ms * 1e6)))
    attrs += _attr(TCA_NETEM_JITTER64, struct.pack("=q", int(jitter_ms * 1e6)))
    table = distribution_table(jit)
    if table is not None:
        attrs += _attr(TCA_NETEM_DELAY_DIST, struct.pack(f"={len(table)}h", *table))
    if loss.model == "gilbert_elliott":
        ge = struct.pack("=IIII", _prob(loss.p), _prob(loss.r), _prob(1 - loss.loss_bad), _prob(loss.loss_good))
        attrs += _attr(TCA_NETEM_LOSS, _attr(NETEM_LOSS_GE, ge))
    if rate is not None:
        attrs += _attr(TCA_NETEM_RATE64, struct.pack("=Q", int(rate * 1e9 / 8)))
    attrs += _attr(TCA_NETEM_PRNG_SEED, struct.pack("=Q", profile.seed & 0xFFFFFFFFFFFFFFFF))
    return qopt + attrs


def qdisc_message(ifindex: int, options: bytes, seq: int = 1) -> bytes:
    tcmsg = struct.pack("=BBHiIII", socket.AF_UNSPEC, 0, 0, ifindex, 0x10000, TC_H_ROOT, 0)
    body = tcmsg + _attr(TCA_KIND, b"netem\0") + _attr(TCA_OPTIONS, options)
    flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL
    return struct.pack("=IHHII", 16 + len(body), RTM_NEWQDISC, flags, seq, 0) + body


def parse_qdisc_message(msg: bytes) -> dict:
    """Decode what qdisc_message() sends (for tests and debugging)."""
    length, mtype, flags, _, _ = struct.unpack_from("=IHHII", msg, 0)
    _, _, _, ifindex, handle, parent, _ = struct.unpack_from("=BBHiIII", msg, 16)
    out: dict = {"type": mtype, "flags": flags, "ifindex": ifindex, "handle": handle, "parent": parent}
    off = 16 + 20
    while off < length:
        alen, atype = struct.unpack_from("=HH", msg, off)
        payload = msg[off + 4: off + alen]
        if atype == TCA_KIND:
            out["kind"] = payload.rstrip(b"\0").decode()
        elif atype == TCA_OPTIONS:
            latency, limit, loss, _, _, jitter = struct.unpack_from("=IIIIII", payload, 0)
            out.update(limit=limit, loss_u32=loss)
            a = 24
            while a < len(payload):
                l2, t2 = struct.unpack_from("=HH", payload, a)
                p2 = payload[a + 4: a + l2]
                if t2 == TCA_NETEM_LATENCY64:
                    out["latency_ns"] = struct.unpack("=q", p2)[0]
                elif t2 == TCA_NETEM_JITTER64:
                    out["jitter_ns"] = struct.unpack("=q", p2)[0]
                elif t2 == TCA_NETEM_DELAY_DIST:
                    out["dist"] = list(struct.unpack(f"={len(p2) // 2}h", p2))
                elif t2 == TCA_NETEM_RATE64:
                    out["rate_bytes_per_s"] = struct.unpack("=Q", p2)[0]
                elif t2 == TCA_NETEM_LOSS:
                    out["ge"] = struct.unpack_from("=IIII", p2, 4)
                elif t2 == TCA_NETEM_PRNG_SEED:
                    out["seed"] = struct.unpack("=Q", p2)[0]
                a += (l2 + 3) & ~3
        off += (alen + 3) & ~3
    return out


def _send_in_netns(netns: str, msg: bytes) -> None:
    from pyroute2 import netns as pnetns

    pnetns.pushns(netns)
    try:
        s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    finally:
        pnetns.popns()
    try:
        s.bind((0, 0))
        s.send(msg)
        reply = s.recv(65536)
        (err,) = struct.unpack_from("=i", reply, 16)
        if err:
            raise OSError(-err, os.strerror(-err))
    finally:
        s.close()


def apply_netem(netns: str, ifname: str, profile: LinkProfile, direction: str) -> None:
    from pyroute2 import IPRoute

    with IPRoute(netns=netns) as ipr:
        idx = ipr.link_lookup(ifname=ifname)[0]
    _send_in_netns(netns, qdisc_message(idx, netem_options(profile, direction)))


def kernel_netem_available() -> tuple[bool, str]:
    """Try a netem qdisc on a throwaway veth in a temporary namespace."""
    from pyroute2 import IPRoute, netns

    name = f"pddb-probe-{os.getpid()}"
    try:
        netns.create(name)
        with IPRoute(netns=name) as ipr:
            ipr.link("add", ifname="pddb-p0", kind="veth", peer={"ifname": "pddb-p1"})
            idx = ipr.link_lookup(ifname="pddb-p0")[0]
        _send_in_netns(name, qdisc_message(idx, netem_options(LinkProfile(delay_ms=1))))
        return True, "sch_netem accepted a test qdisc"
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return False, "the kernel has no sch_netem (ENOENT adding a netem qdisc)"
        return False, f"netem probe failed: {exc}"
    finally:
        try:
            netns.remove(name)
        except OSError:
            pass
