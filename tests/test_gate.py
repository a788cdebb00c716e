"""pddbench gate: exact mode on simulator runs, rules, statistical mode on synthetic live repeats
(the simulator's records with run-level and request-level noise: no vLLM), bad input, outputs,
--update-baseline, history, --repeat."""

import json
import shutil
from xml.etree import ElementTree as ET

import numpy as np
import pytest

from pddbench.core.errors import UserError
from pddbench.gate.exact import judge
from pddbench.gate.rules import Rule, load_rules, parse_rules
from pddbench.metrics.summary import summarize
from pddbench.metrics.records import read_records, write_records
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


# --- fails closed: what the gate cannot judge is bad input (exit 2), never a pass ----------------

def edited_run(src, dst, summary):
    """A copy of run folder `src` (its gate inputs: summary.json, records.parquet) with summary.json
    replaced: a dict is written as JSON, a str as it is (to plant what json.dumps cannot write:
    1e999, a 400-digit integer, a duplicate key)."""
    dst.mkdir(parents=True)
    shutil.copyfile(src / "records.parquet", dst / "records.parquet")
    (dst / "summary.json").write_text(summary if isinstance(summary, str) else json.dumps(summary))
    return dst


def _planted(summary: dict, dotted: str, raw: str) -> str:
    """summary.json text with the value at `dotted` replaced by the JSON text `raw` (MISSING: removed)."""
    doc = json.loads(json.dumps(summary))
    node = doc
    *parents, leaf = dotted.split(".")
    for p in parents:
        node = node[p]
    if raw == "MISSING":
        del node[leaf]
        return json.dumps(doc)
    node[leaf] = "@planted@"
    return json.dumps(doc).replace('"@planted@"', raw)


NOT_NUMBERS = ["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "1" + "0" * 400, '"1985.0"', '"fast"', "true",
               "false", '{"p90": 1}', "[1, 2]", "null", "MISSING"]


def _code(*args):
    from tests.inprocess import cli

    return cli(*map(str, args))


def test_ruled_metric_that_is_not_a_finite_number_is_bad_input_on_either_side(sim_runs, tmp_path):
    """The tester's case: the candidate's TTFT p90 doubled while the baseline's (or its own) is
    not a number: exit 2 naming the file and the metric, never 'moved (no rule)' or 'better'."""
    summary = json.loads((sim_runs / "a" / "summary.json").read_text())
    doubled = json.loads(json.dumps(summary))
    doubled["ttft_ms"]["p90"] *= 2
    assert _code("gate", edited_run(sim_runs / "a", tmp_path / "slow", doubled), "--baseline", sim_runs / "a",
                 "--history", tmp_path / "h").code == 1
    n = 0
    for raw in NOT_NUMBERS:
        for side in ("candidate", "baseline"):
            n += 1
            bad = edited_run(sim_runs / "a", tmp_path / f"bad{n}", _planted(summary, "ttft_ms.p90", raw))
            good = edited_run(sim_runs / "a", tmp_path / f"good{n}", doubled)
            cand, base = (bad, good) if side == "candidate" else (good, bad)
            res = _code("gate", cand, "--baseline", base, "--history", tmp_path / "h")
            assert res.code == 2 and res.one_line, (raw, side, res.code, res.err, res.out[-300:])
            assert str(bad / "summary.json") in res.err and "ttft_ms.p90" in res.err, (raw, side, res.err)
    assert n == 28


def test_a_number_that_overflows_anywhere_in_a_summary_is_one_line(sim_runs, tmp_path):
    """1e999 and a 400-digit integer in a metric no rule names: one line, exit 2, no traceback."""
    summary = json.loads((sim_runs / "a" / "summary.json").read_text())
    for i, raw in enumerate(("1e999", "1" + "0" * 400, "-1e999")):
        bad = edited_run(sim_runs / "a", tmp_path / f"b{i}", _planted(summary, "kv_wait_ms.p50", raw))
        res = _code("gate", bad, "--baseline", sim_runs / "a", "--history", tmp_path / "h")
        assert res.code == 2 and res.one_line and "kv_wait_ms.p50" in res.err, res.err


