"""Datacenter namespaces joined by a veth pair, with pinned TCP settings.

Everything pddbench creates carries the `pddb-` prefix (namespaces, veths) or the `pddbench`
comment (iptables rules), so teardown finds exactly what we made and nothing else.
"""

from __future__ import annotations

import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

PREFIX = "pddb-"

# Pinned per namespace and recorded with results: a new namespace here defaults to BBR and a
# 4 MiB tcp_wmem cap, which limits a single flow to ~1 Gbit/s at 30 ms RTT.
# (net.core.*mem_max are global and read-only inside a namespace; autotuning is bounded by the
# tcp_*mem maxima alone.) Congestion control: cubic where the host allows it in namespaces
# (tcp_allowed_congestion_control), else the first allowed of bbr/reno; what was set is recorded.
DEFAULT_TCP = {
    "net.ipv4.tcp_congestion_control": "cubic",
    "net.ipv4.tcp_wmem": "4096 262144 67108864",
    "net.ipv4.tcp_rmem": "4096 262144 67108864",
}


@dataclass(frozen=True)
class Host:
    dc: str            # "a", "b", ...
    netns: str         # pddb-dc-a
    ifname: str        # veth inside the namespace
    address: str       # 10.77.0.1


# The two datacenters: the one place their namespace names and addresses are written. The WAN's
# forward direction is DC_A -> DC_B; live deployments put P (and RLD) in DC_A, D / MD in DC_B.
DC_A = Host("a", f"{PREFIX}dc-a", f"{PREFIX}a0", "10.77.0.1")
DC_B = Host("b", f"{PREFIX}dc-b", f"{PREFIX}b0", "10.77.0.2")


@dataclass
class Topology:
    hosts: list[Host]
    prefix_len: int = 24
    tcp: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_TCP))

    @classmethod
    def two_dc(cls) -> "Topology":
        return cls([DC_A, DC_B])

    def host(self, dc: str) -> Host:
        return next(h for h in self.hosts if h.dc == dc)

    def to_dict(self) -> dict:
        return asdict(self)


def ns_exec(netns: str, *cmd: str, check: bool = True, capture: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", netns, *cmd], check=check, capture_output=capture, text=True)


def _sysctl_path(key: str) -> str:
    return "/proc/sys/" + key.replace(".", "/")


def create(topo: Topology) -> None:
    """Create namespaces and the veth pair (two hosts); raises on failure (the caller tears down)."""
    from pyroute2 import IPRoute, netns

    if len(topo.hosts) != 2:
        raise ValueError("this build links exactly two datacenters")
    a, b = topo.hosts
    for h in topo.hosts:
        netns.create(h.netns)
    with IPRoute() as ipr:
        ipr.link("add", ifname=a.ifname, kind="veth", peer={"ifname": b.ifname})
        for h in topo.hosts:
            idx = ipr.link_lookup(ifname=h.ifname)[0]
            ipr.link("set", index=idx, net_ns_fd=h.netns)
    for h in topo.hosts:
        with IPRoute(netns=h.netns) as ipr:
            idx = ipr.link_lookup(ifname=h.ifname)[0]
            ipr.addr("add", index=idx, address=h.address, prefixlen=topo.prefix_len)
            ipr.link("set", index=idx, state="up", txqlen=10000)
            lo = ipr.link_lookup(ifname="lo")[0]
            ipr.link("set", index=lo, state="up")
        allowed = ns_exec(h.netns, "cat", _sysctl_path("net.ipv4.tcp_allowed_congestion_control")).stdout.split()
        for key, value in topo.tcp.items():
            if key == "net.ipv4.tcp_congestion_control" and value not in allowed:
                value = next((c for c in (value, "cubic", "bbr", "reno") if c in allowed), allowed[0])
                topo.tcp[key] = value
            ns_exec(h.netns, "sh", "-c", f"echo '{value}' > {_sysctl_path(key)}")


def read_tcp_settings(netns: str | None) -> dict[str, str]:
    """The TCP settings of `netns`, or (None) of the namespace this process runs in."""
    out = {}
    for key in DEFAULT_TCP:
        if netns is None:
            try:
                out[key] = " ".join(Path(_sysctl_path(key)).read_text().split())
            except OSError:
                out[key] = ""
            continue
        res = ns_exec(netns, "cat", _sysctl_path(key), check=False)
        out[key] = " ".join(res.stdout.split())
    return out


def our_namespaces() -> list[str]:
    from pyroute2 import netns

    return sorted(n for n in netns.listnetns() if n.startswith(PREFIX))


def destroy_namespaces() -> list[str]:
    """Remove every pddb- namespace (their veths and qdiscs go with them)."""
    from pyroute2 import netns

    removed = []
    for name in our_namespaces():
        pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True).stdout.split()
        for pid in pids:
            subprocess.run(["kill", "-TERM", pid], capture_output=True)
        netns.remove(name)
        removed.append(name)
    # A veth left in the root namespace by a crash between add and move.
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        for link in ipr.get_links():
            name = link.get_attr("IFLA_IFNAME")
            if name and name.startswith(PREFIX):
                ipr.link("del", index=link["index"])
                removed.append(name)
    return removed
