"""`make nightly`'s per-host baselines (pddbench/gate/nightly.py), without live vLLM: the host key,
record vs compare, the fidelity regression rule on fabricated fidelity.json files, the live part's
per-host folders on the shipped (migrated) live baselines, and the sim part end to end (record,
compare, a worsened baseline)."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pddbench.core.errors import UserError
from pddbench.gate import nightly as nt
from pddbench.gate.gate import HARDWARE
from pddbench.core.io import write_json
from pddbench.core.loading import read_json
from tests.conftest import REPO

AMD = {"cpu_model": "AMD EPYC", "cpu_isa": "avx2", "cpu_cores": 2, "machine": "x86_64", "git_commit": "a"}
XEON = {"cpu_model": "Intel(R) Xeon(R) Platinum 8488C", "cpu_isa": "avx512", "cpu_cores": 2, "git_commit": "b"}
SHIPPED_LIVE = REPO / "results" / "baselines" / "v1" / "live"
FIDELITY_CFG = {"percentiles": [10, 50, 90, 99], "margin_pct": 10}
SETTINGS = {"scenario": "live/same-dc-pd", "overrides": ["workload.synth.requests=60"], "repeats": 2}


# -- host key ----------------------------------------------------------------------------------

def test_host_key_names_model_isa_and_cores():
    assert nt.host_key(AMD) == "amd-epyc-avx2-2cpus"
    assert nt.host_key(XEON) == "intel-xeon-platinum-8488c-avx512-2cpus"
    assert nt.host_key({}) == "unknown-unknown-unknowncpus"
    assert nt.host_key(None) == nt.host_key({"cpu_model": "", "cpu_isa": None})
    for prov in (AMD, XEON, {}, {"cpu_model": "  ../../etc/passwd ", "cpu_isa": "x/y", "cpu_cores": 8}):
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", nt.host_key(prov)), prov  # one safe folder name


def test_host_key_differs_exactly_where_the_gate_sees_other_hardware():
    """The key is made of the gate's HARDWARE fields: a change of any of them is another host, a
    change of anything else (commit, load, python) is the same host."""
    base = nt.host_key(AMD)
    for field, other in (("cpu_model", "AMD EPYC 9R14"), ("cpu_isa", "avx512"), ("cpu_cores", 4)):
        assert field in HARDWARE
        assert nt.host_key({**AMD, field: other}) != base, field
    for field, other in (("git_commit", "c"), ("load_avg_1m_at_start", 3.1), ("python", "3.12"), ("machine", "arm")):
        assert nt.host_key({**AMD, field: other}) == base, field


def test_this_hosts_key_comes_from_the_recorded_provenance():
    from pddbench.core.provenance import provenance

    assert nt.host_key(provenance()) == nt.host_key({k: provenance()[k] for k in HARDWARE})


def test_run_provenance_reads_repeats_then_summary(tmp_path):
    rep, run = tmp_path / "rep", tmp_path / "run"
    rep.mkdir()
    run.mkdir()
    write_json(rep / "repeats.json", {"provenance": XEON, "runs": []})
    write_json(rep / "summary.json", {"provenance": AMD})
    write_json(run / "summary.json", {"provenance": AMD})
    assert nt.run_provenance(rep) == XEON and nt.run_provenance(run) == AMD
    (run / "summary.json").write_text('{"provenance": {"cpu_isa": NaN}}')  # strict reader: refused
    with pytest.raises(UserError):
        nt.run_provenance(run)


# -- record vs compare -------------------------------------------------------------------------

def test_plan_records_where_there_is_no_baseline(tmp_path):
    base = tmp_path / "live" / "host" / "pdd"
    assert nt.plan(base, update=False) == "record" and nt.plan(base, update=True) == "record"
    base.mkdir(parents=True)
    assert nt.plan(base, update=False) == "record"  # an empty folder holds no baseline
    (base / "repeats.json").write_text("{}")
    assert nt.plan(base, update=False) == "compare" and nt.plan(base, update=True) == "update"
    shutil.rmtree(base)
    base.write_text("x")
    with pytest.raises(UserError, match="is a file"):
        nt.plan(base, update=False)


def test_record_run_copies_gate_inputs_and_leaves_no_temporary(tmp_path):
    cand = tmp_path / "cand"
    (cand / "model").mkdir(parents=True)
    (cand / "summary.json").write_text("{}")
    (cand / "fig.png").write_bytes(b"png")
    (cand / "model" / "w.bin").write_bytes(b"w")
    base = tmp_path / "baselines" / "live" / "h" / "x"
    nt.record_run(cand, base)
    assert sorted(p.name for p in base.iterdir()) == ["summary.json"]
    assert [p.name for p in base.parent.iterdir()] == ["x"]


# -- the fidelity rule -------------------------------------------------------------------------

def _doc(errors: dict[int, tuple[float, float, float]]) -> dict:
    """A fidelity.json with the fields `pddbench fidelity` writes per TTFT percentile."""
    return {"ttft": [{"percentile": q, "live_ttft_ms": 100.0, "sim_ttft_ms": 100.0 + e, "error_ms": e,
                      "error_pct": e, "live_ci_ms": [90.0, 110.0], "sim_ci_ms": [95.0, 105.0],
                      "error_pct_ci": [lo, hi], "live_spread_ms": 10.0, "within_live_spread": False}
                     for q, (e, lo, hi) in errors.items()], "max_abs_error_pct": max(abs(v[0]) for v in errors.values())}


def _status(recorded, current, margin=10.0):
    rows = nt.fidelity_rows(_doc({50: recorded}), _doc({50: current}), [50], margin)
    return rows[0]["status"], rows[0]["limit_abs_error_pct"]


def test_fidelity_rule_recorded_error_plus_spread_plus_margin():
    rec = (-30.0, -40.0, -20.0)  # |error| 30, spread (half the interval) 10: limit 30 + 10 + 10 = 50
    assert _status(rec, (-49.0, -60, -40)) == ("within", 50.0)
    assert _status(rec, (-50.0, -60, -40)) == ("within", 50.0)  # at the limit: not beyond it
    assert _status(rec, (-51.0, -60, -40))[0] == "regression"
    assert _status(rec, (51.0, 40, 60))[0] == "regression"  # the other side, as far off
    assert _status(rec, (45.0, 40, 60))[0] == "within"
    assert _status(rec, (-10.0, -15, -5))[0] == "improved"
    assert _status(rec, (-51.0, -60, -40), margin=0.0)[0] == "regression"
    assert _status((-30.0, -60.0, 0.0), (-51.0, -60, -40), margin=0.0)[0] == "within"  # a wider recorded spread


def test_fidelity_rule_judges_each_gated_percentile(tmp_path):
    base = _doc({10: (-30, -35, -25), 50: (5, 0, 10), 90: (20, 10, 30), 99: (40, 0, 80)})
    cand = _doc({10: (-60, -65, -55), 50: (12, 0, 20), 90: (20, 10, 30), 99: (85, 0, 100)})
    rows = nt.fidelity_rows(base, cand, [10, 50, 90, 99], 10)
    assert {r["percentile"]: r["status"] for r in rows} == {10: "regression", 50: "within", 90: "within",
                                                            99: "within"}
    assert nt.fidelity_rows(base, cand, [50, 90], 10)[0]["status"] == "within"  # p10 not gated: not judged


@pytest.mark.parametrize("bad, match", [
    ({"ttft": "x"}, "no 'ttft' list"),
    ({}, "no 'ttft' list"),
    ({"ttft": [{"percentile": 50, "error_pct": None, "error_pct_ci": [0, 1]}]}, "finite error_pct"),
    ({"ttft": [{"percentile": 50, "error_pct": 1.0, "error_pct_ci": [0]}]}, "two-number"),
    ({"ttft": [{"percentile": 50, "error_pct": True, "error_pct_ci": [0, 1]}]}, "finite error_pct"),
    ({"ttft": [{"percentile": 10, "error_pct": 1.0, "error_pct_ci": [0, 1]}]}, "no TTFT p50 row"),
])
def test_fidelity_rule_refuses_unusable_files(bad, match):
    good = _doc({50: (1.0, 0.0, 2.0)})
    for base, cand in ((bad, good), (good, bad)):
        with pytest.raises(UserError, match=match):
            nt.fidelity_rows(base, cand, [50], 10)


def _fidelity_out(folder, scale: float):
    """A fidelity output folder from the real ci_table (the command's own rows): the twin's TTFT is
    the live one times `scale` (with noise), over two repeats."""
    from pddbench.measure.fidelity import ci_table

    rng = np.random.default_rng(0)
    groups = []
    for _ in range(2):
        live = rng.lognormal(5, 0.8, 60)
        groups.append((live, live * scale * rng.lognormal(0, 0.1, 60)))
    rows = ci_table(groups, n=200)
    folder.mkdir(parents=True)
    write_json(folder / "fidelity.json", {"ttft": rows, "repeats": 2,
                                          "max_abs_error_pct": max(abs(r["error_pct"]) for r in rows)})
    (folder / "fidelity.csv").write_text("percentile\n")
    return folder


def _suite(tmp_path, update=False):
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    return nt.Suite(out, tmp_path / "baselines", tmp_path / "hist", update, None)


def test_fidelity_part_records_then_compares_then_fails_a_regression(tmp_path, capsys):
    s = _suite(tmp_path)
    host = nt.host_key(XEON)
    base = s.baselines / "fidelity" / host / "same-dc-pd"
    s.gate_fidelity("same-dc-pd", _fidelity_out(tmp_path / "f0", 0.7), base, host, SETTINGS, FIDELITY_CFG, XEON)
    assert [c["failure"] for c in s.cases] == [None]
    assert f"baseline recorded for {host}, nothing compared" in s.cases[0]["output"]
    assert f"baseline recorded for {host}, nothing compared" in capsys.readouterr().err
    assert sorted(p.name for p in base.iterdir()) == ["fidelity.csv", "fidelity.json", "settings.json"]
    assert read_json(base / "settings.json", "t") == SETTINGS
    assert read_json(base.parent / "host.json", "t")["cpu_isa"] == "avx512"

    s.gate_fidelity("same-dc-pd", _fidelity_out(tmp_path / "f1", 0.7), base, host, SETTINGS, FIDELITY_CFG)
    assert s.cases[-1]["failure"] is None and "p50: error" in s.cases[-1]["output"]
    s.gate_fidelity("same-dc-pd", _fidelity_out(tmp_path / "f2", 0.2), base, host, SETTINGS, FIDELITY_CFG)
    assert s.cases[-1]["failure"] and "p50" in s.cases[-1]["failure"] and "regression" in s.cases[-1]["output"]
    assert "FAIL" in s.sections[-1]

    other = {**SETTINGS, "repeats": 3}  # errors at other settings do not compare
    s.gate_fidelity("same-dc-pd", _fidelity_out(tmp_path / "f3", 0.7), base, host, other, FIDELITY_CFG)
    assert "--update-baselines" in s.cases[-1]["failure"]

    s = _suite(tmp_path, update=True)  # accepting the worse twin and the new settings
    s.gate_fidelity("same-dc-pd", tmp_path / "f2", base, host, other, FIDELITY_CFG)
    assert s.cases[-1]["failure"] is None and "accepted" in s.cases[-1]["output"]
    assert read_json(base / "fidelity.json", "t") == read_json(tmp_path / "f2" / "fidelity.json", "t")
    assert read_json(base / "settings.json", "t") == other
    assert [p.name for p in base.parent.iterdir() if p.name.startswith(".")] == []


def test_fidelity_part_names_a_broken_baseline(tmp_path):
    s = _suite(tmp_path)
    base = s.baselines / "fidelity" / "h" / "pdd"
    base.mkdir(parents=True)
    write_json(base / "settings.json", SETTINGS)
    (base / "fidelity.json").write_text('{"ttft": [], "ttft": []}')  # duplicate key: strict reader refuses
    s.gate_fidelity("pdd", _fidelity_out(tmp_path / "f", 0.7), base, "h", SETTINGS, FIDELITY_CFG)
    assert "fidelity.json" in s.cases[-1]["failure"]


# -- the live part's per-host folders ----------------------------------------------------------

def _with_provenance(src, dst, prov):
    shutil.copytree(src, dst)
    for path in [dst / "repeats.json", *dst.glob("repeat-*/summary.json")]:
        doc = json.loads(path.read_text())
        doc["provenance"] = {**doc["provenance"], **prov}
        path.write_text(json.dumps(doc))
    return dst


def test_shipped_live_baselines_sit_under_their_own_host_key():
    hosts = [p for p in SHIPPED_LIVE.iterdir() if p.is_dir()]
    assert hosts, "no per-host live baselines shipped"
    for host in hosts:
        assert read_json(host / "host.json", "t")["host"] == host.name
        runs = [p for p in host.iterdir() if p.is_dir()]
        assert runs
        for run in runs:
            assert nt.host_key(nt.run_provenance(run)) == host.name, run


def test_live_part_records_a_new_hosts_baseline_then_compares(tmp_path):
    shipped = next(p for p in SHIPPED_LIVE.iterdir() if p.is_dir()) / "same-dc-pd"
    cand = _with_provenance(shipped, tmp_path / "cand", XEON)  # the same figures, from an AVX-512 host
    s = _suite(tmp_path)
    prov = nt.run_provenance(cand)
    host = nt.host_key(prov)
    base = s.baselines / "live" / host / "same-dc-pd"
    s.gate_against("live/same-dc-pd", cand, base, host, prov)
    assert s.results == [] and s.cases[-1]["failure"] is None
    assert s.recorded == [f"live/same-dc-pd: baseline recorded for {host}, nothing compared: {base}"]
    assert (base / "repeats.json").is_file() and (base.parent / "host.json").is_file()
    s.gate_against("live/same-dc-pd", cand, base, host, prov)  # the second night: compared, here the same runs
    assert len(s.results) == 1 and s.results[0]["mode"] == "statistical" and s.results[0]["regressions"] == 0


# -- the sim part, end to end ------------------------------------------------------------------

def _nightly(tmp_path, out):
    """The nightly's sim part on the real config cut to one small scenario, baselines in tmp_path."""
    from pddbench.core.loading import load_yaml

    real = load_yaml(nt.DEFAULT_CONFIG.read_text(), str(nt.DEFAULT_CONFIG))
    real["sim"] = {**real["sim"], "scenarios": ["paper/same-dc-pd"], "overrides": ["workload.synth.requests=100"]}
    (tmp_path / "nightly.json").write_text(json.dumps(real))
    return subprocess.run([sys.executable, "-m", "pddbench.gate.nightly", "--config", tmp_path / "nightly.json",
                           "--only", "sim", "--baselines", tmp_path / "baselines", "--out", tmp_path / out,
                           "--history", tmp_path / "hist"], capture_output=True, text=True, cwd=REPO, timeout=300)


def test_nightly_sim_part_records_compares_and_fails_a_worse_result(tmp_path):
    base = tmp_path / "baselines" / "sim" / "same-dc-pd"
    res = _nightly(tmp_path, "n1")
    assert res.returncode == 0, res.stderr
    assert "baseline recorded for every host" in res.stderr and "nothing compared" in res.stderr
    md = (tmp_path / "n1" / "nightly.md").read_text()
    assert "passed; 1 baseline(s) recorded" in md and f"nothing compared: {base}" in md
    assert (base / "records.parquet").is_file() and (base / "summary.json").is_file()

    res = _nightly(tmp_path, "n2")
    assert res.returncode == 0, res.stderr
    md = (tmp_path / "n2" / "nightly.md").read_text()
    assert "identical to the baseline" in md and "baseline recorded" not in md

    summary = json.loads((base / "summary.json").read_text())
    summary["ttft_ms"]["p50"] /= 2  # the baseline was twice as fast: tonight's run is a regression
    (base / "summary.json").write_text(json.dumps(summary))
    res = _nightly(tmp_path, "n3")
    assert res.returncode == 1, res.stderr
    md = (tmp_path / "n3" / "nightly.md").read_text()
    assert "FAILED" in md and "`ttft_ms.p50`" in md


@pytest.mark.parametrize("cfg, match", [
    ({"percentiles": [55]}, "fidelity.percentiles"),
    ({"percentiles": []}, "fidelity.percentiles"),
    ({"percentiles": "50"}, "fidelity.percentiles"),
    ({"margin_pct": "10"}, "fidelity.margin_pct"),
    ({"margin_pct": -1}, "fidelity.margin_pct"),
    ({"margin_pct": True}, "fidelity.margin_pct"),
])
def test_fidelity_rule_settings_are_checked(cfg, match):
    assert nt.fidelity_rule({}) == ([10, 50, 90, 99], 10.0)
    assert nt.fidelity_rule(nt.load_config(nt.DEFAULT_CONFIG, ["fidelity"])["fidelity"]) == ([10, 50, 90, 99], 10.0)
    with pytest.raises(UserError, match=match):
        nt.fidelity_rule(cfg)


def test_update_replaces_an_unreadable_fidelity_baseline(tmp_path):
    s = _suite(tmp_path, update=True)
    base = s.baselines / "fidelity" / "h" / "pdd"
    base.mkdir(parents=True)
    (base / "fidelity.json").write_text("{broken")
    s.gate_fidelity("pdd", _fidelity_out(tmp_path / "f", 0.7), base, "h", SETTINGS, FIDELITY_CFG)
    assert s.cases[-1]["failure"] is None and "could not be compared" in s.cases[-1]["output"]
    assert read_json(base / "settings.json", "t") == SETTINGS
    s = _suite(tmp_path)  # and a candidate the rule cannot read is neither recorded nor compared
    (tmp_path / "f" / "fidelity.json").write_text('{"ttft": [{"percentile": 50}]}')
    s.gate_fidelity("pdd", tmp_path / "f", s.baselines / "fidelity" / "h" / "new", "h", SETTINGS, FIDELITY_CFG)
    assert "error_pct" in s.cases[-1]["failure"] and not (s.baselines / "fidelity" / "h" / "new").exists()


# -- the bench part: per-host benchmark baselines --------------------------------------------------

SHIPPED_BENCH = REPO / "results" / "baselines" / "v1" / "bench"
MACHINE = "Linux-CPython-3.11-64bit"  # pytest-benchmark's machine id, fixed for the fabricated runs
BENCH_CFG = {"max_slowdown_pct": 20, "gated": ["test_bench_trace.py", "test_bench_sim.py"]}
TRACE, SIM, SWEEP = ("benchmarks/test_bench_trace.py::test_parse", "benchmarks/test_bench_sim.py::test_loop",
                     "benchmarks/test_bench_sweep.py::test_scaling")  # the last one not gated


def _machine_info(prov: dict, flags: list[str]) -> dict:
    """pytest-benchmark's machine_info (py-cpuinfo's fields) for a host with `prov`'s CPU."""
    return {"machine": "x86_64", "cpu": {"brand_raw": prov["cpu_model"], "count": prov["cpu_cores"], "flags": flags}}


def _saved_run(prov: dict, mins: dict[str, float], flags=("sse2", "avx", "avx2"), stick: float | None = 0.005) -> dict:
    """A run as pytest-benchmark saves it (only the fields the gate reads, plus what a reader sees),
    each benchmark timed beside a yardstick of `stick` seconds (None: none, as before the yardstick)."""
    return {"machine_info": _machine_info(prov, list(flags)), "commit_info": {"id": "a"}, "version": "5.3.1",
            "benchmarks": [{"fullname": name, "name": name.split("::")[1], "group": None,
                            "stats": {"min": m, "max": m * 1.1, "mean": m * 1.05, "rounds": 5},
                            "extra_info": {} if stick is None else {"yardstick_min_s": stick}}
                           for name, m in mins.items()]}


class FakePytest:
    """Stands in for the pytest subprocess: saves `doc` where pytest-benchmark would (the storage
    folder of the command line, under MACHINE, numbered after what is there), returns (rc, text),
    and keeps each command line with the baseline copy it found in the store."""

    def __init__(self, doc: dict | None, rc: int = 0, text: str = "1 passed"):
        self.doc, self.rc, self.text, self.calls = doc, rc, text, []

    def __call__(self, cmd, echo):
        store = [a for a in cmd if a.startswith("--benchmark-storage=file://")]
        assert len(store) == 1, cmd
        folder = Path(store[0][len("--benchmark-storage=file://"):]) / MACHINE
        primed = folder / "0001_baseline.json"
        self.calls.append({"cmd": cmd, "primed": json.loads(primed.read_text()) if primed.is_file() else None})
        if self.doc is not None:
            n = len(list(folder.glob("*.json"))) + 1
            name = "baseline" if "--benchmark-save=baseline" in cmd else "0123abc_20260101_000000"
            write_json(folder / f"{n:04d}_{name}.json", self.doc)
        return self.rc, self.text


@pytest.fixture
def bench_host(monkeypatch):
    """This host's CPU for the bench part (AMD unless a test sets another) and a fixed machine id."""
    hw = {"prov": AMD}
    monkeypatch.setattr(nt, "this_hardware", lambda: dict(hw["prov"]))
    monkeypatch.setattr(nt, "bench_machine", lambda: MACHINE)
    return hw


def _bench(tmp_path, monkeypatch, fake, update=False, store="s"):
    monkeypatch.setattr(nt, "_pytest", fake)
    return nt.run_bench(tmp_path / "baselines", tmp_path / store, BENCH_CFG, update)


def _base_doc(tmp_path, prov=AMD):
    return read_json(tmp_path / "baselines" / "bench" / nt.host_key(prov) / MACHINE / "0001_baseline.json", "t")


def test_bench_part_records_a_new_hosts_baseline_then_compares(tmp_path, monkeypatch, bench_host, capsys):
    """The nightly's bench part: the first run on a host records (the gated benchmarks only) and
    passes, saying so; the second compares against it with the fail rule; a regression fails."""
    run = _saved_run(AMD, {TRACE: 0.2, SIM: 0.01, SWEEP: 3.0})
    fake = FakePytest(run)
    monkeypatch.setattr(nt, "_pytest", fake)
    s = _suite(tmp_path)
    nt.part_bench(s, BENCH_CFG)
    host = nt.host_key(AMD)
    base = s.baselines / "bench" / host / MACHINE
    assert s.recorded == [f"bench: baseline recorded for {host}, nothing compared: {base}"]
    assert [c["failure"] for c in s.cases] == [None]
    assert f"baseline recorded for {host}, nothing compared" in capsys.readouterr().err
    cmd = fake.calls[-1]["cmd"]
    assert "--benchmark-save=baseline" in cmd and not any(a.startswith("--benchmark-compare") for a in cmd)
    assert [b["fullname"] for b in _base_doc(tmp_path)["benchmarks"]] == [TRACE, SIM]  # sweep: run, not gated
    assert read_json(base.parent / "host.json", "t") == {"host": host, **{k: AMD[k] for k in (*HARDWARE, "machine")}}
    assert sorted(p.name for p in base.parent.iterdir()) == [MACHINE, "host.json"]  # no temporary left
    assert (s.out / "bench.txt").read_text() == "1 passed"

    s = _suite(tmp_path)  # the second night: compared, against a copy of the recorded baseline
    s.out = tmp_path / "out2"
    s.out.mkdir()
    nt.part_bench(s, BENCH_CFG)
    cmd = fake.calls[-1]["cmd"]
    assert "--benchmark-compare=0001" in cmd and not any(a.startswith("--benchmark-compare-fail") for a in cmd)
    assert "--benchmark-timer=time.process_time" in cmd
    assert fake.calls[-1]["primed"] == _base_doc(tmp_path)
    assert s.recorded == [] and [c["failure"] for c in s.cases] == [None]
    assert "test_parse" in s.cases[-1]["output"] and "+0.0%" in s.cases[-1]["output"]

    fake.doc = _saved_run(AMD, {TRACE: 0.25, SIM: 0.01})  # 25 % slower at the same yardstick
    res = _bench(tmp_path, monkeypatch, fake, store="s3")
    assert res["action"] == "compare" and "slower relative to the yardstick than +20%" in res["failure"]
    assert "test_parse +25.0%" in res["failure"] and "test_loop" not in res["failure"]
    fake.rc, fake.text = 1, "1 failed"
    assert _bench(tmp_path, monkeypatch, fake, store="s4")["failure"] == "benchmarks failed (exit 1)"
    assert [b["stats"]["min"] for b in _base_doc(tmp_path)["benchmarks"]] == [0.2, 0.01]  # compare never writes


def test_bench_baseline_of_one_host_is_not_compared_on_another(tmp_path, monkeypatch, bench_host):
    """An AVX-512 Xeon beside the AMD baseline (same OS and Python): its own baseline is recorded,
    nothing is compared, the AMD one is left as it was."""
    amd = _bench(tmp_path, monkeypatch, FakePytest(_saved_run(AMD, {TRACE: 0.2})), store="s1")
    before = (amd["base"] / "0001_baseline.json").read_bytes()
    bench_host["prov"] = XEON
    fake = FakePytest(_saved_run(XEON, {TRACE: 0.9}, flags=("avx2", "avx512f")), rc=0)
    xeon = _bench(tmp_path, monkeypatch, fake, store="s2")
    assert xeon["action"] == "record" and xeon["failure"] is None and fake.calls[-1]["primed"] is None
    assert xeon["host"] == "intel-xeon-platinum-8488c-avx512-2cpus" != amd["host"]
    assert xeon["base"] == tmp_path / "baselines" / "bench" / xeon["host"] / MACHINE
    assert (amd["base"] / "0001_baseline.json").read_bytes() == before
    assert _base_doc(tmp_path, XEON)["benchmarks"][0]["stats"]["min"] == 0.9
    # and the key of the recorded run's own machine_info is the folder's (as for live baselines)
    assert nt.host_key(nt.bench_provenance(_base_doc(tmp_path, XEON)["machine_info"])) == xeon["host"]


def test_bench_update_compares_then_accepts(tmp_path, monkeypatch, bench_host):
    _bench(tmp_path, monkeypatch, FakePytest(_saved_run(AMD, {TRACE: 0.2})), store="s1")
    fake = FakePytest(_saved_run(AMD, {TRACE: 0.5, SIM: 0.01, SWEEP: 3.0}), rc=0, text="compared")
    res = _bench(tmp_path, monkeypatch, fake, update=True, store="s2")
    cmd = fake.calls[-1]["cmd"]
    assert res["action"] == "update" and res["failure"] is None
    assert "--benchmark-compare=0001" in cmd and not any(a.startswith("--benchmark-compare-fail") for a in cmd)
    assert [(b["fullname"], b["stats"]["min"]) for b in _base_doc(tmp_path)["benchmarks"]] == \
        [(TRACE, 0.5), (SIM, 0.01)]
    s = _suite(tmp_path, update=True)  # the nightly's report says so
    monkeypatch.setattr(nt, "_pytest", FakePytest(_saved_run(AMD, {TRACE: 0.4})))
    nt.part_bench(s, BENCH_CFG)
    assert s.cases[-1]["failure"] is None and "accepted as the new baseline" in s.cases[-1]["output"]
    assert _base_doc(tmp_path)["benchmarks"][0]["stats"]["min"] == 0.4


def test_bench_never_records_a_failed_or_empty_run(tmp_path, monkeypatch, bench_host):
    base = tmp_path / "baselines" / "bench" / nt.host_key(AMD) / MACHINE
    for i, (fake, why) in enumerate((
            (FakePytest(_saved_run(AMD, {TRACE: 0.2}), rc=1), "benchmarks failed (exit 1); nothing recorded"),
            (FakePytest(None), "pytest-benchmark saved no run; nothing recorded"),
            (FakePytest(_saved_run(AMD, {SWEEP: 3.0})), "none of the gated benchmarks"))):
        res = _bench(tmp_path, monkeypatch, fake, store=f"s{i}")
        assert res["action"] == "record" and why in res["failure"], res["failure"]
        assert not base.exists() and not [p for p in base.parent.parent.rglob(".*")]
    _bench(tmp_path, monkeypatch, FakePytest(_saved_run(AMD, {TRACE: 0.2})), store="ok")
    res = _bench(tmp_path, monkeypatch, FakePytest(_saved_run(AMD, {TRACE: 0.3}), rc=1), update=True, store="u")
    assert "nothing accepted" in res["failure"] and _base_doc(tmp_path)["benchmarks"][0]["stats"]["min"] == 0.2


def test_bench_folder_without_a_readable_baseline(tmp_path, monkeypatch, bench_host):
    """A host folder holding something else, or a broken baseline: compare fails before running
    (pytest-benchmark would pass without comparing), update replaces it without comparing."""
    base = tmp_path / "baselines" / "bench" / nt.host_key(AMD) / MACHINE
    base.mkdir(parents=True)
    (base / "notes.txt").write_text("x")
    for i, content in enumerate((None, "{broken", '{"a": 1, "a": 2}')):  # none, not JSON, a duplicate key
        if content is not None:
            (base / "0001_baseline.json").write_text(content)
        fake = FakePytest(_saved_run(AMD, {TRACE: 0.2}))
        res = _bench(tmp_path, monkeypatch, fake, store=f"c{i}")
        assert "holds no readable 0001_baseline.json" in res["failure"] and fake.calls == []
    fake = FakePytest(_saved_run(AMD, {TRACE: 0.2}))
    res = _bench(tmp_path, monkeypatch, fake, update=True, store="u")
    assert res["failure"] is None and "--benchmark-save=baseline" in fake.calls[-1]["cmd"]
    assert fake.calls[-1]["primed"] is None and _base_doc(tmp_path)["benchmarks"][0]["fullname"] == TRACE
    with pytest.raises(UserError, match="must be a new"):  # a store is a new folder: old runs are never mixed in
        _bench(tmp_path, monkeypatch, fake, store="u")
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="must be a new"):
        _bench(tmp_path, monkeypatch, fake, store="file")
    assert len(fake.calls) == 1  # refused before pytest ran


