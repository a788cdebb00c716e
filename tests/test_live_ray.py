"""Engines placed across hosts by Ray (issue 28.3), on a real two-node Ray cluster: the head's raylet
inside datacenter A's namespace and a worker's inside B's, the emulated WAN between them (`netem
up`), so the engines Ray places talk across it as the fixed layout's do. The same live PDD run
passes through it with the same records; an unplaced datacenter is refused before anything starts;
no engine, actor or Ray process is left."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from netem.topology import DC_A, DC_B
from pddbench.live.engines import ENGINE_MARK, vllm_available
from pddbench.live.net import free_port
from tests.conftest import REPO, ray_test_env, run_cli

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
    pytest.mark.skipif(shutil.which("iptables") is None, reason="needs iptables for the emulated WAN"),
    pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed (`make test` installs it)"),
]


def _engine_processes() -> list[int]:
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if f"{ENGINE_MARK}=".encode() in env:
            out.append(int(pid))
    return out


def _ray_processes() -> list[str]:
    out = subprocess.run(["pgrep", "-af", "raylet|gcs_server|ray::EngineActor"], capture_output=True, text=True)
    return [line for line in out.stdout.splitlines() if line.strip()]


def _assert_torn_down(after: str) -> None:
    """No engine process and no EngineActor left (within a minute: Ray reaps killed actors late)."""
    for _ in range(60):
        if not _engine_processes() and not any("EngineActor" in p for p in _ray_processes()):
            break
        time.sleep(1)
    assert not _engine_processes(), f"an engine outlived {after}"
    assert not any("EngineActor" in p for p in _ray_processes()), f"an actor outlived {after}"


@pytest.fixture(scope="module")
def cluster():
    """Namespaces and WAN (`pddbench netem up`), a Ray head in dc-a (resource dc_a) and a worker in
    dc-b (dc_b); everything removed afterwards."""
    pytest.importorskip("ray", reason="ray is not installed (pip install 'pddbench[cluster]')")
    if _ray_processes():
        pytest.skip("another Ray runtime runs on this machine")
    ray_bin = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    env = ray_test_env()
    gcs = free_port()
    up = run_cli("netem", "up", "live-narrow-wan", timeout=120)
    assert up.returncode == 0, up.stderr[-2000:]
    try:
        for ns, ip, extra in ((DC_A.netns, DC_A.address, ["--head", f"--port={gcs}"]),
                              (DC_B.netns, DC_B.address, [f"--address={DC_A.address}:{gcs}"])):
            dc = ns.rsplit("-", 1)[1]
            subprocess.run(["ip", "netns", "exec", ns, ray_bin, "start", *extra, f"--node-ip-address={ip}",
                            "--num-cpus=2", f"--resources={{\"dc_{dc}\": 8}}", "--disable-usage-stats",
                            *(["--include-dashboard=false"] if "--head" in extra else [])],
                           check=True, env=env, capture_output=True, timeout=180)
        yield {"address": f"{DC_A.address}:{gcs}", "env": env}
    finally:
        for ns in (DC_B.netns, DC_A.netns):
            subprocess.run(["ip", "netns", "exec", ns, ray_bin, "stop", "--force"], env=env, capture_output=True,
                           timeout=120)
        run_cli("netem", "down", timeout=120)
        current = Path("/tmp/ray/ray_current_cluster")  # `ray stop` in a namespace may leave it naming our head
        if current.is_file() and current.read_text().strip().endswith(f":{gcs}"):
            current.unlink()


def _run_in_dc_a(cluster, tmp_path, *sets: str) -> subprocess.CompletedProcess:
    """`pddbench run live/pdd` from a host in datacenter A (the dc-a namespace), as a user would."""
    cmd = ["ip", "netns", "exec", DC_A.netns, sys.executable, "-m", "pddbench", "run", "live/pdd",
           "--set", f"live.ray_address={cluster['address']}", "--set", "workload.synth.requests=8",
           "--set", "live.load=null", "--set", "live.rate_rps=1", "--set", "live.calibrate_engine=false",
           *sets, "--out", str(tmp_path / "run")]
    return subprocess.run(cmd, cwd=REPO, env=cluster["env"], capture_output=True, text=True, timeout=1200)


def test_pdd_on_engines_ray_placed_by_datacenter(cluster, tmp_path):
    res = _run_in_dc_a(cluster, tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert s["requests_completed"] == 8 and s["requests_failed"] == 0
    hosts = {e["name"]: e["host"] for e in s["engines"]}
    assert hosts == {"P": DC_A.address, "RLD": DC_A.address, "MD": DC_B.address}  # each on its datacenter's node
    assert all(e["netns"] is None for e in s["engines"])  # the node is the datacenter: no namespace of the run's
    assert s["engine_metrics"]["external_kv_transfer_tokens"] > 0  # KV reached RLD / MD through NIXL
    records = pd.read_parquet(tmp_path / "run" / "records.parquet")
    assert len(records) == 8 and set(records["pipeline"]) <= {"pdd", "p_rld", "p_md", "p_rld_md"}
    assert (records["ttft_ms"] > 0).all()
    _assert_torn_down("the run")  # the cluster itself stays: it is the user's


def test_a_datacenter_without_nodes_is_refused_in_one_line():
    from pddbench.core.errors import UserError
    from pddbench.live.ray_engines import check_datacenters

    class OnlyA:  # a cluster whose nodes all carry dc_a (the check reads only its resources)
        @staticmethod
        def cluster_resources():
            return {"CPU": 4.0, "dc_a": 8.0}
    check_datacenters(OnlyA, "same_dc_pd", "x")  # P and D both in a
    with pytest.raises(UserError, match="no node of the Ray cluster has the resource dc_b, where a pdd deployment puts MD"):
        check_datacenters(OnlyA, "pdd", "x")


def test_an_unreachable_cluster_is_refused_before_anything(tmp_path):
    gone = run_cli("run", "live/pdd", "--set", "live.ray_address=127.0.0.1:9", "--out", tmp_path / "none")
    assert gone.returncode == 2 and "Traceback" not in gone.stderr and not (tmp_path / "none").exists(), gone.stderr
    assert "127.0.0.1:9" in gone.stderr


def test_ctrl_c_tears_down_every_engine_and_actor(cluster, tmp_path):
    """Ctrl-C once the Ray-placed engines serve (the router has started): exit 130, and no engine
    process or EngineActor is left on either node."""
    import signal

    cmd = ["ip", "netns", "exec", DC_A.netns, sys.executable, "-m", "pddbench", "run", "live/pdd",
           "--set", f"live.ray_address={cluster['address']}", "--set", "workload.synth.requests=200",
           "--set", "live.load=null", "--set", "live.rate_rps=1", "--set", "live.calibrate_engine=false",
           "--out", str(tmp_path / "run")]
    proc = subprocess.Popen(cmd, cwd=REPO, env=cluster["env"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    router_log = tmp_path / "run" / "logs" / "router.log"
    for _ in range(600):
        if router_log.exists() or proc.poll() is not None:
            break
        time.sleep(0.5)
    assert proc.poll() is None, proc.stderr.read()[-3000:]
    assert _engine_processes(), "the engines should be running by now"
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    rc = proc.wait(timeout=300)
    assert rc == 130, proc.stderr.read()[-3000:]
    _assert_torn_down("Ctrl-C")
