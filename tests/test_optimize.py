"""`pddbench optimize`: candidate splits respect each chip kind's budget, the best is the maximum
of the measured candidates, and the best split beats a deliberately bad one."""

import json

import pytest

from pddbench.measure.capacity import search_capacity
from pddbench.core.errors import UserError
from pddbench.sweep.optimize import candidate_splits, chips_used, optimize, parse_budget, with_split
from pddbench.schema.scenario import load_scenario
from pddbench.sweep.executors import InlineExecutor
from tests.conftest import REPO, run_cli

PAPER = REPO / "scenarios" / "paper"
SMALL = ["workload.synth.requests=300"]


def test_splits_are_maximal_and_within_budget():
    base = load_scenario(PAPER / "same-dc-pd.yaml")
    splits = candidate_splits(base, {"A": 88}, [8])
    assert len(splits) == 10 and all(chips_used(base, s) == {"A": 88} for s in splits)
    pdd = load_scenario(PAPER / "pdd.yaml")
    budget = parse_budget("A=43,B=32", pdd)
    splits = candidate_splits(pdd, budget, [7, 8])
    assert splits and all(u <= budget[c] for s in splits for c, u in chips_used(pdd, s).items())
    assert all(s["main"]["instances"] * s["main"]["chips_per_instance"] > 32 - s["main"]["chips_per_instance"]
               for s in splits)  # MD takes what chip B's budget allows
    assert {"prefill": {"instances": 5, "chips_per_instance": 7}, "relay": {"instances": 1, "chips_per_instance": 8},
            "main": {"instances": 4, "chips_per_instance": 8}} in splits  # the shipped PDD split is one
    with pytest.raises(UserError, match="one budget each"):
        parse_budget("75", pdd)
    with pytest.raises(UserError, match="no budget for chip"):
        parse_budget("A=43", pdd)
    with pytest.raises(UserError, match="no split fits"):
        candidate_splits(base, {"A": 8}, [8])


def test_best_is_the_maximum_and_beats_a_bad_split():
    sc = load_scenario(PAPER / "same-dc-pd.yaml", SMALL)
    res = optimize(sc, {"A": 32}, [8], InlineExecutor(), iterations=3, requests=300)
    caps = {r["label"]: r["full"]["throughput_within_sla_rps"] for r in res["candidates"]}
    assert len(caps) == 3 and res["best"]["throughput_within_sla_rps"] == max(caps.values())
    assert res["best"]["label"] == max(caps, key=caps.get) and res["best"]["chips"]["A"] <= 32
    assert res["best"]["bound_by"] in ("ttft", "tpot", "instability")
    bad = min(caps, key=caps.get)
    assert bad != res["best"]["label"] and caps[bad] < res["best"]["throughput_within_sla_rps"]
    # a candidate's figure is what `pddbench capacity` measures for that split
    row = next(r for r in res["candidates"] if r["label"] == bad)
    assert search_capacity(with_split(sc, row["split"]), 3)["throughput_within_sla_rps"] == caps[bad]


def test_coarse_stage_refines_only_the_top(tmp_path):
    res = run_cli("optimize", PAPER / "same-dc-pd.yaml", "--budget", "A=40", *[x for s in SMALL for x in ("--set", s)],
                  "--iterations", "3", "--coarse-requests", "150", "--refine-top", "2", "--out", tmp_path / "o")
    assert res.returncode == 0, res.stderr
    out = json.loads((tmp_path / "o" / "optimize.json").read_text())
    assert (tmp_path / "o" / "optimize.png").is_file()
    rows = out["candidates"]
    assert len(rows) == 4 and all(r["coarse"] for r in rows)
    full = [r for r in rows if r["full"]]
    assert len(full) == 2 and out["search"]["coarse_requests"] == 150
    top2 = sorted(rows, key=lambda r: -r["coarse"]["throughput_within_sla_rps"])[:2]
    assert {r["label"] for r in full} == {r["label"] for r in top2}
    assert out["best"]["throughput_within_sla_rps"] == max(r["full"]["throughput_within_sla_rps"] for r in full)