def test_bench_names_both_cpus_when_a_baseline_is_filed_under_the_wrong_host(tmp_path, monkeypatch, bench_host):
    other = {**AMD, "cpu_model": "AMD EPYC 9R14"}
    _bench(tmp_path, monkeypatch, FakePytest(_saved_run(AMD, {TRACE: 0.2})), store="s1")
    base = tmp_path / "baselines" / "bench" / nt.host_key(AMD) / MACHINE / "0001_baseline.json"
    write_json(base, _saved_run(other, {TRACE: 0.1}))  # copied in by hand from another CPU
    fake = FakePytest(_saved_run(AMD, {TRACE: 0.2}))
    res = _bench(tmp_path, monkeypatch, fake, store="s2")
    assert "'AMD EPYC 9R14', this host is 'AMD EPYC'" in res["failure"]


def test_bench_notes_gated_benchmarks_missing_from_the_baseline(tmp_path, monkeypatch, bench_host):
    _bench(tmp_path, monkeypatch, FakePytest(_saved_run(AMD, {TRACE: 0.2})), store="s1")
    res = _bench(tmp_path, monkeypatch, FakePytest(_saved_run(AMD, {TRACE: 0.2, SIM: 0.01, SWEEP: 1.0})),
                 store="s2")
    assert res["failure"] is None and f"not in the baseline, not compared: {SIM} " in res["output"]


