"""pddbench gate: exact mode on simulator runs, rules, statistical mode on synthetic live repeats
(the simulator's records with run-level and request-level noise: no vLLM), bad input, outputs,
--update-baseline, history, --repeat."""

import json
import shutil
from xml.etree import ElementTree as ET

import numpy as np
import pytest

from pddbench.errors import UserError
from pddbench.gate.exact import judge
from pddbench.gate.rules import Rule, load_rules, parse_rules
from pddbench.metrics.summary import summarize
from pddbench.records import read_records, write_records
from tests.conftest import REPO, run_cli

PAPER = REPO / "scenarios" / "paper"
HW = {"cpu_model": "Test CPU", "cpu_isa": "avx512", "cpu_cores": 2, "git_commit": "x"}


@pytest.fixture(scope="module")
def sim_runs(tmp_path_factory):
    """a, b: the same scenario twice (identical records); c: a changed setting (100G WAN)."""
    root = tmp_path_factory.mktemp("gate-sim")
    for name, extra in (("a", []), ("b", []), ("c", ["--set", "network.wan=cross-city-100g"])):
        res = run_cli("run", PAPER / "pdd.yaml", "--set", "workload.synth.requests=200", *extra, "--out", root / name)
        assert res.returncode == 0, res.stderr
    return root


def _gate(*args, history):
    return run_cli("gate", *map(str, args), "--history", history)


def test_exact_identical_runs_pass(sim_runs, tmp_path):
    res = _gate(sim_runs / "b", "--baseline", sim_runs / "a", "--json", tmp_path / "g.json", history=tmp_path / "h")
    assert res.returncode == 0, res.stderr
    out = json.loads((tmp_path / "g.json").read_text())
    assert out["mode"] == "exact" and out["identical"] and out["regressions"] == 0
    assert "identical" in res.stdout


def test_exact_changed_setting_fails_and_reports_what_moved(sim_runs, tmp_path):
    res = _gate(sim_runs / "c", "--baseline", sim_runs / "a", "--markdown", tmp_path / "g.md", "--junit",
                tmp_path / "g.xml", "--json", tmp_path / "g.json", history=tmp_path / "h")
    assert res.returncode == 1, res.stderr
    out = json.loads((tmp_path / "g.json").read_text())
    bad = {r["metric"] for r in out["rows"] if r["status"] == "regression"}
    assert "wan_kv_bytes" in bad  # the wider line lets every transfer cross: +170 % WAN bytes
    row = next(r for r in out["rows"] if r["metric"] == "wan_kv_bytes")
    assert row["candidate"] > row["baseline"] and row["diff_pct"] > 5
    assert "records.parquet differs" in " ".join(out["notes"])
    md = (tmp_path / "g.md").read_text()
    assert "FAIL" in md and "`wan_kv_bytes`" in md and "moved (no rule)" in md
    # JUnit: well-formed, one failure per regression
    root = ET.parse(tmp_path / "g.xml").getroot()
    assert root.tag == "testsuites" and int(root.get("failures")) == len([r for r in out["rows"]
                                                                        if r["status"] == "regression"])
    assert any(c.find("failure") is not None and "wan_kv_bytes" in c.get("name") for c in root.iter("testcase"))


def test_rules_allow_the_change_when_tolerant(sim_runs, tmp_path):
    rules = tmp_path / "loose.yaml"
    rules.write_text("rules:\n  wan_kv_bytes: {worse: up, rel: 300%}\n  ttft_ms.p90: {worse: up, abs: 1000}\n")
    res = _gate(sim_runs / "c", "--baseline", sim_runs / "a", "--rules", rules, "--json", tmp_path / "g.json",
                history=tmp_path / "h")
    assert res.returncode == 0, res.stdout + res.stderr
    out = json.loads((tmp_path / "g.json").read_text())
    assert not out["identical"] and "PASS with changes" in out["verdict"]


