"""`pddbench sweep`: sweep-file errors, results independent of the executor (-j 1, -j 2, a real
Ray head), resume, failed points, Ctrl-C, and the k-section capacity search."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from pddbench.core.errors import InputError, Interrupted
from pddbench.sweep.spec import load_sweep
from tests.conftest import REPO, run_cli

SMALL = """\
base: paper/pdd
measure: {measure}
capacity: {{iterations: 3}}
set: [workload.synth.requests=150]
axes:
  network.wan: [cross-city-10g, cross-city-100g]
  sla.tpot_ms: [80, 100]
"""


def _sweep(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _run(path: Path, out: Path, jobs: int, **kw) -> Path:
    from pddbench.sweep.run import run_sweep

    return run_sweep(path, out=out, jobs=jobs, **kw)


# -- errors ----------------------------------------------------------------------------------

@pytest.mark.parametrize("body, line, field, words", [
    ("base: paper/pdd\naxes:\n  sla.tpot_ms: 80\n", 3, "axes.sla.tpot_ms", "list of values"),
    ("base: paper/pdd\naxes:\n  sla.tpot_ms: {range: [80, 100, 0]}\n", 3, "axes.sla.tpot_ms.range", "step"),
    ("base: paper/pdd\nmesure: run\n", 2, "mesure", "not permitted"),
    ("base: paper/pdd\nrepeats: 0\n", 2, "repeats", "greater than or equal to 1"),
    ("base: paper/pdd\naxes:\n  zip:\n    sla.tpot_ms: [80, 100]\n    sla.ttft_ms: [1000]\n", 5,
     "axes.zip.sla.ttft_ms", "equal lengths"),
    ("base: paper/pdd\naxes:\n  sla.tpot_ms: [80, -1]\n", 3, "axes.sla.tpot_ms", "valid range: 0.001 <= tpot_ms"),
    ("base: paper/pdd\naxes:\n  slaa.tpot_ms: [80]\n", 3, "axes.slaa.tpot_ms", "not permitted"),
    ("base: paper/pdd\naxes:\n  network.wan: [cross-city-10g, no-such-line]\n", 3, "axes.network.wan", "no such link profile"),
    ("base: paper/pdd\naxes:\n  seed: [1, 2]\n", 3, "axes.seed", "repeats"),
    ("base: paper/no-such\n", 1, "base", "no such scenario"),
    ("base: paper/pdd\nset: [sla.tpot_ms=fast]\n", 2, "set.0", "number"),
])
def test_bad_sweep_file_names_file_line_field(tmp_path, body, line, field, words):
    path = _sweep(tmp_path, body)
    with pytest.raises(InputError) as exc:
        load_sweep(path)
    assert exc.value.path == str(path) and exc.value.line == line and exc.value.field == field, str(exc.value)
    assert words in str(exc.value)


def test_bad_sweep_cli_one_line_exit_2(tmp_path):
    path = _sweep(tmp_path, "base: paper/pdd\naxes:\n  sla.tpot_ms: [80, -1]\n")
    res = run_cli("sweep", path, "--out", tmp_path / "o")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and f"{path}:3" in res.stderr and "sla.tpot_ms" in res.stderr
    assert not (tmp_path / "o").exists()  # validated before any work


def test_axes_expand_range_linspace_zip(tmp_path):
    sw = load_sweep(_sweep(tmp_path, "base: paper/pdd\nrepeats: 2\naxes:\n  sla.tpot_ms: {range: [60, 100, 20]}\n"
                                     "  zip:\n    sla.ttft_ms: {linspace: [1000, 2000, 2]}\n    network.wan_lines: [1, 2]\n"))
    assert sw.axis_values == {"sla.tpot_ms": [60, 80, 100], "sla.ttft_ms": [1000, 2000], "network.wan_lines": [1, 2]}
    assert len(sw.points) == 3 * 2 * 2 and len({p.key for p in sw.points}) == 12
    p = sw.points[3]  # point 1 (tpot 60, second zip row), repeat 1
    assert (p.index, p.repeat, p.scenario.seed, p.scenario.workload.synth.seed) == (1, 1, 1, 1)
    assert (p.scenario.sla.tpot_ms, p.scenario.sla.ttft_ms, p.scenario.network.wan_lines) == (60, 2000, 2)


# -- results do not depend on the executor ----------------------------------------------------

@pytest.fixture(scope="module")
def local_capacity(tmp_path_factory):
    """The small capacity sweep run in this process (-j 1): the reference bytes."""
    tmp = tmp_path_factory.mktemp("local")
    path = _sweep(tmp, SMALL.format(measure="capacity"))
    return path, _run(path, tmp / "j1", 1)


def test_j1_j2_identical_points_parquet(local_capacity, tmp_path):
    path, j1 = local_capacity
    j2 = _run(path, tmp_path / "j2", 2)
    assert (j1 / "points.parquet").read_bytes() == (j2 / "points.parquet").read_bytes()
    df = pd.read_parquet(j1 / "points.parquet")
    assert list(df["point"]) == [0, 1, 2, 3] and (df["status"] == "ok").all()
    assert list(df.columns[:8]) == ["point", "repeat", "seed", "key", "network.wan", "sla.tpot_ms", "status", "error"]
    assert "ttft_ms.p90" in df and "capacity.throughput_within_sla_rps" in df and "sim_wall_s" not in df
    assert not any(c.startswith("provenance") for c in df.columns)
    assert (df["capacity.throughput_within_sla_rps"] > 0).all()
    assert json.loads((j2 / "sweep.json").read_text())["state"] == "complete"
    assert (j1 / "summary.md").is_file() and (j1 / "capacity.throughput_within_sla_rps-heatmap.png").is_file()
    assert json.loads((j2 / "timings.json").read_text())["executor"]["executor"] == "process-pool"


def test_resume_skips_finished_points(tmp_path, monkeypatch):
    import pddbench.sweep.executors as executors

    path = _sweep(tmp_path, SMALL.format(measure="run"))
    out = _run(path, tmp_path / "o", 1)
    before = (out / "points.parquet").read_bytes()
    files = sorted((out / "points").glob("*.json"))
    gone = files[1]
    gone.unlink()
    mtimes = {f: f.stat().st_mtime_ns for f in files if f != gone}
    calls = []
    real = executors.execute
    monkeypatch.setattr(executors, "execute", lambda *a: calls.append(1) or real(*a))
    _run(path, None, 1, resume=out)
    assert len(calls) == 1 and gone.is_file()
    assert all(f.stat().st_mtime_ns == m for f, m in mtimes.items())
    assert (out / "points.parquet").read_bytes() == before
    assert json.loads((out / "sweep.json").read_text())["points_kept_from_before"] == 3


def test_failed_point_recorded_rest_finish(tmp_path, monkeypatch):
    import pddbench.sweep.tasks as tasks

    real = tasks.KINDS["point"]

    def flaky(task, files):
        if task["scenario"]["sla"]["tpot_ms"] == 80 and task["scenario"]["network"]["wan"]["name"] == "cross-city-100g":
            raise RuntimeError("boom at this point")
        return real(task, files)
    monkeypatch.setitem(tasks.KINDS, "point", flaky)
    out = _run(_sweep(tmp_path, SMALL.format(measure="run")), tmp_path / "o", 1)
    df = pd.read_parquet(out / "points.parquet")
    assert list(df["status"]) == ["ok", "ok", "failed", "ok"]
    assert df.loc[2, "error"] == "RuntimeError: boom at this point" and pd.isna(df.loc[2, "ttft_ms.p90"])
    assert "boom at this point" in (out / "summary.md").read_text()


def test_ctrl_c_keeps_finished_points(tmp_path, monkeypatch):
    import pddbench.sweep.executors as executors

    real = executors.InlineExecutor.run

    def interrupted(self, payloads):
        for n, item in enumerate(real(self, payloads)):
            if n == 2:
                raise KeyboardInterrupt
            yield item
    monkeypatch.setattr(executors.InlineExecutor, "run", interrupted)
    path = _sweep(tmp_path, SMALL.format(measure="run"))
    with pytest.raises(Interrupted) as exc:
        _run(path, tmp_path / "o", 1)
    assert "kept 2 of 4 points" in str(exc.value) and "--resume" in str(exc.value)
    out = tmp_path / "o"
    assert json.loads((out / "sweep.json").read_text())["state"] == "interrupted"
    assert (out / "INTERRUPTED").is_file() and "INTERRUPTED" in (out / "summary.md").read_text()
    assert len(list((out / "points").glob("*.json"))) == 2
    monkeypatch.setattr(executors.InlineExecutor, "run", real)
    _run(path, None, 1, resume=out)
    assert not (out / "INTERRUPTED").exists() and len(pd.read_parquet(out / "points.parquet")) == 4


def test_error_after_claim_leaves_nothing_or_a_failed_resumable_folder(tmp_path, monkeypatch):
    """An error that is not a point's own (here: keeping a result fails): before any point was kept
    the new folder is removed (the same --out then works); after one, sweep.json says failed,
    the claim is released and --resume finishes it."""
    from pddbench.sweep.points import PointStore

    real, saves = PointStore.save, []

    def fail_on(n):
        def save(self, point, result):
            saves.append(1)
            if len(saves) == n:
                raise OSError(28, "No space left on device")
            return real(self, point, result)
        return save
    path = _sweep(tmp_path, SMALL.format(measure="run"))
    out = tmp_path / "o"
    monkeypatch.setattr(PointStore, "save", fail_on(1))
    with pytest.raises(OSError):
        _run(path, out, 1)
    assert not out.exists()
    saves.clear()
    monkeypatch.setattr(PointStore, "save", fail_on(3))
    with pytest.raises(OSError):
        _run(path, out, 1)
    meta = json.loads((out / "sweep.json").read_text())
    assert meta["state"] == "failed" and "No space left" in meta["error"] and not (out / ".claim").exists()
    monkeypatch.setattr(PointStore, "save", real)
    _run(path, None, 1, resume=out)
    assert json.loads((out / "sweep.json").read_text())["state"] == "complete"
    assert len(pd.read_parquet(out / "points.parquet")) == 4


# -- capacity: k-section ---------------------------------------------------------------------

def _threshold_prober(capacity_scale: float):
    """A monotone stand-in for the simulator: every rate up to `capacity_scale` holds."""
    def summary(scale: float) -> dict:
        ok = scale <= capacity_scale
        steady = {"holds": ok, "sla_failing": [] if ok else ["ttft"], "unstable_on": [],
                  "ttft_ok_fraction": 1.0 if ok else 0.5, "tpot_ok_fraction": 1.0, "warmup_fraction": 0.1,
                  "window": [0.0, 1.0]}
        return {"steady": steady, "offered_rps": scale * 10, "sla_holds": ok, "slo_attainment": 1.0,
                "ttft_ms": {"p90": 1.0}, "tpot_ms": {"p90": 1.0}, "goodput_rps": scale * 10,
                "cost_per_hour": 1.0, "requests_total": 20_000, "interrupted": False}
    return lambda scales: [summary(s) for s in scales]


@pytest.mark.parametrize("capacity_scale", [0.3, 1.0, 2.7, 4.6, 37.0])
def test_k_section_agrees_with_bisection_on_a_monotone_verdict(capacity_scale):
    from pddbench.measure.capacity import search_capacity
    from pddbench.schema.scenario import load_scenario

    sc = load_scenario("paper/same-dc-pd", ["workload.synth.requests=200"])
    bis = search_capacity(sc, 6, probe_many=_threshold_prober(capacity_scale))
    assert bis["rate_scale"] <= capacity_scale < bis["rate_scale"] + bis["resolution_rate_scale"] + 1e-6
    for k in (2, 3):
        ks = search_capacity(sc, 6, probe_many=_threshold_prober(capacity_scale), probes_per_round=k)
        assert ks["probes_per_round"] == k and ks["resolution_rate_scale"] <= bis["resolution_rate_scale"] + 1e-9
        assert ks["rate_scale"] <= capacity_scale < ks["rate_scale"] + ks["resolution_rate_scale"] + 1e-6


@pytest.mark.parametrize("capacity_scale", [0.02, 0.3, 1.0, 2.7, 37.0])
@pytest.mark.parametrize("near_ratio", [0.2, 0.9, 1.0, 1.04, 1.5, 8.0])
def test_a_warm_start_brackets_the_same_capacity_at_least_as_finely(capacity_scale, near_ratio):
    """A warm start (near a neighbouring probe's answer, right or wrong by up to 8x) finds the
    same threshold, at a resolution no coarser than the cold search's, in fewer probes when near
    is within a few per cent."""
    from pddbench.measure.capacity import search_capacity
    from pddbench.schema.scenario import load_scenario

    sc = load_scenario("paper/same-dc-pd", ["workload.synth.requests=200"])
    cold = search_capacity(sc, 7, probe_many=_threshold_prober(capacity_scale))
    warm = search_capacity(sc, 7, probe_many=_threshold_prober(capacity_scale), near=capacity_scale * near_ratio)
    assert warm["rate_scale"] <= capacity_scale < warm["rate_scale"] + warm["resolution_rate_scale"] + 1e-6
    assert warm["resolution_rate_scale"] <= cold["resolution_rate_scale"] + 1e-6
    assert warm["warm_start_rate_scale"] == capacity_scale * near_ratio and "warm_start_rate_scale" not in cold
    if 0.9 <= near_ratio <= 1.04:
        assert len(warm["probes"]) < len(cold["probes"])


@pytest.mark.parametrize("capacity_scale", [0.02, 0.3, 1.0, 2.7, 37.0])
@pytest.mark.parametrize("near_ratio", [0.97, 0.995, 1.0, 1.01, 1.03])
def test_a_warm_start_within_three_per_cent_brackets_in_at_most_six_probes(capacity_scale, near_ratio):
    """Near first, one step (about 1/16 of near, a power-of-two multiple of the final width) away
    from it, then bisection exactly down to the cold search's width: 7 iterations' resolution in
    at most 2 + 4 probes where near is within 3 % of the answer (the old two-sided bracket took 6-7)."""
    from pddbench.measure.capacity import search_capacity
    from pddbench.schema.scenario import load_scenario

    sc = load_scenario("paper/same-dc-pd", ["workload.synth.requests=200"])
    warm = search_capacity(sc, 7, probe_many=_threshold_prober(capacity_scale), near=capacity_scale * near_ratio)
    assert warm["rate_scale"] <= capacity_scale < warm["rate_scale"] + warm["resolution_rate_scale"] + 1e-6
    assert len(warm["probes"]) <= 6
    assert round(capacity_scale * near_ratio, 6) in [p["rate_scale"] for p in warm["probes"]]


@pytest.mark.parametrize("near_ratio", [0.5, 0.98, 1.0, 1.02, 3.0])
def test_a_search_that_must_hold_at_near_is_one_simulation_where_it_fails_there(near_ratio):
    """stop_if_near_fails makes the first probe a check: where the scenario fails at near the
    search ends after that one simulation (stopped_at_near, no capacity); where it holds there the
    search is the plain warm search, probe for probe."""
    from pddbench.measure.capacity import search_capacity
    from pddbench.schema.scenario import load_scenario

    sc = load_scenario("paper/same-dc-pd", ["workload.synth.requests=200"])
    near = 2.7 * near_ratio
    checked = search_capacity(sc, 7, probe_many=_threshold_prober(2.7), near=near, stop_if_near_fails=True)
    plain = search_capacity(sc, 7, probe_many=_threshold_prober(2.7), near=near)
    if near > 2.7:
        assert checked["stopped_at_near"] and checked["rate_scale"] is None
        assert [p["rate_scale"] for p in checked["probes"]] == [round(near, 6)]
        assert plain["rate_scale"] is not None and len(plain["probes"]) > 1
    else:
        assert "stopped_at_near" not in checked and checked["probes"] == plain["probes"]
        assert checked["rate_scale"] == plain["rate_scale"] <= 2.7


def test_a_warm_start_on_the_simulator_holds_where_it_answers():
    """On the real simulator (a short trace, not monotone) the warm answer held and nothing at or
    below it failed, as the cold search's."""
    from pddbench.measure.capacity import search_capacity
    from pddbench.schema.scenario import load_scenario

    sc = load_scenario("paper/same-dc-pd", ["workload.synth.requests=200"])
    cold = search_capacity(sc, 5)
    warm = search_capacity(sc, 5, near=cold["rate_scale"] * 1.1)
    assert all(p["sla_holds"] for p in warm["probes"] if p["rate_scale"] <= warm["rate_scale"])
    assert abs(warm["throughput_within_sla_rps"] / cold["throughput_within_sla_rps"] - 1) < 0.1


def test_k_section_on_the_simulator_answers_below_every_failed_rate():
    """On a short trace the verdict is not monotone in the rate (a rate can hold above one that
    failed): whatever k, the answer held and no probed rate at or below it failed."""
    from pddbench.measure.capacity import search_capacity
    from pddbench.schema.scenario import load_scenario
    from pddbench.sweep.capacity_run import parallel_search
    from pddbench.sweep.executors import InlineExecutor

    sc = load_scenario("paper/same-dc-pd", ["workload.synth.requests=200"])
    bis = search_capacity(sc, 5)
    same = parallel_search(sc, InlineExecutor(), 5, probes_per_round=1)
    assert same == bis  # k = 1 through an executor is the same bisection
    for k in (1, 2, 3):
        res = bis if k == 1 else parallel_search(sc, InlineExecutor(), 5, probes_per_round=k)
        held = [p for p in res["probes"] if p["rate_scale"] == res["rate_scale"]]
        assert held and all(p["sla_holds"] for p in held)
        assert all(p["sla_holds"] for p in res["probes"] if p["rate_scale"] <= res["rate_scale"])
        assert res["throughput_within_sla_rps"] == held[0]["offered_rps"]


# -- Ray ---------------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray_processes() -> list[str]:
    out = subprocess.run(["pgrep", "-af", "raylet|gcs_server"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "pgrep" not in line]


@pytest.fixture
def loopback_only_netns():
    """A namespace whose only interface is loopback: Ray there cannot bind, nor be reached, beyond
    127.0.0.1 (ray start otherwise advertises the machine's own address)."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 for a loopback-only namespace")
    name = f"pddb-ray-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"], check=True)
        yield ["ip", "netns", "exec", name]
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def test_ray_head_gives_the_same_bytes(local_capacity, tmp_path, loopback_only_netns):
    pytest.importorskip("ray", reason="ray is not installed (pip install 'pddbench[cluster]')")
    if _ray_processes():
        pytest.skip("a Ray cluster is already running on this machine; not touching it")
    ray_bin = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    port = _free_port()
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    inside = loopback_only_netns
    path, j1 = local_capacity
    try:
        subprocess.run([*inside, ray_bin, "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1",
                        "--num-cpus=2", "--include-dashboard=false", "--disable-usage-stats"], check=True, env=env,
                       capture_output=True, timeout=180)
        res = subprocess.run([*inside, sys.executable, "-m", "pddbench", "sweep", str(path), f"127.0.0.1:{port}",
                              "--ray", "--out", str(tmp_path / "ray")], capture_output=True, text=True, env=env,
                             cwd=REPO, timeout=600)
        assert res.returncode == 0, res.stderr[-3000:]
    finally:
        subprocess.run([*inside, ray_bin, "stop", "--force"], env=env, capture_output=True, timeout=120)
    assert (tmp_path / "ray" / "points.parquet").read_bytes() == (j1 / "points.parquet").read_bytes()
    assert json.loads((tmp_path / "ray" / "sweep.json").read_text())["executor"]["executor"] == "ray"
    for _ in range(20):
        if not _ray_processes():
            break
        time.sleep(0.5)
    assert not _ray_processes()


def test_a_worker_keeps_several_workloads_within_its_request_budget(monkeypatch):
    """A crossover search interleaves tasks of several workloads: a worker generates each once and
    its summaries are a fresh generation's; past CACHED_REQUESTS the least recently used goes."""
    from collections import OrderedDict

    import pddbench.sweep.tasks as tasks
    from pddbench.measure.runner import simulate_summary
    from pddbench.reproduce.tasks import Settings, _variant
    from pddbench.workload import source

    cfg = Settings.make(requests=300, seeds=2)
    a, b = (_variant("same-dc-pd", seed, cfg, ["workload.synth.requests=300"]) for seed in (0, 1))
    assert a.workload.synth.seed != b.workload.synth.seed
    a_faster = a.model_copy(deep=True)
    a_faster.workload.rate_scale = 2.0
    made = []
    real = source.workload_requests
    monkeypatch.setattr(source, "workload_requests", lambda sc: made.append(sc.workload.synth.seed) or real(sc))
    monkeypatch.setattr(tasks, "_requests_cache", OrderedDict())
    got = [tasks._summary(sc) for sc in (a, b, a_faster, a)]
    assert made == [a.workload.synth.seed, b.workload.synth.seed]  # a generated once, kept while b ran
    def same(s: dict) -> dict:  # without the fields that differ between identical runs (wall time, load)
        return {k: v for k, v in s.items() if k not in ("sim_wall_s", "provenance")}
    for sc, s in zip((a, b, a_faster), got):
        assert same(s) == same(simulate_summary(sc)[1])
    assert same(got[3]) == same(got[0]) and same(got[2]) != same(got[0])
    made.clear()
    monkeypatch.setattr(tasks, "CACHED_REQUESTS", 300)  # room for one workload: a is dropped for b
    monkeypatch.setattr(tasks, "_requests_cache", OrderedDict())
    for sc in (a, b, a):
        tasks._summary(sc)
    assert made == [a.workload.synth.seed, b.workload.synth.seed, a.workload.synth.seed]