@pytest.mark.parametrize("cfg, match", [
    ({"gated": []}, "bench.gated"),
    ({"gated": "test_bench_sim.py"}, "bench.gated"),
    ({"gated": [""]}, "bench.gated"),
    ({"gated": ["test_bench_nope.py"]}, "no benchmarks/test_bench_nope.py"),
    ({"gated": ["test_bench_sim.py"], "compare_fail": "min:20%"}, "bench.compare_fail: gone"),
    ({"gated": ["test_bench_sim.py"], "max_slowdown_pct": 0}, "bench.max_slowdown_pct"),
    ({"gated": ["test_bench_sim.py"], "max_slowdown_pct": -5}, "bench.max_slowdown_pct"),
    ({"gated": ["test_bench_sim.py"], "max_slowdown_pct": float("nan")}, "bench.max_slowdown_pct"),
    ({"gated": ["test_bench_sim.py"], "max_slowdown_pct": "20%"}, "bench.max_slowdown_pct"),
    ({"gated": ["test_bench_sim.py"], "max_slowdown_pct": True}, "bench.max_slowdown_pct"),
])
def test_bench_settings_are_checked(cfg, match):
    shipped = nt.load_config(nt.DEFAULT_CONFIG, ["bench"])["bench"]
    assert nt.bench_cfg(shipped) == (shipped["gated"], 20.0)
    with pytest.raises(UserError, match=match):
        nt.bench_cfg(cfg)