def test_rule_tolerance_rel_or_abs():
    r = Rule("ttft_ms.p90", "up", rel=0.05, abs=20)
    assert r.tolerance(100) == 20 and r.tolerance(1000) == 50
    assert judge("m", 100, 119, r)["status"] == "within"
    assert judge("m", 100, 121, r)["status"] == "regression"
    assert judge("m", 1000, 1049, r)["status"] == "within"
    assert judge("m", 1000, 1051, r)["status"] == "regression"
    assert judge("m", 1000, 900, r)["status"] == "improved"
    down = Rule("throughput_within_sla_rps", "down", rel=0.03)
    assert judge("m", 10, 9.71, down)["status"] == "within" and judge("m", 10, 9.69, down)["status"] == "regression"
    assert judge("m", 10, 10, down)["status"] == "same" and judge("m", 10, 12, None)["status"] == "moved"
    rs = parse_rules({"rules": {"a": {"worse": "up", "rel": "5%", "abs": 20, "live": {"rel": 0.25}}}}, "t")
    assert rs.rules["a"].rel == 0.05 and rs.live_rules["a"].rel == 0.25 and rs.live_rules["a"].abs == 20
    assert load_rules().rules["throughput_within_sla_rps"].worse == "down"  # the shipped default set
    for bad in ({"rules": {"a": {"worse": "sideways"}}}, {"rules": {"a": {"worse": "up", "rel": "five"}}},
                {"rules": {}}, {"rules": {"a": {"worse": "up", "tol": 1}}}):
        with pytest.raises(UserError):
            parse_rules(bad, "t")


# --- statistical mode: synthetic live repeats -------------------------------------------------

@pytest.fixture(scope="module")
def base_records(sim_runs):
    return read_records(sim_runs / "a" / "records.parquet")


def _live_repeat(folder, records, rng, run_sd=0.05, req_sd=0.15, shift=1.0, provenance=HW):
    """One stand-in live run: the simulator's records with a run-level factor (machine state) and
    per-request noise on every latency, times `shift` on the prefill side (TTFT)."""
    df = records.copy()
    run = rng.lognormal(0, run_sd)
    n = len(df)
    ttft = df["ttft_ms"] * run * shift * rng.lognormal(0, req_sd, n)
    tpot = df["tpot_ms"] * run * rng.lognormal(0, req_sd, n)
    df["first_token_ms"] = df["arrival_ms"] + ttft
    df["finish_ms"] = df["first_token_ms"] + tpot.fillna(0) * (df["output_tokens"] - 1).clip(lower=0)
    df["ttft_ms"], df["tpot_ms"] = ttft, tpot
    df["e2e_ms"] = df["finish_ms"] - df["arrival_ms"]
    folder.mkdir(parents=True)
    write_records(folder / "records.parquet", df)
    s = summarize(df, deployment="same_dc_pd", sla_ttft_ms=5000, sla_tpot_ms=200, sla_percentile_q=90)
    s.update(runtime="live", scenario="live-stand-in", provenance=provenance)
    (folder / "summary.json").write_text(json.dumps(s, default=float))


def _live_repeats(folder, records, seed, k=3, **kw):
    rng = np.random.default_rng(seed)
    for i in range(k):
        _live_repeat(folder / f"repeat-{i}", records, rng, **kw)
    (folder / "repeats.json").write_text(json.dumps({"runs": [f"repeat-{i}" for i in range(k)],
                                                     "scenario": "live-stand-in", "provenance": kw.get("provenance", HW)}))
    return folder


