"""`pddbench netem up PROFILE --dev IFACE --peer PREFIX` (host mode): the WAN emulated on a real
host's interface for the peer datacenter's prefix only. Here a namespace the test makes acts as
the host (not pddbench's topology): its veth carries a peer address, shaped, and another address
of the same peer host, which must stay unshaped."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("iptables") is None or shutil.which("tc") is None,
                                reason="host mode needs root, iptables and tc")

PEER, OTHER = "10.88.0.2", "10.88.0.3"


def _ns(name: str, *cmd: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", name, *cmd], capture_output=True, text=True, **kw)


@pytest.fixture
def hosts(tmp_path):
    """Two namespaces joined by a veth pair: 'host' (10.88.0.1) and 'peer' (10.88.0.2 and .3),
    with the calibration's UDP echo and TCP sink running on the peer."""
    host, peer = f"hmh-{os.getpid()}", f"hmp-{os.getpid()}"
    procs = []
    for n in (host, peer):
        subprocess.run(["ip", "netns", "add", n], check=True)
    try:
        subprocess.run(["ip", "link", "add", "vh", "netns", host, "type", "veth", "peer", "name", "vp", "netns", peer],
                       check=True)
        for n, dev, addrs in ((host, "vh", ["10.88.0.1/24"]), (peer, "vp", [f"{PEER}/24", f"{OTHER}/24"])):
            for a in addrs:
                _ns(n, "ip", "addr", "add", a, "dev", dev, check=True)
            _ns(n, "ip", "link", "set", dev, "up", check=True)
            _ns(n, "ip", "link", "set", "lo", "up", check=True)
        # the other address answers from itself (an echo bound to 0.0.0.0 would answer from .2)
        other_echo = ("import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
                      f"s.bind(('{OTHER}', 9102)); print('ready', flush=True)\n"
                      "while True:\n    d, a = s.recvfrom(65536); s.sendto(d, a)")
        for cmd in (["-m", "netem.tools", "echo", "9100"], ["-m", "netem.tools", "sink", "9101"], ["-c", other_echo]):
            p = subprocess.Popen(["ip", "netns", "exec", peer, sys.executable, *cmd], cwd=REPO,
                                 stdout=subprocess.PIPE, text=True)
            assert p.stdout.readline().strip() == "ready"
            procs.append(p)
        yield {"host": host, "peer": peer, "state": tmp_path / "netem-state"}
    finally:
        for p in procs:
            p.kill()
            p.wait()
        for n in (host, peer):
            subprocess.run(["ip", "netns", "del", n], capture_output=True)


def _pddbench(h: dict, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PDDBENCH_NETEM_STATE": str(h["state"])}
    return subprocess.run(["ip", "netns", "exec", h["host"], sys.executable, "-m", "pddbench", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def _probe_ms(h: dict, address: str) -> float:
    port = "9102" if address == OTHER else "9100"
    res = _ns(h["host"], sys.executable, "-m", "netem.tools", "probe", address, port, "40", "5", cwd=REPO, timeout=120)
    rtts = sorted(json.loads(res.stdout)["rtt_ms"])
    return rtts[len(rtts) // 2]


def test_host_mode_shapes_the_peer_prefix_only_and_down_removes_it(hosts, tmp_path):
    h = hosts
    profile = tmp_path / "wan.yaml"
    profile.write_text("delay_ms: 20\nrate_gbps: 0.2\n")
    before = _probe_ms(h, PEER)
    up = _pddbench(h, "netem", "up", str(profile), "--dev", "vh", "--peer", f"{PEER}/32")
    assert up.returncode == 0, up.stderr
    try:
        status = json.loads(_pddbench(h, "netem", "status", "--json").stdout)
        assert status["up"] and status["mode"] == "host" and status["delay_lines_alive"] == {"reverse": True}
        cal = _pddbench(h, "netem", "calibrate", "--peer-address", PEER, "--probes", "60", "--interval-ms", "5",
                        "--bulk-s", "2", "--json")
        assert cal.returncode == 0, cal.stderr
        res = json.loads(cal.stdout)
        # this host's share of the profile: the delay of what it receives, the rate of what it sends
        assert res["targets"]["rtt_ms"] == 20 and res["targets"]["throughput_mbps"] == pytest.approx(200)
        assert abs(res["rtt_ms"]["p50"] - 20) <= 3, res["rtt_ms"]
        assert 120 <= res["throughput_mbps"] <= 210, res["bulk"]
        # nothing else shaped: the peer host's other address, through the same interface
        assert _probe_ms(h, OTHER) < before + 3 < 15
    finally:
        down = _pddbench(h, "netem", "down")
    assert down.returncode == 0, down.stderr
    assert "pddbench-host" not in _ns(h["host"], "iptables", "-t", "mangle", "-S", "PREROUTING").stdout
    assert "htb" not in _ns(h["host"], "tc", "qdisc", "show", "dev", "vh").stdout
    assert _probe_ms(h, PEER) < before + 3
    assert not json.loads(_pddbench(h, "netem", "status", "--json").stdout)["up"]
    assert h["host"] in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout  # not ours


@pytest.mark.parametrize("args, says", [
    (["--dev", "nosuch0", "--peer", f"{PEER}/32"], "--dev nosuch0: no such interface"),
    (["--dev", "vh", "--peer", "10.88.0.300/32"], "not an IPv4 prefix"),
    (["--dev", "vh"], "needs both --dev IFACE and --peer PREFIX"),
    (["--dev", "vh", "--peer", f"{PEER}/32", "--backend", "kernel-netem"], "host mode uses the delay line"),
    (["--dev", "vh", "--peer", f"{PEER}/32", "FOREIGN-QDISC"], "already has a root qdisc 'tbf'"),
])
def test_host_mode_refuses_what_it_cannot_do_and_leaves_nothing(hosts, args, says):
    h = hosts
    foreign = "FOREIGN-QDISC" in args
    if foreign:  # a qdisc someone else put there is never replaced
        _ns(h["host"], "tc", "qdisc", "add", "dev", "vh", "root", "tbf", "rate", "1gbit", "burst", "128k",
            "latency", "50ms", check=True)
    res = _pddbench(h, "netem", "up", "fixed-30ms", *[a for a in args if a != "FOREIGN-QDISC"])
    assert res.returncode == 2 and says in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert "pddbench-host" not in _ns(h["host"], "iptables", "-t", "mangle", "-S", "PREROUTING").stdout
    assert ("tbf" in _ns(h["host"], "tc", "qdisc", "show", "dev", "vh").stdout) == foreign
    assert not (h["state"] / "state.json").exists()


def test_a_failed_host_mode_start_leaves_other_emulations_alone(hosts):
    """A refused `netem up --dev` cleans up only what it added: a namespace of pddbench's own
    topology (another emulated WAN, e.g. a live run's) stays."""
    other = f"pddb-hm-guard-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", other], check=True)
    try:
        res = _pddbench(hosts, "netem", "up", "fixed-30ms", "--dev", "nosuch0", "--peer", f"{PEER}/32")
        assert res.returncode == 2
        assert other in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    finally:
        subprocess.run(["ip", "netns", "del", other], capture_output=True)