def test_bench_provenance_maps_machine_info_to_the_live_host_key():
    """A saved benchmark run's machine_info names the same host key as a live run's provenance on
    that CPU; what it lacks reads 'unknown' (never an exception)."""
    from pddbench.core.provenance import isa_level

    assert nt.host_key(nt.bench_provenance(_machine_info(AMD, ["sse2", "avx2"]))) == nt.host_key(AMD)
    xeon = _machine_info(XEON, ["avx2", "avx512f", "avx512bw"])
    assert nt.host_key(nt.bench_provenance(xeon)) == nt.host_key(XEON) == "intel-xeon-platinum-8488c-avx512-2cpus"
    for junk in (None, "x", {}, {"cpu": []}, {"cpu": {"flags": "avx2", "brand_raw": ""}}):
        assert nt.host_key(nt.bench_provenance(junk)) == "unknown-unknown-unknowncpus", junk
    assert [isa_level(f) for f in (["avx512f", "avx2"], ["avx2"], ["sse2"], [], None)] == \
        ["avx512", "avx2", "pre-avx2", "unknown", "unknown"]


def test_shipped_bench_baseline_sits_under_its_own_host_key():
    """The migrated baseline: each host folder's baselines were measured on that host (their
    machine_info maps to the folder's key) and hold exactly the gated files' benchmarks."""
    gated = {f"benchmarks/{f}" for f in nt.load_config(nt.DEFAULT_CONFIG, ["bench"])["bench"]["gated"]}
    hosts = [p for p in SHIPPED_BENCH.iterdir() if p.is_dir()]
    assert hosts, "no per-host bench baselines shipped"
    for host in hosts:
        assert read_json(host / "host.json", "t")["host"] == host.name
        machines = [p for p in host.iterdir() if p.is_dir()]
        assert machines and sorted(p.name for p in host.iterdir()) == sorted([*(m.name for m in machines), "host.json"])
        for machine in machines:
            doc = read_json(machine / "0001_baseline.json", "t")
            assert nt.host_key(nt.bench_provenance(doc["machine_info"])) == host.name, machine
            assert {b["fullname"].split("::")[0] for b in doc["benchmarks"]} == gated, machine