def test_statistical_same_distribution_passes_and_shift_fails(base_records, tmp_path):
    from pddbench.gate.gate import gate

    base = _live_repeats(tmp_path / "base", base_records, seed=100)
    # the false-alarm check the nightly relies on: 5 unchanged candidates against one baseline
    for i in range(5):
        cand = _live_repeats(tmp_path / f"same{i}", base_records, seed=i)
        res = gate(cand, base, history_dir=None)
        assert res["mode"] == "statistical"
        assert res["regressions"] == 0, [r for r in res["rows"] if r["status"] == "regression"]
    slow = _live_repeats(tmp_path / "slow", base_records, seed=7, shift=2.0)  # TTFT twice as long
    res = gate(slow, base, history_dir=None)
    bad = {r["metric"] for r in res["rows"] if r["status"] == "regression"}
    assert {"ttft_ms.p50", "ttft_ms.p90"} <= bad, res["rows"]
    row = next(r for r in res["rows"] if r["metric"] == "ttft_ms.p50")
    assert row["ci_lo"] > row["tolerance"]  # the whole interval lies beyond the tolerance
    assert "tpot_ms.p50" not in bad


def test_statistical_refuses_different_hardware(base_records, tmp_path):
    base = _live_repeats(tmp_path / "base", base_records, seed=1)
    other = _live_repeats(tmp_path / "other", base_records, seed=2, provenance={**HW, "cpu_isa": "avx2"})
    res = run_cli("gate", other, "--baseline", base, "--history", tmp_path / "h")
    assert res.returncode == 2 and "different hardware" in res.stderr and "cpu_isa" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
    res = run_cli("gate", other, "--baseline", base, "--history", tmp_path / "h", "--allow-different-hardware")
    assert res.returncode == 0, res.stdout + res.stderr


# --- bad input ----------------------------------------------------------------------------------

def test_bad_input_is_one_line_exit_2(sim_runs, base_records, tmp_path):
    (tmp_path / "capacity.json").write_text(json.dumps({"throughput_within_sla_rps": 1.0, "bcr": 0.1}))
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad.yaml").write_text("rules: [\n")
    live = _live_repeats(tmp_path / "live", base_records, seed=3, k=1)
    cases = [(tmp_path / "nope", sim_runs / "a", [], "no such file"),
             (tmp_path / "empty", sim_runs / "a", [], "not a run folder"),
             (tmp_path / "capacity.json", sim_runs / "a", [], "cannot compare"),
             (live, sim_runs / "a", [], "live result"),
             (sim_runs / "b", sim_runs / "a", ["--rules", tmp_path / "bad.yaml"], "not valid YAML"),
             (sim_runs / "b", sim_runs / "a", ["--rules", tmp_path / "missing.yaml"], "not found")]
    for cand, base, extra, why in cases:
        res = run_cli("gate", cand, "--baseline", base, *extra, "--history", tmp_path / "h")
        assert res.returncode == 2, (cand, res.stdout, res.stderr)
        assert why in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
        assert "Traceback" not in res.stderr


def test_capacity_results(tmp_path):
    a = tmp_path / "a"
    a.mkdir()
    doc = {"scenario": "pdd", "throughput_within_sla_rps": 2.0, "bcr": 0.01, "probes": [{"rate_scale": 1.0}],
           "provenance": HW}
    (a / "capacity.json").write_text(json.dumps(doc))
    b = tmp_path / "b"
    shutil.copytree(a, b)
    assert run_cli("gate", b / "capacity.json", "--baseline", a, "--history", tmp_path / "h").returncode == 0
    (b / "capacity.json").write_text(json.dumps({**doc, "throughput_within_sla_rps": 1.8, "bcr": 0.009}))
    res = run_cli("gate", b, "--baseline", a / "capacity.json", "--history", tmp_path / "h")
    assert res.returncode == 1 and "throughput_within_sla_rps" in res.stdout


def test_update_baseline_replaces_the_folder(sim_runs, tmp_path):
    base = tmp_path / "baseline"
    shutil.copytree(sim_runs / "a", base)
    cand = tmp_path / "cand"
    shutil.copytree(sim_runs / "c", cand)
    (cand / "logs").mkdir()
    (cand / "logs" / "engine.log").write_text("big")
    res = run_cli("gate", cand, "--baseline", base, "--update-baseline", "--history", tmp_path / "h",
                  "--json", tmp_path / "g.json")
    assert res.returncode == 0, res.stderr
    out = json.loads((tmp_path / "g.json").read_text())
    assert out["baseline_updated"] and out["regressions"] > 0 and out["verdict"].startswith("ACCEPTED")
    assert (base / "records.parquet").read_bytes() == (cand / "records.parquet").read_bytes()
    assert not (base / "logs").exists() and not list(base.glob("*.png"))  # gate inputs only
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".baseline")]  # no temp folders left
    res = run_cli("gate", cand, "--baseline", base, "--history", tmp_path / "h")
    assert res.returncode == 0 and "identical" in res.stdout


