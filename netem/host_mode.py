"""`pddbench netem up PROFILE --dev IFACE --peer PREFIX`: the WAN emulated between real hosts.

Only this host's traffic with the peer datacenter's prefix on IFACE is shaped, in the namespace
the command runs in; nothing of pddbench's topology is made. As between the namespaces pddbench
creates, the rate is shaped on the sender's egress (an HTB class that a u32 filter gives only
packets to PREFIX; everything else bypasses it unshaped, HTB's direct queue) and the delay, jitter
and loss on the receiver's ingress (an NFQUEUE rule for packets from PREFIX, released by the
userspace delay line at their due time). So one host applies its sending direction's rate and its
receiving direction's delay: run it on both sides (`--sends forward` on datacenter A's hosts,
`--sends reverse` on B's) for the whole profile both ways.

Backend: the delay line (iptables + NFQUEUE), on every host with iptables; kernel netem for this
mode is not built (it would need the same filter in front of a netem qdisc). Teardown (`netem
down`, also after a crash) removes the root qdisc it added (recorded in its state), every mangle
rule with its comment and its delay line."""

from __future__ import annotations

import ipaddress
import json
import shutil
import subprocess
import sys

from netem.link_model import effective_rate_gbps
from netem.profile import LinkProfile

RULE_COMMENT = "pddbench-host"
DEFAULT_QDISCS = ("noqueue", "pfifo_fast", "mq", "fq_codel", "pfifo", "fq")  # the kernel's own: ours to replace
HANDLE, CLASS = "1:", "1:10"


class HostModeError(RuntimeError):
    pass


def _run(*cmd: str) -> subprocess.CompletedProcess:
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise HostModeError(f"`{' '.join(cmd)}` failed: {(res.stderr or res.stdout).strip()[-300:]}")
    return res


def check_args(dev: str, peer: str) -> str:
    """The peer prefix in canonical form; refused in one line where the device or prefix is wrong."""
    try:
        net = ipaddress.ip_network(peer, strict=False)
    except ValueError:
        raise HostModeError(f"--peer {peer}: not an IPv4 prefix (e.g. 10.77.0.0/24 or 10.77.0.2/32)") from None
    if net.version != 4:
        raise HostModeError(f"--peer {peer}: only IPv4 prefixes are shaped")
    if shutil.which("tc") is None or shutil.which("iptables") is None:
        raise HostModeError("host mode needs tc and iptables (apt-get install iproute2 iptables)")
    if subprocess.run(["ip", "link", "show", "dev", dev], capture_output=True).returncode != 0:
        raise HostModeError(f"--dev {dev}: no such interface in this network namespace")
    return str(net)


def root_qdisc(dev: str) -> str | None:
    out = _run("tc", "-j", "qdisc", "show", "dev", dev).stdout
    for q in json.loads(out or "[]"):
        if q.get("root"):
            return q.get("kind")
    return None


def shape_rate(dev: str, peer: str, rate_gbps: float) -> None:
    from netem.shaping import burst_bytes

    kind = root_qdisc(dev)
    if kind not in DEFAULT_QDISCS and kind is not None:
        raise HostModeError(f"--dev {dev} already has a root qdisc '{kind}' that is not pddbench's: remove it first "
                            "(pddbench never replaces a qdisc it did not add)")
    burst = str(burst_bytes(rate_gbps))
    _run("tc", "qdisc", "add", "dev", dev, "root", "handle", HANDLE, "htb", "default", "ffff")  # unclassified: direct
    _run("tc", "class", "add", "dev", dev, "parent", HANDLE, "classid", CLASS, "htb", "rate",
         f"{int(rate_gbps * 1e9)}bit", "burst", burst, "cburst", burst)
    _run("tc", "filter", "add", "dev", dev, "parent", HANDLE, "protocol", "ip", "prio", "1", "u32", "match", "ip", "dst",
         peer, "flowid", CLASS)


def delay_rule(action: str, dev: str, peer: str, queue: int) -> list[str]:
    return ["iptables", "-t", "mangle", action, "PREROUTING", "-i", dev, "-s", peer, "-m", "comment", "--comment",
            RULE_COMMENT, "-j", "NFQUEUE", "--queue-num", str(queue)]


def up_host(state_dir, profile: LinkProfile, dev: str, peer: str, sends: str, queue: int, start_line) -> dict:
    """Shape this host's side; returns the state to record. The caller tears down on failure."""
    peer = check_args(dev, peer)
    receives = "reverse" if sends == "forward" else "forward"
    state = {"mode": "host", "dev": dev, "peer": peer, "sends": sends, "receives": receives, "qdisc_added": False,
             "backend": "tbf+nfqueue", "shaping": {}}
    (state_dir / "host.json").write_text(json.dumps(state))  # what to remove, from the first change on
    rate = effective_rate_gbps(profile, direction=sends, emulated=True)
    if rate is not None:
        shape_rate(dev, peer, rate)
        state["qdisc_added"] = True
        state["shaping"][sends] = "htb"
        (state_dir / "host.json").write_text(json.dumps(state))
    _run(*delay_rule("-A", dev, peer, queue))
    state["rule_added"], state["queue"] = True, queue
    (state_dir / "host.json").write_text(json.dumps(state))
    start_line([sys.executable, "-m", "netem.delayline"], receives)
    state["shaping"][receives] = "nfqueue delay line"
    return state


def undo_host(state_dir) -> list[str]:
    """A start that failed: remove exactly what its host.json says it added (its own mangle rule
    and root qdisc), nothing another emulation on this host made."""
    host = state_dir / "host.json"
    if not host.exists():
        return []
    st, removed = json.loads(host.read_text()), []
    if st.get("rule_added"):
        cmd = delay_rule("-D", st["dev"], st["peer"], st.get("queue", 0))
        if subprocess.run(cmd, capture_output=True).returncode == 0:
            removed.append("iptables rule " + " ".join(cmd[3:]))
    if st.get("qdisc_added") and subprocess.run(["tc", "qdisc", "del", "dev", st["dev"], "root"],
                                                capture_output=True).returncode == 0:
        removed.append(f"qdisc on {st['dev']}")
    return removed


def down_host(state_dir) -> list[str]:
    """Remove what host mode added here: its mangle rules (any, found by comment) and the root
    qdisc its state says it added. Returns what was removed."""
    removed = []
    listing = subprocess.run(["iptables", "-t", "mangle", "-S", "PREROUTING"], capture_output=True, text=True).stdout \
        if shutil.which("iptables") else ""
    for line in listing.splitlines():
        if f"--comment {RULE_COMMENT}" in line and line.startswith("-A "):
            subprocess.run(["iptables", "-t", "mangle", "-D", *line.split()[1:]], capture_output=True)
            removed.append("iptables rule " + line)
    host = state_dir / "host.json"
    if host.exists():
        st = json.loads(host.read_text())
        if st.get("qdisc_added"):
            res = subprocess.run(["tc", "qdisc", "del", "dev", st["dev"], "root"], capture_output=True)
            if res.returncode == 0:
                removed.append(f"qdisc on {st['dev']}")
    return removed
