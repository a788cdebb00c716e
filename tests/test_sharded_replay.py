"""`pddbench replay --workers N`: sessions split whole over worker processes on one schedule, one
run folder; against the real fixed-latency endpoint (a process on a loopback socket)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import psutil
import pytest

from pddbench.live.client import LiveRequest
from pddbench.live.net import free_port, wait_port
from pddbench.live.shards import assign_sessions, session_key
from pddbench.metrics.records import read_records
from pddbench.workload.synth import SynthConfig, synthesize
from tests.conftest import REPO, run_cli


def _requests(trace) -> list[LiveRequest]:
    return [LiveRequest(i, i * 0.01, [1], 1, [], -1 if r.session_id is None else r.session_id,
                        -1 if r.turn is None else r.turn) for i, r in enumerate(trace)]


@pytest.mark.parametrize("workers", [1, 2, 3, 7])
def test_sessions_stay_whole_balanced_and_the_same_each_time(workers):
    reqs = _requests(synthesize(SynthConfig(requests=600, seed=5)))
    owner = assign_sessions(reqs, workers)
    assert owner == assign_sessions(reqs, workers)  # the same trace: the same split
    by_session: dict = {}
    for r, w in zip(reqs, owner):
        by_session.setdefault(session_key(r), set()).add(w)
    assert all(len(ws) == 1 for ws in by_session.values())  # every turn of a session on one worker
    assert any(r.session_id < 0 for r in reqs) and any(r.session_id >= 0 for r in reqs)
    loads = [owner.count(w) for w in range(workers)]
    largest = max(sum(1 for r in reqs if session_key(r) == k) for k in by_session)
    assert max(loads) - min(loads) <= largest  # greedy balance: within one session of each other


def _trace(path, n: int, gap_ms: int, sessions: int) -> None:
    """n requests gap_ms apart; request i in session i % sessions (every 5th has none)."""
    lines = []
    for i in range(n):
        row = {"timestamp": i * gap_ms, "input_length": 100, "output_length": 4, "hash_ids": [1 + i]}
        if i % 5:
            row.update(session_id=i % sessions, turn=i // sessions)
        lines.append(json.dumps(row) + "\n")
    path.write_text("".join(lines))


@pytest.fixture
def server():
    port = free_port()
    srv = subprocess.Popen([sys.executable, "-m", "pddbench.live.fixed_server", "--port", str(port),
                            "--ttft-ms", "5", "--itl-ms", "1", "--log-requests"], stdout=subprocess.PIPE, text=True)
    try:
        wait_port("127.0.0.1", port, timeout_s=20)
        yield srv, f"http://127.0.0.1:{port}"
    finally:
        srv.terminate()
        srv.wait()


def test_workers_give_one_run_folder_like_a_single_process(tmp_path, server):
    _, url = server
    trace = tmp_path / "t.jsonl"
    _trace(trace, 60, 20, 7)
    folders = {}
    for workers in (1, 3):
        out = folders[workers] = tmp_path / f"w{workers}"
        res = run_cli("replay", "--endpoint", url, "--trace", trace, "--model", "fixed", "--workers", str(workers),
                      "--out", out)
        assert res.returncode == 0, res.stderr
        assert sorted(p.name for p in out.iterdir()) == ["records.parquet", "summary.json"]  # no shard left
    one, three = (read_records(folders[w] / "records.parquet") for w in (1, 3))
    assert list(one.columns) == list(three.columns) and (one.dtypes == three.dtypes).all()
    assert three["request_id"].tolist() == list(range(60)) and not three["failed"].any()
    summary = json.loads((folders[3] / "summary.json").read_text())
    accounts = summary["replay_workers"]
    assert [a["worker"] for a in accounts] == [0, 1, 2] and all(a["state"] == "done" for a in accounts)
    assert sum(a["requests"] for a in accounts) == 60
    assert sum(a["sessions"] for a in accounts) == 7 + 12  # 7 sessions and 12 requests without one
    assert all(a["clock_rtt_ms"] is not None and a["clock_rtt_ms"] >= 0 for a in accounts)
    single = json.loads((folders[1] / "summary.json").read_text())
    assert set(single) == set(summary) and len(single["replay_workers"]) == 1
    # a session's turns leave in the trace's order, on the one schedule all workers share
    sessions = three[three["session_id"] >= 0].sort_values(["session_id", "turn"])
    assert (sessions.groupby("session_id")["arrival_ms"].diff().dropna() > 0).all()
    assert (three["arrival_ms"] - three["schedule_lag_ms"]).round(6).tolist() == [i * 20.0 for i in range(60)]


def _replay(url, trace, out, *extra) -> subprocess.Popen:
    # a shell's background job starts with SIGINT ignored, which Python would keep: restore it
    return subprocess.Popen([sys.executable, "-m", "pddbench", "replay", "--endpoint", url, "--trace", str(trace),
                             "--model", "fixed", "--out", str(out), *extra], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _workers_of(proc: subprocess.Popen) -> list[psutil.Process]:
    return [c for c in psutil.Process(proc.pid).children() if "spawn_main" in " ".join(c.cmdline())]


def _served(srv, n: int) -> None:
    for _ in range(n):
        assert srv.stdout.readline().strip() == "served"


def _press_ctrl_c(proc: subprocess.Popen, presses: int) -> None:
    """One Ctrl-C, or a user's impatient burst: the later ones land while the workers stop and
    write, inside the parent's reads of their messages."""
    for _ in range(presses):
        proc.send_signal(signal.SIGINT)  # to the parent only, as `kill -INT` does; a terminal reaches all
        time.sleep(0.02)