def test_bench_end_to_end_on_the_cheapest_gated_file(tmp_path):
    """Real pytest-benchmark, two runs of benchmarks/test_bench_trace.py (seconds each): the
    nightly's first bench part on this host records (with the yardstick timed beside each benchmark);
    with that baseline made 1000x faster at the same yardstick (a factor no machine noise reaches),
    `make bench`'s command compares against it and fails."""
    from pddbench.core.loading import load_yaml
    from pddbench.core.provenance import cpu_info

    cfg = load_yaml(nt.DEFAULT_CONFIG.read_text(), str(nt.DEFAULT_CONFIG))
    cfg["bench"] = {**cfg["bench"], "gated": ["test_bench_trace.py"]}
    (tmp_path / "nightly.json").write_text(json.dumps(cfg))
    common = ["--config", tmp_path / "nightly.json", "--baselines", tmp_path / "b"]

    def run(*args):
        return subprocess.run([sys.executable, "-m", "pddbench.gate.nightly", *args], capture_output=True, text=True,
                              cwd=REPO, timeout=300)

    res = run("--only", "bench", *common, "--out", tmp_path / "n1", "--history", tmp_path / "h")
    assert res.returncode == 0, res.stderr
    host = nt.host_key(cpu_info())
    assert f"baseline recorded for {host}, nothing compared" in (tmp_path / "n1" / "nightly.md").read_text()
    base = tmp_path / "b" / "bench" / host / nt.bench_machine() / "0001_baseline.json"
    doc = json.loads(base.read_text())
    assert [b["fullname"] for b in doc["benchmarks"]] == \
        ["benchmarks/test_bench_trace.py::test_parse_and_analyse_mooncake"]
    for b in doc["benchmarks"]:
        b["stats"] = {k: v / 1000 if k in ("min", "max", "mean", "median") else v for k, v in b["stats"].items()}
    base.write_text(json.dumps(doc))
    res = run("bench", *common, "--out", tmp_path / "s2")
    assert res.returncode == 1 and "FAILED: benchmark slower relative to the yardstick than +20%" in res.stderr
    assert "test_parse_and_analyse_mooncake +" in res.stderr
    assert "Comparing against benchmarks from" in res.stdout and "relative to the yardstick" in res.stdout


