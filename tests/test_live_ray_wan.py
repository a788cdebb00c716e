"""The WAN emulated on every Ray node for a run (issue 28.4, `live.ray_wan`): two namespaces acting as
hosts (a plain veth between them, not pddbench's topology), a Ray node in each (dc_a, dc_b), and a
live PDD run whose engines Ray places there. While the run serves, a TCP handshake between the hosts
takes the profile's round trip (its delay applied on both nodes); the summary says what each node
applied; afterwards neither host keeps a qdisc, rule or delay line of ours."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pddbench.live.engines import vllm_available
from pddbench.live.net import free_port
from tests.conftest import REPO, ray_test_env

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
    pytest.mark.skipif(shutil.which("iptables") is None or shutil.which("tc") is None, reason="needs iptables and tc"),
    pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed (`make test` installs it)"),
]
A_IP, B_IP = "10.88.1.1", "10.88.1.2"
DELAY_MS = 25  # live-narrow-wan, each way


def _ns(name: str, *cmd: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", name, *cmd], capture_output=True, text=True, **kw)


def _ray_processes() -> list[str]:
    out = subprocess.run(["pgrep", "-af", "raylet|gcs_server|ray::"], capture_output=True, text=True)
    return [line for line in out.stdout.splitlines() if line.strip()]


@pytest.fixture
def hosts():
    pytest.importorskip("ray", reason="ray is not installed (pip install 'pddbench[cluster]')")
    if _ray_processes():
        pytest.skip("another Ray runtime runs on this machine")
    ray_bin = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    env = ray_test_env()
    a, b = f"rwa-{os.getpid()}", f"rwb-{os.getpid()}"
    gcs = free_port()
    for n in (a, b):
        subprocess.run(["ip", "netns", "add", n], check=True)
    try:
        subprocess.run(["ip", "link", "add", "va", "netns", a, "type", "veth", "peer", "name", "vb", "netns", b],
                       check=True)
        for n, dev, ip in ((a, "va", A_IP), (b, "vb", B_IP)):
            _ns(n, "ip", "addr", "add", f"{ip}/24", "dev", dev, check=True)
            _ns(n, "ip", "link", "set", dev, "up", check=True)
            _ns(n, "ip", "link", "set", "lo", "up", check=True)
        for n, ip, dc, extra in ((a, A_IP, "a", ["--head", f"--port={gcs}", "--include-dashboard=false"]),
                                 (b, B_IP, "b", [f"--address={A_IP}:{gcs}"])):
            subprocess.run(["ip", "netns", "exec", n, ray_bin, "start", *extra, f"--node-ip-address={ip}",
                            "--num-cpus=2", f"--resources={{\"dc_{dc}\": 8}}", "--disable-usage-stats"],
                           check=True, env=env, capture_output=True, timeout=180)
        yield {"a": a, "b": b, "address": f"{A_IP}:{gcs}", "env": env}
    finally:
        for n in (b, a):
            subprocess.run(["ip", "netns", "exec", n, ray_bin, "stop", "--force"], env=env, capture_output=True,
                           timeout=120)
            subprocess.run(["ip", "netns", "del", n], capture_output=True)
        current = Path("/tmp/ray/ray_current_cluster")
        if current.is_file() and current.read_text().strip().endswith(f":{gcs}"):
            current.unlink()


def _handshake_ms(ns: str, ip: str, port: int) -> float:
    code = ("import socket, time, statistics\nts = []\nfor _ in range(5):\n"
            f"    s = socket.socket(); t = time.perf_counter(); s.connect(('{ip}', {port})); "
            "ts.append((time.perf_counter() - t) * 1000); s.close()\nprint(statistics.median(ts))")
    return float(_ns(ns, sys.executable, "-c", code, check=True, timeout=60).stdout)


def test_the_wan_profile_is_applied_on_every_node_for_the_run(hosts, tmp_path):
    wan = json.dumps({"a": {"dev": "va", "peer": f"{B_IP}/32"}, "b": {"dev": "vb", "peer": f"{A_IP}/32"}})
    cmd = ["ip", "netns", "exec", hosts["a"], sys.executable, "-m", "pddbench", "run", "live/pdd",
           "--set", f"live.ray_address={hosts['address']}", "--set", f"live.ray_wan={wan}",
           "--set", "workload.synth.requests=20", "--set", "live.load=null", "--set", "live.rate_rps=1",
           "--set", "live.calibrate_engine=false", "--out", str(tmp_path / "run")]
    proc = subprocess.Popen(cmd, cwd=REPO, env=hosts["env"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        for _ in range(900):
            if (tmp_path / "run" / "logs" / "router.log").exists() or proc.poll() is not None:
                break
            time.sleep(0.5)
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        shaped = _handshake_ms(hosts["a"], B_IP, 8303)  # MD's server on B (live.port_base + 3)
        rc = proc.wait(timeout=900)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=300)
    assert rc == 0, proc.stderr.read()[-3000:]
    assert shaped >= 1.6 * DELAY_MS, shaped  # SYN delayed on B's ingress, SYN-ACK on A's
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert s["requests_completed"] == 20
    applied = {w["datacenter"]: w for w in s["ray_wan"]}
    assert applied["a"]["node"] == A_IP and applied["a"]["sends"] == "forward" and applied["a"]["dev"] == "va"
    assert applied["b"]["node"] == B_IP and applied["b"]["sends"] == "reverse" and applied["b"]["dev"] == "vb"
    # nothing of ours left on either host: qdisc, mangle rule, delay line
    for ns, dev in ((hosts["a"], "va"), (hosts["b"], "vb")):
        assert "htb" not in _ns(ns, "tc", "qdisc", "show", "dev", dev).stdout
        assert "pddbench" not in _ns(ns, "iptables", "-t", "mangle", "-S").stdout
    assert not subprocess.run(["pgrep", "-f", "netem.delayline .*pddbench-netem-ray-"], capture_output=True).stdout
    import tempfile

    assert not list(Path(tempfile.gettempdir()).glob("pddbench-netem-ray-*"))  # state folders and profiles
    # and the round trip is the bare veth's again
    listen = ("import socket, time; s = socket.socket(); s.bind(('0.0.0.0', 9101)); s.listen(64); "
              "print('ready', flush=True); time.sleep(600)")  # handshakes complete in the kernel's backlog
    srv = subprocess.Popen(["ip", "netns", "exec", hosts["b"], sys.executable, "-c", listen], stdout=subprocess.PIPE,
                           text=True)
    try:
        assert srv.stdout.readline().strip() == "ready"
        assert _handshake_ms(hosts["a"], B_IP, 9101) < DELAY_MS / 2
    finally:
        srv.kill()
        srv.wait()