def test_nullable_rule_null_on_both_sides_is_na_and_on_one_side_a_regression(sim_runs, tmp_path):
    summary = json.loads((sim_runs / "a" / "summary.json").read_text())
    none = json.loads(json.dumps(summary))
    none["handoff_stall_ms"] = {k: None for k in summary["handoff_stall_ms"]}
    a = edited_run(sim_runs / "a", tmp_path / "a", none)
    b = edited_run(sim_runs / "a", tmp_path / "b", none)
    res = _code("gate", b, "--baseline", a, "--history", tmp_path / "h", "--json", tmp_path / "g.json")
    assert res.code == 0, res.err
    row = next(r for r in json.loads((tmp_path / "g.json").read_text())["rows"] if r["metric"] == "handoff_stall_ms.p90")
    assert row["status"] == "n/a"
    res = _code("gate", sim_runs / "a", "--baseline", a, "--history", tmp_path / "h")  # stalls appeared
    assert res.code == 1 and "handoff_stall_ms.p90" in res.out
    strict = tmp_path / "strict.yaml"
    strict.write_text("rules:\n  handoff_stall_ms.p90: {worse: up, rel: 10%}\n")  # not nullable: null is bad input
    res = _code("gate", b, "--baseline", a, "--rules", strict, "--history", tmp_path / "h")
    assert res.code == 2 and "null" in res.err and "handoff_stall_ms.p90" in res.err, res.err


def test_rules_naming_no_known_metric_are_refused(sim_runs, tmp_path):
    cases = {"rules:\n  ttft_ms.p91: {worse: up, rel: 5%}\n": ["ttft_ms.p91", "known metrics include"],
             "rules:\n  ttft_ms: {worse: up, rel: 5%}\n": ["ttft_ms", "mapping"],
             "rules:\n  seed: {worse: up}\n  nonsense: {worse: up}\n": ["seed", "nonsense", "known metrics include"],
             "rules:\n  deployment: {worse: up}\n": ["deployment", "string"],
             "rules:\n  throughput_within_sla_rps: {worse: down, rel: 3%, for: [capacity]}\n": ["no rule applies"]}
    for i, (text, words) in enumerate(cases.items()):
        rules = tmp_path / f"r{i}.yaml"
        rules.write_text(text)
        res = _code("gate", sim_runs / "b", "--baseline", sim_runs / "a", "--rules", rules, "--history", tmp_path / "h")
        assert res.code == 2 and res.one_line, (text, res.code, res.err)
        assert all(w in res.err for w in words), (text, res.err)


def test_rules_tolerances_and_settings_are_validated(tmp_path):
    bad = ["rel: .nan", "rel: .inf", "rel: -.inf", "abs: -1", "abs: .nan", "abs: .inf", "rel: '-5%'", "rel: 'nan%'",
           "rel: 'inf'", "abs: true", "abs: '5'", "rel: 1" + "0" * 400, "live: {abs: -1}", "live: {rel: .nan}",
           "for: [runs]", "for: []", "nullable: 'yes'"]
    for i, extra in enumerate(bad):
        path = tmp_path / f"r{i}.yaml"
        path.write_text(f"rules:\n  ttft_ms.p90: {{worse: up, {extra}}}\n")
        with pytest.raises(UserError, match="ttft_ms.p90"):
            load_rules(path)
    top = ["confidence: 1", "confidence: .nan", "confidence: true", "bootstrap: true", "bootstrap: 99",
           "bootstrap: 1000000000", "seed: -1", "seed: true", "seed: 1.5"]
    for i, extra in enumerate(top):
        path = tmp_path / f"t{i}.yaml"
        path.write_text(f"{extra}\nrules:\n  ttft_ms.p90: {{worse: up}}\n")
        with pytest.raises(UserError, match=extra.split(":")[0]):
            load_rules(path)
    dup = tmp_path / "dup.yaml"
    dup.write_text("rules:\n  ttft_ms.p90: {worse: up, rel: 5%}\n  ttft_ms.p90: {worse: up, rel: 500%}\n")
    with pytest.raises(UserError, match="duplicate key"):
        load_rules(dup)
    ok = tmp_path / "ok.yaml"
    ok.write_text("rules:\n  ttft_ms.p90: {worse: up, rel: 0, abs: 0.0, live: {rel: 0%}, for: run, nullable: false}\n")
    assert load_rules(ok).rules["ttft_ms.p90"].kinds == ("run",)


