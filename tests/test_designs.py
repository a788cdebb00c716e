"""`pddbench designs SPEC`: several designs on one trace and budget, each at its best split, side by
side with intervals over seeds, and a paper's figures judged; bad specs refused in one line."""

import json
import math

import pytest
import yaml

from pddbench.reproduce.designs import interval
from tests.conftest import REPO, run_cli

PRFAAS = REPO / "scenarios" / "prfaas"


def _spec(tmp_path, **changes) -> tuple:
    spec = {"name": "small", "budget": {"H200": 16, "H20": 32}, "sizes": [8, 16], "requests": 300, "seeds": 2,
            "iterations": 2, "reference": "naive",
            "designs": {"naive": {"scenario": str(PRFAAS / "naive-heterogeneous-pd.yaml")},
                        "prfaas": {"scenario": str(PRFAAS / "prfaas.yaml")},
                        "homogeneous": {"scenario": str(PRFAAS / "homogeneous-pd.yaml"), "budget": {"H20": 48}}},
            "claims": [{"id": "gain", "figure": "throughput, prfaas vs naive", "article": 32,
                        "metric": "throughput_within_sla_rps", "design": "prfaas", "against": "naive"}]}
    spec.update(changes)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path, spec


def test_interval_is_the_student_t_interval_over_seeds():
    iv = interval([1.0, 2.0, 3.0])
    assert iv["mean"] == 2.0 and iv["n"] == 3
    half = 4.303 * 1.0 / math.sqrt(3)  # t(0.975, 2 df) x sd / sqrt(n)
    assert iv["ci95"] == pytest.approx([2.0 - half, 2.0 + half])
    assert interval([5.0]) == {"mean": 5.0, "ci95": None, "n": 1}
    assert interval([None, float("nan")])["mean"] is None