def test_bench_gates_relative_to_the_yardstick(tmp_path, monkeypatch, bench_host):
    """A host half as fast (yardstick twice as long) with every benchmark twice as long passes;
    the same absolute times on an unchanged host fail; a baseline without yardstick timings
    (recorded before it existed) is never a pass."""
    _bench(tmp_path, monkeypatch, FakePytest(_saved_run(AMD, {TRACE: 0.2, SIM: 0.01})), store="s1")
    slow_host = _bench(tmp_path, monkeypatch, FakePytest(_saved_run(AMD, {TRACE: 0.4, SIM: 0.02}, stick=0.010)),
                       store="s2")
    assert slow_host["failure"] is None and "0.50" in slow_host["output"]  # the host's speed now / then
    same_host = _bench(tmp_path, monkeypatch, FakePytest(_saved_run(AMD, {TRACE: 0.4, SIM: 0.01})), store="s3")
    assert "test_parse +100.0%" in same_host["failure"]
    within = _bench(tmp_path, monkeypatch, FakePytest(_saved_run(AMD, {TRACE: 0.239, SIM: 0.01})), store="s4")
    assert within["failure"] is None and "+19.5%" in within["output"]
    write_json(tmp_path / "baselines" / "bench" / nt.host_key(AMD) / MACHINE / "0001_baseline.json",
               _saved_run(AMD, {TRACE: 0.2}, stick=None))
    old = _bench(tmp_path, monkeypatch, FakePytest(_saved_run(AMD, {TRACE: 0.1})), store="s5")
    assert "no yardstick timing for benchmarks/test_bench_trace.py::test_parse" in old["failure"]
    assert "make bench-baseline" in old["failure"]