def test_duplicate_keys_in_any_input_are_refused(sim_runs, base_records, tmp_path):
    text = (sim_runs / "a" / "summary.json").read_text()
    dup = text.replace('"ttft_ms": {', '"ttft_ms": {"p90": 1.0, ', 1)
    assert dup != text
    cand = edited_run(sim_runs / "a", tmp_path / "dup", dup)
    res = _code("gate", cand, "--baseline", sim_runs / "a", "--history", tmp_path / "h")
    assert res.code == 2 and "duplicate key" in res.err and "summary.json" in res.err, res.err
    cap = tmp_path / "cap"
    cap.mkdir()
    (cap / "capacity.json").write_text('{"scenario": "pdd", "throughput_within_sla_rps": 2.0, "bcr": 0.1, '
                                       '"throughput_within_sla_rps": 9.0}')
    res = _code("gate", cap, "--baseline", cap, "--history", tmp_path / "h")
    assert res.code == 2 and "duplicate key" in res.err and "capacity.json" in res.err, res.err
    live = _live_repeats(tmp_path / "live", base_records, seed=1, k=2)
    (live / "repeats.json").write_text('{"runs": ["repeat-0"], "runs": ["repeat-0", "repeat-1"]}')
    res = _code("gate", live, "--baseline", live, "--history", tmp_path / "h")
    assert res.code == 2 and "duplicate key" in res.err and "repeats.json" in res.err, res.err
    sweep = _sweep(tmp_path / "sw", [_point(1)])
    (sweep / "sweep.json").write_text('{"state": "complete", "sweep": {"name": "s", "axes": {"x": [1]}}, '
                                      '"state": "running"}')
    res = _code("gate", sweep, "--baseline", sweep, "--history", tmp_path / "h")
    assert res.code == 2 and "duplicate key" in res.err and "sweep.json" in res.err, res.err


def test_another_scenario_is_refused_unless_allowed(sim_runs, tmp_path):
    summary = json.loads((sim_runs / "a" / "summary.json").read_text())
    other = edited_run(sim_runs / "a", tmp_path / "other", {**summary, "scenario": "cross-dc-pd"})
    res = _code("gate", other, "--baseline", sim_runs / "a", "--history", tmp_path / "h")
    assert res.code == 2 and res.one_line and "cross-dc-pd" in res.err and "--allow-different-scenario" in res.err
    res = _code("gate", other, "--baseline", sim_runs / "a", "--history", tmp_path / "h", "--allow-different-scenario",
                "--json", tmp_path / "g.json")
    assert res.code == 0, res.err
    assert any("cross-dc-pd" in n for n in json.loads((tmp_path / "g.json").read_text())["notes"])
    for name, scenario in (("a", "pdd"), ("b", "same-dc-pd")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "capacity.json").write_text(json.dumps(
            {"scenario": scenario, "throughput_within_sla_rps": 2.0, "bcr": 0.1}))
    res = _code("gate", tmp_path / "b", "--baseline", tmp_path / "a", "--history", tmp_path / "h")
    assert res.code == 2 and "same-dc-pd" in res.err, res.err


def _point(x, status="ok", **metrics):
    return {"point": x, "repeat": 0, "seed": 0, "key": f"k{x}", "x": x, "status": status, "error": "",
            "requests_total": 10, "slo_attainment": 0.9, **metrics}


def _sweep(folder, rows, axes=("x",), state="complete", name="s"):
    import pandas as pd

    folder.mkdir(parents=True)
    (folder / "sweep.json").write_text(json.dumps({"state": state, "sweep": {"name": name, "axes": {a: [] for a in axes}}}))
    pd.DataFrame(rows).to_parquet(folder / "points.parquet", index=False)
    return folder


