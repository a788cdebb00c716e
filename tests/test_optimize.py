"""`pddbench optimize`: candidate splits respect each chip kind's budget, the best is the maximum
of the measured candidates, and the best split beats a deliberately bad one."""

import json
from collections import Counter

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


@pytest.mark.parametrize("shape", ["rising", "falling", "peak", "two-peaks", "flat"])
def test_the_checked_search_finds_the_exhaustive_best_with_fewer_simulations(monkeypatch, shape):
    """Logic (a verdict monotone in the rate, split i holding up to cap[i]): whatever the shape of
    capacity over the splits, even two peaks, the checked search's best is the exhaustive
    maximum within the resolution, every candidate was searched or failed a check where the
    best first failed, and it simulated less than a search per candidate. The real simulator:
    test_the_checked_search_on_the_simulator."""
    from pddbench.sweep import checked_search as cs
    from tests.test_sweep import _threshold_prober

    sc = load_scenario(PAPER / "same-dc-pd.yaml", SMALL)
    splits = candidate_splits(sc, {"A": 96}, [8])
    n = len(splits)
    cap = {"rising": [1 + i for i in range(n)], "falling": [n - i for i in range(n)],
           "peak": [n - abs(i - n // 2) for i in range(n)], "flat": [3.0] * n,
           "two-peaks": [6 if i == n - 2 else max(1, 4 - abs(i - 1)) for i in range(n)]}[shape]
    cap = [0.29 * c for c in cap]
    index = lambda s: next(i for i, c in enumerate(splits) if all(
        getattr(s.deployment, r).instances == v["instances"] for r, v in c.items()))
    seen = Counter()  # (split, rate scale) -> simulations

    def prober(i: int):
        def probe(scales):
            seen.update((i, round(x, 9)) for x in scales)
            return _threshold_prober(cap[i])(scales)
        return probe

    monkeypatch.setattr(cs, "measure", lambda scen, ex, it, near, known=None: [
        search_capacity(s, it, probe_many=prober(index(s)), near=h, known=k)
        for s, h, k in zip(scen, near, known or [None] * len(scen))])
    monkeypatch.setattr(cs, "holds", lambda scen, ex: [
        {"holds": s.workload.rate_scale <= cap[index(s)], "offered_rps": s.workload.rate_scale * 10,
         "summary": prober(index(s))([s.workload.rate_scale])[0]} for s in scen])
    res = cs.optimize_checked(sc, {"A": 96}, [8], InlineExecutor(), iterations=7, requests=300)
    # a check that held is its search's first probe: nothing simulated twice, and the count is honest
    assert max(seen.values()) == 1 and res["search"]["simulations"] == sum(seen.values())
    rows = res["candidates"]
    assert len(rows) == n and all(r["full"] or r["check"]["holds"] is False for r in rows)
    best = cap[next(i for i, r in enumerate(rows) if r["label"] == res["best"]["label"])]
    assert best >= max(cap) - res["best"]["resolution_rate_scale"] - 1e-9
    exhaustive = sum(len(search_capacity(with_split(sc, s), 7, probe_many=_threshold_prober(c))["probes"])
                     for s, c in zip(splits, cap))
    assert res["search"]["simulations"] < exhaustive and res["search"]["searched"] < n


def test_the_checked_search_on_the_simulator():
    """On real simulations: the same best capacity as measuring every candidate, within the
    resolution, and every candidate not searched failed where the best's search first failed."""
    from pddbench.sweep.checked_search import optimize_checked

    sc = load_scenario(PAPER / "same-dc-pd.yaml", SMALL)
    full = optimize(sc, {"A": 40}, [8], InlineExecutor(), iterations=3, requests=300)
    res = optimize_checked(sc, {"A": 40}, [8], InlineExecutor(), iterations=3, requests=300)
    assert len(res["candidates"]) == len(full["candidates"])
    gap = res["best"]["resolution_rate_scale"] * full["best"]["throughput_within_sla_rps"] / full["best"]["rate_scale"]
    assert res["best"]["throughput_within_sla_rps"] >= full["best"]["throughput_within_sla_rps"] - gap - 1e-9
    top = round(res["best"]["rate_scale"] + res["best"]["resolution_rate_scale"], 6)
    for r in res["candidates"]:
        assert r["full"] or (r["check"]["holds"] is False and r["check"]["rate_scale"] <= top)