def test_history_append_and_figure(sim_runs, tmp_path):
    hist = tmp_path / "hist"
    assert _gate(sim_runs / "b", "--baseline", sim_runs / "a", history=hist).returncode == 0
    assert _gate(sim_runs / "c", "--baseline", sim_runs / "a", history=hist).returncode == 1
    import pandas as pd

    table = pd.read_parquet(hist / "gate_history.parquet")
    assert table["gate_id"].nunique() == 2
    assert set(table["verdict"]) == {"pass", "fail"}
    p90 = table[table["metric"] == "ttft_ms.p90"]
    assert len(p90) == 2 and p90["tolerance"].notna().all()
    res = run_cli("history", "--history", hist, "--out", tmp_path / "fig", "--metric", "ttft_ms.p90",
                  "--metric", "wan_kv_bytes")
    assert res.returncode == 0, res.stderr
    for name in ("history-ttft_ms.p90.png", "history-wan_kv_bytes.png"):
        assert (tmp_path / "fig" / name).read_bytes()[:4] == b"\x89PNG"
    res = run_cli("history", "--history", hist, "--out", tmp_path / "fig", "--metric", "nonsense")
    assert res.returncode == 2 and "no history for metric" in res.stderr


def test_run_repeat_writes_repeat_folders(tmp_path):
    out = tmp_path / "rep"
    res = run_cli("run", PAPER / "same-dc-pd.yaml", "--set", "workload.synth.requests=50", "--repeat", "2",
                  "--out", out)
    assert res.returncode == 0, res.stderr
    meta = json.loads((out / "repeats.json").read_text())
    assert meta["runs"] == ["repeat-0", "repeat-1"] and meta["runtime"] == "sim" and meta["provenance"]["cpu_cores"]
    for r in meta["runs"]:
        assert (out / r / "summary.json").is_file()
        assert "provenance" in json.loads((out / r / "summary.json").read_text())
    res = run_cli("gate", out, "--baseline", out, "--history", tmp_path / "h")  # sim repeats: exact mode
    assert res.returncode == 0 and "identical" in res.stdout


def test_nightly_sim_part_creates_then_gates_baselines(tmp_path):
    import subprocess
    import sys

    def nightly(overrides, out, *extra):
        cfg = tmp_path / f"{out}.yaml"
        cfg.write_text(json.dumps({"baselines": str(tmp_path / "baselines"),
                                   "sim": {"overrides": overrides, "scenarios": ["paper/same-dc-pd"]}}))
        return subprocess.run([sys.executable, "-m", "pddbench.gate.nightly", "--config", cfg, "--only", "sim",
                               "--out", tmp_path / out, "--history", tmp_path / "hist", *extra],
                              capture_output=True, text=True, cwd=REPO, timeout=300)
    small = ["workload.synth.requests=100"]
    res = nightly(small, "n0")
    assert res.returncode == 0 and "baseline recorded" in (tmp_path / "n0" / "nightly.md").read_text()
    assert nightly(small, "n1", "--update-baselines").returncode == 0
    assert (tmp_path / "baselines" / "sim" / "same-dc-pd" / "records.parquet").is_file()
    res = nightly(small, "n2")
    assert res.returncode == 0, res.stderr
    assert "identical to the baseline" in (tmp_path / "n2" / "nightly.md").read_text()
    res = nightly([*small, "sla.ttft_ms=100"], "n3")  # a tighter SLA: slo_attainment and goodput fall
    assert res.returncode == 1, res.stderr
    md = (tmp_path / "n3" / "nightly.md").read_text()
    assert "FAIL" in md and "`slo_attainment`" in md and "history-slo_attainment.png" in md
    root = ET.parse(tmp_path / "n3" / "junit.xml").getroot()
    assert int(root.get("failures")) >= 1