def test_sweeps_of_other_axes_or_points_or_bad_cells_are_refused(tmp_path):
    rules = tmp_path / "rules.yaml"
    rules.write_text("rules:\n  slo_attainment: {worse: down, abs: 0.01}\n  point_failed: {worse: up, abs: 0, for: sweep}\n")
    base = _sweep(tmp_path / "base", [_point(1), _point(2)])

    def gate_(cand, *extra):
        return _code("gate", cand, "--baseline", base, "--rules", rules, "--history", tmp_path / "h", *extra)
    assert gate_(_sweep(tmp_path / "same", [_point(1), _point(2)])).code == 0
    refused = {"other axes": _sweep(tmp_path / "axes", [{**_point(1), "y": 1}, {**_point(2), "y": 1}], axes=("x", "y")),
               "baseline only": _sweep(tmp_path / "fewer", [_point(1)]),
               "candidate only": _sweep(tmp_path / "more", [_point(1), _point(2), _point(3)]),
               "'s2'": _sweep(tmp_path / "name", [_point(1), _point(2)], name="s2"),
               "not complete": _sweep(tmp_path / "part", [_point(1), _point(2)], state="interrupted"),
               "twice": _sweep(tmp_path / "twice", [_point(1), _point(2), _point(2)]),
               "null": _sweep(tmp_path / "nan", [_point(1), _point(2, slo_attainment=float("nan"))]),
               "string": _sweep(tmp_path / "str", [_point(1, slo_attainment="0.9"), _point(2, slo_attainment="0.9")]),
               "lacks": _sweep(tmp_path / "lacks", [{k: v for k, v in _point(x).items() if k != "slo_attainment"}
                                                    for x in (1, 2)])}
    for why, cand in refused.items():
        res = gate_(cand)
        assert res.code == 2 and res.one_line and why in res.err, (why, res.err)
    res = gate_(tmp_path / "fewer", "--allow-different-scenario")
    assert res.code == 1 and "x=2" in res.out  # allowed: the point the candidate lacks is a regression
    assert gate_(_sweep(tmp_path / "failed", [_point(1), _point(2, status="failed", slo_attainment=None)])).code == 1
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "sweep.json").write_text('{"sweep": {"name": "s", "axes": {"x": [1]}}}')
    (tmp_path / "broken" / "points.parquet").write_bytes(b"PAR1 not really")
    res = gate_(tmp_path / "broken")
    assert res.code == 2 and res.one_line and "points.parquet" in res.err, res.err


def test_what_used_to_be_a_traceback_is_one_line_exit_2(sim_runs, tmp_path):
    (tmp_path / "afile").write_text("x")
    damaged = tmp_path / "damaged"
    shutil.copytree(sim_runs / "a", damaged)
    (damaged / "records.parquet").write_bytes(b"PAR1 damaged")
    (tmp_path / "folder").mkdir()
    cases = [([damaged], "records.parquet"),
             ([sim_runs / "b", "--junit", tmp_path / "folder"], "--junit"),
             ([sim_runs / "b", "--markdown", tmp_path / "afile" / "g.md"], "afile/g.md"),
             ([sim_runs / "b", "--json", tmp_path / "afile" / "g.json"], "afile/g.json"),
             ([sim_runs / "b", "--history", tmp_path / "afile" / "hist"], "--history"),
             ([sim_runs / "b", "--history", tmp_path / "afile"], "--history")]
    for args, why in cases:
        res = _code("gate", *args[:1], "--baseline", sim_runs / "a", "--history", tmp_path / "h", *args[1:])
        assert res.code == 2 and res.one_line and why in res.err, (args, res.code, res.err)
    assert not (tmp_path / "h").exists()  # refused before any output: no history row either
    # a damaged history table is refused before the comparison writes anything
    (tmp_path / "h2").mkdir()
    (tmp_path / "h2" / "gate_history.parquet").write_bytes(b"not parquet")
    res = _code("gate", sim_runs / "b", "--baseline", sim_runs / "a", "--history", tmp_path / "h2", "--json",
                tmp_path / "g.json")
    assert res.code == 2 and "history" in res.err and not (tmp_path / "g.json").exists(), res.err
    res = _code("history", "--history", tmp_path / "h2", "--out", tmp_path / "afile")
    assert res.code == 2 and res.one_line and "--out" in res.err, res.err


def test_statistical_mode_refuses_what_it_cannot_judge(base_records, tmp_path):
    base = _live_repeats(tmp_path / "base", base_records, seed=1)
    cand = _live_repeats(tmp_path / "cand", base_records, seed=2)
    summary = cand / "repeat-1" / "summary.json"
    doc = json.loads(summary.read_text())
    summary.write_text(json.dumps({**doc, "slo_attainment": "0.99"}))
    res = _code("gate", cand, "--baseline", base, "--history", tmp_path / "h")
    assert res.code == 2 and "repeat-1" in res.err and "slo_attainment" in res.err, res.err
    summary.write_text(json.dumps(doc))
    records = read_records(cand / "repeat-0" / "records.parquet")
    records.loc[records.index[0], "ttft_ms"] = float("inf")
    write_records(cand / "repeat-0" / "records.parquet", records)
    res = _code("gate", cand, "--baseline", base, "--history", tmp_path / "h")
    assert res.code == 2 and "ttft_ms" in res.err and "infinite" in res.err, res.err