@pytest.mark.parametrize("stick", [0.0, -1.0, float("nan"), float("inf"), "5ms", True, None])
def test_a_bad_yardstick_is_no_yardstick(stick):
    from pddbench.gate.yardstick import normalised_changes

    good = _saved_run(AMD, {TRACE: 0.2})
    bad = _saved_run(AMD, {TRACE: 0.2})
    bad["benchmarks"][0]["extra_info"] = {"yardstick_min_s": stick}
    assert normalised_changes(good, bad, {TRACE})[0]["change_pct"] is None
    assert normalised_changes(bad, good, {TRACE})[0]["change_pct"] is None
    assert normalised_changes(good, good, {TRACE})[0]["change_pct"] == 0.0


def test_benchmarks_are_timed_beside_the_yardstick(tmp_path):
    """The real plugin: a benchmark run with the project's benchmarks/conftest.py saves the
    yardstick in each benchmark's extra_info, in the CPU-time units of the nightly's timer."""
    import subprocess
    import sys

    from pddbench.gate.yardstick import EXTRA_KEY

    shutil.copy(REPO / "benchmarks" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_tiny_bench.py").write_text("def test_tiny(benchmark):\n    benchmark(sum, range(1000))\n")
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path),
                          "--benchmark-enable", "--benchmark-timer=time.process_time",
                          f"--benchmark-json={tmp_path / 'out.json'}", "--rootdir", str(tmp_path)],
                         capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    bench = read_json(tmp_path / "out.json", "t")["benchmarks"][0]
    assert 0 < bench["extra_info"][EXTRA_KEY] < 5.0