@pytest.mark.parametrize("presses", [1, 6])
def test_ctrl_c_stops_every_worker_and_keeps_what_they_measured(tmp_path, server, presses):
    srv, url = server
    trace, out = tmp_path / "t.jsonl", tmp_path / "r"
    _trace(trace, 200, 100, 9)
    rep = _replay(url, trace, out, "--workers", "3")
    _served(srv, 8)
    workers = _workers_of(rep)
    assert len(workers) == 3
    _press_ctrl_c(rep, presses)
    _, err = rep.communicate(timeout=120)
    assert rep.returncode == 130 and "Traceback" not in err, err[-2000:]
    assert err.strip().splitlines()[-1].startswith("interrupted; kept")
    assert not any(w.is_running() and w.status() != psutil.STATUS_ZOMBIE for w in workers)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True
    assert all(a["state"] == "done" and a["interrupted"] for a in summary["replay_workers"])
    rec = read_records(out / "records.parquet")
    assert 6 <= len(rec) < 200 and (~rec["failed"]).sum() >= 6
    assert not (out / ".shards").exists() and not (out / ".claim").exists()


def test_a_worker_that_dies_is_reported_and_the_others_are_kept(tmp_path, server):
    srv, url = server
    trace, out = tmp_path / "t.jsonl", tmp_path / "r"
    _trace(trace, 60, 50, 9)
    rep = _replay(url, trace, out, "--workers", "3")
    _served(srv, 4)
    victim = _workers_of(rep)[0]
    victim.kill()
    _, err = rep.communicate(timeout=120)
    assert rep.returncode == 0 and "Traceback" not in err, err[-2000:]
    assert "replay workers lost" in err
    summary = json.loads((out / "summary.json").read_text())
    lost = [a for a in summary["replay_workers"] if a["state"] == "lost"]
    assert len(lost) == 1 and "-9" in lost[0]["lost_because"], summary["replay_workers"]
    rec = read_records(out / "records.parquet")
    assert len(rec) == 60
    assert (rec["failure_reason"] == "worker_lost").sum() == lost[0]["requests"]
    assert (~rec["failed"]).sum() == 60 - lost[0]["requests"]