def test_sweep_folders_gate_point_by_point(tmp_path):
    spec = ("base: paper/pdd\nname: gate-sweep\nmeasure: run\nrepeats: 1\nset: [workload.synth.requests=120{extra}]\n"
            "axes:\n  sla.tpot_ms: [80, 100]\n")
    for name, extra in (("a", ""), ("b", ""), ("c", ", sla.ttft_ms=150")):
        (tmp_path / f"{name}.yaml").write_text(spec.format(extra=extra))
        res = run_cli("sweep", tmp_path / f"{name}.yaml", "--out", tmp_path / name, "-j", "1")
        assert res.returncode == 0, res.stderr
    res = run_cli("gate", tmp_path / "b", "--baseline", tmp_path / "a", "--history", tmp_path / "h")
    assert res.returncode == 0 and "identical" in res.stdout, res.stdout + res.stderr
    res = run_cli("gate", tmp_path / "c", "--baseline", tmp_path / "a", "--history", tmp_path / "h", "--json",
                  tmp_path / "g.json")
    assert res.returncode == 1, res.stdout + res.stderr
    rows = json.loads((tmp_path / "g.json").read_text())["rows"]
    bad = {(r["subject"], r["metric"]) for r in rows if r["status"] == "regression"}
    assert ("sla.tpot_ms=80, repeat=0", "slo_attainment") in bad


def test_interrupted_or_invalid_runs_are_refused(base_records, tmp_path):
    base = _live_repeats(tmp_path / "base", base_records, seed=1)
    cand = _live_repeats(tmp_path / "cand", base_records, seed=2)
    summary = cand / "repeat-1" / "summary.json"
    doc = json.loads(summary.read_text())
    for key, value, why in (("interrupted", True, "interrupted"), ("invalid", "lateness p99 3 ms", "invalid")):
        summary.write_text(json.dumps({**doc, key: value}))
        res = run_cli("gate", cand, "--baseline", base, "--history", tmp_path / "h")
        assert res.returncode == 2 and why in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_nightly_bench_names_the_cpus_of_baseline_and_run(tmp_path):
    """A benchmark baseline from another CPU is named as such (timings do not compare across
    CPUs), not reported as a slowdown of the code: bench_cpus finds both brands."""
    from pddbench.gate.nightly import bench_cpus

    def saved(folder, name, brand):
        path = folder / "Linux-CPython-3.11-64bit" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"machine_info": {"cpu": {"brand_raw": brand}}, "benchmarks": []}))

    base, store = tmp_path / "base", tmp_path / "store"
    saved(base, "0001_baseline.json", "AMD EPYC")
    saved(store, "0001_baseline.json", "AMD EPYC")
    saved(store, "0002_run.json", "Intel(R) Xeon(R) Processor")
    assert bench_cpus(base, store) == ["AMD EPYC", "Intel(R) Xeon(R) Processor"]
    saved(store, "0002_run.json", "AMD EPYC")
    assert bench_cpus(base, store) == ["AMD EPYC", "AMD EPYC"]
    (store / "Linux-CPython-3.11-64bit" / "0002_run.json").write_text("{not json")
    assert bench_cpus(base, store) == ["AMD EPYC"]