def test_compare_refuses_a_metric_that_is_not_a_finite_number(sim_runs, tmp_path):
    summary = json.loads((sim_runs / "a" / "summary.json").read_text())
    for i, (metric, raw) in enumerate((("ttft_ms.p90", '"1985.0"'), ("goodput_rps", "true"), ("wan_kv_bytes", "1e999"),
                                       ("requests_failed", "1" + "0" * 400), ("slo_attainment", '{"v": 1}'),
                                       ("sla.ttft_ms", '"5s"'), ("offered_rps", "[4]"))):
        bad = edited_run(sim_runs / "a", tmp_path / f"r{i}", _planted(summary, metric, raw))
        res = _code("compare", sim_runs / "a", bad, "--out", tmp_path / f"out{i}")
        assert res.code == 2 and res.one_line, (metric, res.err)
        assert str(bad) in res.err and metric in res.err, res.err
        assert not (tmp_path / f"out{i}").exists()


def test_a_candidate_in_which_every_request_failed_is_a_regression_not_bad_input(sim_runs, tmp_path):
    """Null latencies because nothing completed are a measurement (exit 1); the same nulls in a run
    that completed requests stay bad input (exit 2)."""
    summary = json.loads((sim_runs / "a" / "summary.json").read_text())
    failed = json.loads(json.dumps(summary))
    failed.update(requests_completed=0, requests_failed=failed["requests_total"])
    for key, value in failed.items():
        if isinstance(value, dict) and "p90" in value:
            failed[key] = {k: None for k in value}
    res = _code("gate", edited_run(sim_runs / "a", tmp_path / "all-failed", failed), "--baseline", sim_runs / "a",
                "--history", tmp_path / "h")
    assert res.code == 1 and "requests_failed" in res.out, res.err
    failed["requests_completed"] = summary["requests_completed"]
    res = _code("gate", edited_run(sim_runs / "a", tmp_path / "nulls", failed), "--baseline", sim_runs / "a",
                "--history", tmp_path / "h")
    assert res.code == 2 and res.one_line, res.err


@pytest.mark.parametrize("state", ["running", "interrupted", "failed"])
def test_a_repeat_series_that_did_not_complete_is_refused(sim_runs, tmp_path, state):
    series = tmp_path / "series"
    series.mkdir()
    shutil.copytree(sim_runs / "a", series / "repeat-0")
    (series / "repeats.json").write_text(json.dumps({"runs": ["repeat-0"], "repeats": 3, "state": state}))
    res = _code("gate", series, "--baseline", series, "--history", tmp_path / "h")
    assert res.code == 2 and res.one_line and state in res.err, res.err
    (series / "repeats.json").write_text(json.dumps({"runs": ["repeat-0"], "repeats": 1, "state": "complete"}))
    assert _code("gate", series, "--baseline", series, "--history", tmp_path / "h").code == 0


def test_a_tolerance_written_with_an_exponent_is_a_number(tmp_path):
    """YAML 1.2 numbers that PyYAML's YAML 1.1 rule reads as strings (1e-05, 1.5e3) are numbers
    in every file pddbench reads; a quoted one stays a string (and abs refuses it)."""
    from pddbench.core.loading import load_yaml
    from pddbench.gate.rules import parse_rules

    got = load_yaml("a: 1e-05\nb: 1.5e3\nc: '1e5'\nd: v1e3\n", "t")
    assert got == {"a": 1e-05, "b": 1500.0, "c": "1e5", "d": "v1e3"}
    rs = parse_rules(load_yaml("rules:\n  ttft_ms.p90: {worse: up, rel: 0.0, abs: 1e-05}\n", "t"), "t")
    assert rs.rules["ttft_ms.p90"].abs == 1e-05
    with pytest.raises(UserError):
        parse_rules(load_yaml("rules:\n  ttft_ms.p90: {worse: up, abs: '1e-05'}\n", "t"), "t")