def test_workers_end_when_the_replay_is_killed(tmp_path, server):
    """SIGKILL leaves the parent no chance to stop its workers: they must go by themselves (a
    live run's client dies this way when the run is killed), not go on sending."""
    srv, url = server
    trace, out = tmp_path / "t.jsonl", tmp_path / "r"
    _trace(trace, 3000, 100, 9)  # 5 minutes of sending left to do
    rep = _replay(url, trace, out, "--workers", "2")
    _served(srv, 4)
    workers = _workers_of(rep)
    assert len(workers) == 2
    rep.kill()
    rep.communicate(timeout=60)
    gone, alive = psutil.wait_procs(workers, timeout=30)
    for w in alive:
        w.kill()
    assert not alive, [w.cmdline() for w in alive]


@pytest.mark.parametrize("args, says", [(["--workers", "65"], "--workers 65"),
                                        (["--workers", "3", "--concurrency", "2"], "shared among --workers 3"),
                                        (["--workers", "0"], "--workers")])
def test_worker_counts_are_checked_before_anything_starts(tmp_path, args, says):
    trace = tmp_path / "t.jsonl"
    _trace(trace, 5, 10, 2)
    res = run_cli("replay", "--endpoint", "http://127.0.0.1:9", "--trace", trace, *args, "--out", tmp_path / "r")
    assert res.returncode == 2 and says in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert not (tmp_path / "r").exists()


# --- the same on Ray: actors on a local Ray runtime (a cluster's nodes in production) ---

def _ray_processes() -> list[str]:
    out = subprocess.run(["pgrep", "-af", "raylet|gcs_server|ray::ReplayActor"], capture_output=True, text=True)
    return [line for line in out.stdout.splitlines() if line.strip()]


@pytest.fixture
def ray_free(monkeypatch):
    pytest.importorskip("ray", reason="ray is not installed (pip install 'pddbench[cluster]')")
    if _ray_processes():
        pytest.skip("another Ray runtime runs on this machine")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    yield
    assert not _ray_processes(), "a Ray process outlived the replay"


def test_ray_actors_give_the_records_of_process_workers(tmp_path, server, ray_free):
    """--workers 3 --ray: the same sessions per worker, schema, order and schedule as --workers 3
    on this host; every worker's clock offset measured; no Ray process left."""
    _, url = server
    trace = tmp_path / "t.jsonl"
    _trace(trace, 60, 20, 7)
    for where in ("local", "ray"):
        res = run_cli("replay", "--endpoint", url, "--trace", trace, "--model", "fixed", "--workers", "3",
                      *(["--ray"] if where == "ray" else []), "--out", tmp_path / where, timeout=600)
        assert res.returncode == 0, res.stderr[-2000:]
    local, ray = (read_records(tmp_path / w / "records.parquet") for w in ("local", "ray"))
    assert list(local.columns) == list(ray.columns) and (local.dtypes == ray.dtypes).all()
    assert ray["request_id"].tolist() == list(range(60)) and not ray["failed"].any()
    assert (ray["arrival_ms"] - ray["schedule_lag_ms"]).round(6).tolist() == [i * 20.0 for i in range(60)]
    accounts = {w: json.loads((tmp_path / w / "summary.json").read_text())["replay_workers"] for w in ("local", "ray")}
    keep = ("worker", "requests", "sessions", "state")
    assert [{k: a[k] for k in keep} for a in accounts["ray"]] == [{k: a[k] for k in keep} for a in accounts["local"]]
    assert all(a["node"] and a["clock_rtt_ms"] > 0 for a in accounts["ray"])