def test_designs_side_by_side_at_their_best_splits_with_claims_judged(tmp_path):
    path, _ = _spec(tmp_path)
    out = tmp_path / "out"
    res = run_cli("designs", path, "-j", "1", "--out", out, "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    result = json.loads(res.stdout)
    assert sorted(p.name for p in out.iterdir()) == ["designs.json", "designs.md", "designs.png"]
    assert json.loads((out / "designs.json").read_text())["claims"] == result["claims"]
    d = result["designs"]
    assert set(d) == {"naive", "prfaas", "homogeneous"}
    assert d["homogeneous"]["best"]["chips"] == {"H20": 48} and d["prfaas"]["best"]["chips"].keys() == {"H20", "H200"}
    for name, des in d.items():
        assert len(des["per_seed"]) == 2
        thr = [s["throughput_within_sla_rps"] for s in des["per_seed"]]
        iv = des["metrics"]["throughput_within_sla_rps"]
        assert iv["mean"] == pytest.approx(sum(thr) / 2)
        assert iv["ci95"][0] <= iv["mean"] <= iv["ci95"][1]
    # the common load is the spec's fraction of the smallest mean capacity, so every design carries it
    smallest = min(des["metrics"]["throughput_within_sla_rps"]["mean"] for des in d.values())
    assert result["common_load_rps"] == pytest.approx(0.5 * smallest)
    assert d["naive"]["metrics"]["wan_egress_gbps"]["mean"] > 0 and d["homogeneous"]["metrics"]["wan_egress_gbps"]["mean"] == 0
    [claim] = result["claims"]
    want = [100 * (a["throughput_within_sla_rps"] / b["throughput_within_sla_rps"] - 1)
            for a, b in zip(d["prfaas"]["per_seed"], d["naive"]["per_seed"])]
    assert claim["simulated_values"] == pytest.approx(want)
    # capacities from 300 requests are no steady-state evidence: no verdict, and what settles it
    assert claim["verdict"] == "inconclusive" and "12,000" in claim["unsteady"]
    assert all(s["cost_per_mtok_usd"] == pytest.approx(s["cost_per_1k_requests_usd"] * 1000 / s["output_tokens_per_request"])
               for des in d.values() for s in des["per_seed"])
    assert "| prfaas |" in (out / "designs.md").read_text()


@pytest.mark.parametrize("changes, says, field", [
    ({"reference": "nope"}, "'nope' is not among the designs", "reference"),
    ({"seeds": 0}, "greater than or equal to 1", "seeds"),
    ({"budget": {"H200": 16}}, "design naive uses chips ['H20', 'H200'] but its budget names ['H200']", "designs.naive.budget"),
    ({"claims": [{"id": "x", "figure": "f", "article": 1, "metric": "speed", "design": "prfaas", "against": "naive"}]},
     "metric", "claims.0.metric"),
    ({"claims": [{"id": "x", "figure": "f", "article": 1, "metric": "bcr", "design": "ghost", "against": "naive"}]},
     "'ghost' is not among the designs", "claims.0.design"),
    ({"claims": [], "designs": {"naive": {"scenario": str(PRFAAS / "naive-heterogeneous-pd.yaml")},
                                "other-sla": {"scenario": "TIGHT"}}},
     "its sla differs from the reference design naive's", "designs.other-sla.scenario"),
    ({"claims": [], "designs": {"naive": {"scenario": str(PRFAAS / "naive-heterogeneous-pd.yaml")},
                                "missing": {"scenario": "no/such.yaml"}}}, "no/such.yaml", "designs.missing.scenario"),
])
def test_a_bad_spec_is_refused_in_one_line_before_anything_runs(tmp_path, changes, says, field):
    tight = tmp_path / "prfaas-tight-sla.yaml"  # the same workload under another SLA
    tight.write_text(f"extends: {PRFAAS / 'prfaas.yaml'}\nsla: {{ttft_ms: 1000}}\n")
    for entry in changes.get("designs", {}).values():
        if entry["scenario"] == "TIGHT":
            entry["scenario"] = str(tight)
    path, _ = _spec(tmp_path, **changes)
    res = run_cli("designs", path, "--out", tmp_path / "out")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    line = res.stderr.strip().splitlines()[-1]
    assert str(path) in line and says in line and field in line, line
    assert not (tmp_path / "out").exists()


def test_ctrl_c_after_the_split_search_keeps_the_best_splits(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    path, _ = _spec(tmp_path, requests=12000, seeds=3, iterations=3)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "pddbench", "designs", str(path), "-j", "1", "--out", str(out)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 600
    while not (out / "designs.json").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert "Traceback" not in err
    kept = json.loads((out / "designs.json").read_text())
    if proc.returncode == 0:  # the machine finished the rest before the signal landed
        assert kept["complete"] is True
        return
    assert proc.returncode == 130, err[-2000:]
    assert kept["interrupted"] is True and kept["complete"] is False
    assert set(kept["best_splits"]) == {"naive", "prfaas", "homogeneous"}
    assert not (out / ".claim").exists() and "kept" in err.strip().splitlines()[-1]


def test_along_an_assumption_finds_where_the_winner_changes(tmp_path):
    path, _ = _spec(tmp_path, claims=[], seeds=1, designs={
        "naive": {"scenario": str(PRFAAS / "naive-heterogeneous-pd.yaml")},
        "prfaas": {"scenario": str(PRFAAS / "prfaas.yaml")},
        "same-dc": {"scenario": str(PRFAAS / "same-dc-heterogeneous-pd.yaml")}})
    out = tmp_path / "out"
    res = run_cli("designs", path, "-j", "1", "--along", "network.wan.rate_gbps=0.1..100", "--points", "3",
                  "--steps", "2", "--out", out, "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    along = json.loads(res.stdout)["along"]
    assert (out / "designs_along.png").is_file() and "designs_along.png" in (out / "designs.md").read_text()
    values = [p["value"] for p in along["probes"]]
    assert values == sorted(values) and values[0] == 0.1 and values[-1] == pytest.approx(100)
    assert along["log"] and any(v == pytest.approx(math.sqrt(0.1 * 100)) for v in values)  # the geometric middle
    by_value = {p["value"]: p["designs"] for p in along["probes"]}

    def best(v):
        rows = by_value[v]
        return max(rows, key=lambda n: rows[n]["throughput_within_sla_rps"])
    for c in (c for c in along["crossovers"] if c["criterion"] == "throughput"):
        lo, hi = c["bracket"]
        assert lo < c["value"] < hi and best(lo) == c["below"] and best(hi) == c["above"] != c["below"]
    # the line limits only the designs whose KV crosses it: same-DC PD carries the same at every rate
    same = {round(p["designs"]["same-dc"]["throughput_within_sla_rps"], 9) for p in along["probes"]}
    assert len(same) == 1
    naive = [p["designs"]["naive"]["throughput_within_sla_rps"] for p in along["probes"]]
    assert naive[0] < naive[-1]


@pytest.mark.parametrize("along, says", [("nope=1..2", "--along nope"), ("sla.tpot_ms=5..1", "finite LO < HI"),
                                         ("workload.synth=1..2", "not a number"),
                                         ("sla.tpot_ms=-5..10", "sla.tpot_ms=-5")])
def test_a_bad_along_is_refused_before_anything_runs(tmp_path, along, says):
    path, _ = _spec(tmp_path)
    res = run_cli("designs", path, "--along", along, "--out", tmp_path / "out")
    assert res.returncode == 2 and "Traceback" not in res.stderr and says in res.stderr, res.stderr
    assert not (tmp_path / "out").exists()


def test_the_size_is_estimated_and_refused_before_anything_runs(tmp_path):
    path, _ = _spec(tmp_path)
    res = run_cli("designs", path, "--along", "sla.tpot_ms=40..400", "--max-searches", "5", "--out", tmp_path / "out")
    assert res.returncode == 2 and "--max-searches" in res.stderr and "capacity searches" in res.stderr, res.stderr
    assert not (tmp_path / "out").exists()


def test_along_the_hit_mix_blends_the_two_histograms(tmp_path):
    from pddbench.reproduce.crossovers import hit_mix_hist
    from pddbench.reproduce.designs_along import with_value
    from pddbench.schema.scenario import load_scenario
    from pddbench.workload.synth import MOONCAKE_LIKE_HIST, PDD_LIKE_HIST

    sc = load_scenario(PRFAAS / "prfaas.yaml")
    assert list(with_value(sc, "workload.hit_mix_pdd_share", 1.0).workload.synth.target_hist) == pytest.approx(PDD_LIKE_HIST)
    assert list(with_value(sc, "workload.hit_mix_pdd_share", 0.0).workload.synth.target_hist) == pytest.approx(MOONCAKE_LIKE_HIST)
    assert sum(hit_mix_hist(0.3)) == pytest.approx(1.0)
    line = with_value(sc, "network.wan.rate_gbps", 3.0).network.wan
    assert line.rate_gbps == 3.0 and line.delay_ms == sc.network.wan_profile().delay_ms  # the same line, another rate