def test_a_ray_actor_that_dies_is_reported_and_the_others_are_kept(tmp_path, server, ray_free):
    srv, url = server
    trace, out = tmp_path / "t.jsonl", tmp_path / "r"
    _trace(trace, 60, 50, 9)
    rep = _replay(url, trace, out, "--workers", "3", "--ray")
    _served(srv, 4)
    actors = [p for p in psutil.process_iter(["cmdline"]) if "ray::ReplayActor" in " ".join(p.info["cmdline"] or [])]
    assert len(actors) == 3
    actors[0].kill()
    _, err = rep.communicate(timeout=300)
    assert rep.returncode == 0 and "Traceback" not in err, err[-2000:]
    assert "replay workers lost" in err
    summary = json.loads((out / "summary.json").read_text())
    lost = [a for a in summary["replay_workers"] if a["state"] == "lost"]
    assert len(lost) == 1 and lost[0]["lost_because"], summary["replay_workers"]
    rec = read_records(out / "records.parquet")
    assert len(rec) == 60 and (rec["failure_reason"] == "worker_lost").sum() == lost[0]["requests"]
    assert (~rec["failed"]).sum() >= 60 - lost[0]["requests"] - 2  # the victim's few sent before it died aside


@pytest.mark.parametrize("presses", [1, 6])
def test_ctrl_c_stops_every_ray_actor_and_keeps_what_they_measured(tmp_path, server, ray_free, presses):
    srv, url = server
    trace, out = tmp_path / "t.jsonl", tmp_path / "r"
    _trace(trace, 200, 100, 9)
    rep = _replay(url, trace, out, "--workers", "2", "--ray")
    _served(srv, 8)
    _press_ctrl_c(rep, presses)
    _, err = rep.communicate(timeout=300)
    assert rep.returncode == 130 and "Traceback" not in err, err[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True
    assert all(a["state"] == "done" and a["interrupted"] for a in summary["replay_workers"])
    rec = read_records(out / "records.parquet")
    assert 8 <= len(rec) < 200 and (~rec["failed"]).sum() >= 8
    assert not (out / ".claim").exists()


def test_an_unreachable_ray_cluster_is_refused_before_anything(tmp_path, monkeypatch):
    trace = tmp_path / "t.jsonl"
    _trace(trace, 5, 10, 2)
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{free_port()}")
    res = run_cli("replay", "--endpoint", "http://127.0.0.1:9", "--trace", trace, "--workers", "2", "--ray",
                  "--out", tmp_path / "r")
    assert res.returncode == 2 and "no Ray head answers" in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not (tmp_path / "r").exists()


def _pool_of_one(tmp_path, state: str):
    """A parent's pool holding one worker (a real, already finished process) in `state`."""
    import multiprocessing as mp

    from pddbench.live.shards import _Pool

    proc = mp.get_context("spawn").Process(target=int)
    proc.start()
    proc.join()
    here, there = mp.Pipe()
    pool = _Pool()
    pool.add(0, proc, here, _requests(synthesize(SynthConfig(requests=12, seed=1))))
    pool.workers[0]["state"] = state
    return pool, there


def test_a_whole_shard_is_kept_even_when_its_done_message_was_lost(tmp_path):
    """A worker killed (or a parent interrupted) between the shard's atomic write and the 'done'
    message: the records on disk are what it measured, not worker_lost."""
    from pddbench.live.client import Outcome, outcome_record
    from pddbench.live.shards import _merge
    from pddbench.metrics.records import to_frame, write_records

    pool, _there = _pool_of_one(tmp_path, "lost")
    reqs = pool.workers[0]["reqs"]
    shards = tmp_path / "shards"
    write_records(shards / "worker-0.parquet",
                  to_frame([outcome_record(Outcome(r, send_s=r.intended_s, failure="http_500"), "colocated")
                            for r in reqs[:5]]))
    merged = _merge(pool, shards, "colocated", interrupted=True)
    assert merged["failure_reason"].tolist() == ["http_500"] * 5
    assert pool.accounts()[0]["state"] == "done" and pool.accounts()[0]["interrupted"]
    assert not shards.exists()
    pool2, _ = _pool_of_one(tmp_path, "lost")  # no shard at all: every request is worker_lost
    merged = _merge(pool2, tmp_path / "none", "colocated", interrupted=False)
    assert (merged["failure_reason"] == "worker_lost").sum() == 12


def test_a_worker_gone_after_its_clock_sync_is_lost_not_a_traceback(tmp_path, monkeypatch):
    from pddbench.live import shards

    pool, there = _pool_of_one(tmp_path, "ready")
    monkeypatch.setattr(shards, "_clock_offset", lambda conn: (0.1, 0.0))  # synced; then its pipe closes
    there.close()
    pool.start_together()
    account = pool.accounts()[0]
    assert account["state"] == "lost" and "before its start" in account["lost_because"]


def test_datacenter_places_the_actors_on_that_datacenters_nodes(tmp_path, ray_free):
    """--ray --datacenter a: the actors go only to nodes carrying the resource dc_a, here a real
    `ray start` head (inside a loopback-only namespace, with the endpoint beside it); a datacenter
    no node is in is refused in one line, and --datacenter without --ray too."""
    import os
    import shutil
    from pathlib import Path

    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 for a loopback-only namespace")
    ray_bin = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    trace = tmp_path / "t.jsonl"
    _trace(trace, 30, 20, 5)
    alone = run_cli("replay", "--endpoint", "http://127.0.0.1:9", "--trace", trace, "--datacenter", "a",
                    "--out", tmp_path / "no-ray")
    assert alone.returncode == 2 and "give --ray too" in alone.stderr and not (tmp_path / "no-ray").exists()
    ns = f"pddb-dc-{os.getpid()}"
    inside = ["ip", "netns", "exec", ns]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    gcs, http = free_port(), free_port()
    subprocess.run(["ip", "netns", "add", ns], check=True)
    srv = None
    try:
        subprocess.run([*inside, "ip", "link", "set", "lo", "up"], check=True)
        subprocess.run([*inside, ray_bin, "start", "--head", f"--port={gcs}", "--node-ip-address=127.0.0.1",
                        "--num-cpus=2", "--resources={\"dc_a\": 4}", "--include-dashboard=false",
                        "--disable-usage-stats"], check=True, env=env, capture_output=True, timeout=180)
        srv = subprocess.Popen([*inside, sys.executable, "-m", "pddbench.live.fixed_server", "--port", str(http),
                                "--ttft-ms", "5", "--itl-ms", "1"], cwd=REPO, stdout=subprocess.DEVNULL)
        cluster = {**env, "RAY_ADDRESS": f"127.0.0.1:{gcs}"}

        def replay(dc: str, out: Path) -> subprocess.CompletedProcess:
            return subprocess.run([*inside, sys.executable, "-m", "pddbench", "replay", "--endpoint",
                                   f"http://127.0.0.1:{http}", "--trace", str(trace), "--model", "fixed", "--workers",
                                   "2", "--ray", "--datacenter", dc, "--out", str(out)], cwd=REPO, env=cluster,
                                  capture_output=True, text=True, timeout=600)
        subprocess.run([*inside, sys.executable, "-c", "from pddbench.live.net import wait_port; "
                        f"wait_port('127.0.0.1', {http}, timeout_s=30)"], cwd=REPO, check=True, timeout=60)
        placed = replay("a", tmp_path / "a")
        assert placed.returncode == 0, placed.stderr[-3000:]
        summary = json.loads((tmp_path / "a" / "summary.json").read_text())
        assert [w["state"] for w in summary["replay_workers"]] == ["done", "done"]
        assert summary["requests_completed"] == 30
        nowhere = replay("b", tmp_path / "b")
        assert nowhere.returncode == 2 and "Traceback" not in nowhere.stderr
        assert "--datacenter b: no node of the Ray cluster has the resource dc_b" in nowhere.stderr
        assert not (tmp_path / "b").exists()
    finally:
        if srv is not None:
            srv.terminate()
            srv.wait()
        subprocess.run([*inside, ray_bin, "stop", "--force"], env=env, capture_output=True, timeout=120)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        current = Path("/tmp/ray/ray_current_cluster")  # `ray stop` in a namespace may leave it naming our head
        if current.is_file() and current.read_text().strip().endswith(f":{gcs}"):
            current.unlink()
    for _ in range(20):
        if not _ray_processes():
            break
        time.sleep(0.5)
