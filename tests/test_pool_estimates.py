"""The pool-ranked split search (issue 27.3): each role measured alone per size, a split estimated
by the pool that runs out first, pruning only by that estimate widened by the largest underestimate
seen (or by the analytic bound), and the full run's sizes check stating the sign or that it is open."""

import json

import pytest

from pddbench.reproduce import sizes_check
from pddbench.schema.scenario import load_scenario
from pddbench.sweep import pool_estimates as pe
from pddbench.sweep import split_bounds as sb
from tests.conftest import run_cli

POOLS = {"prefill": {6: {"instances": 4, "capacity_rps": 8.0, "per_instance_rps": 2.0},
                     8: {"instances": 3, "capacity_rps": 9.0, "per_instance_rps": 3.0}},
         "decode": {6: {"instances": 4, "capacity_rps": 0.0, "per_instance_rps": 0.0},
                    8: {"instances": 3, "capacity_rps": 12.0, "per_instance_rps": 4.0}}}


def test_the_estimate_is_the_pool_that_runs_out_first():
    split = {"prefill": {"instances": 5, "chips_per_instance": 8}, "decode": {"instances": 3, "chips_per_instance": 8}}
    assert pe.estimate(split, POOLS) == {"rps": 12.0, "limit": "decode"}
    split["decode"]["instances"] = 4
    assert pe.estimate(split, POOLS) == {"rps": 15.0, "limit": "prefill"}
    # a role that met the SLA at no rate where it was measured estimates nothing (the bound decides)
    split["decode"]["chips_per_instance"] = 6
    assert pe.estimate(split, POOLS)["rps"] is None


@pytest.mark.parametrize("name,budget", [("same-dc-pd", {"A": 88}), ("pdd", {"A": 43, "B": 32})])
def test_a_role_is_measured_alone_within_its_budget_and_the_others_ample(name, budget):
    sc = load_scenario(f"paper/{name}", ["workload.synth.requests=200"])
    for role in ("prefill", "decode", "relay", "main"):
        pool = getattr(sc.deployment, role, None)
        if pool is None or role not in pe.ROLES_OF_KIND[sc.deployment.kind]:
            continue
        for size in (6, 9, 16):
            n0 = pe.reference_count(sc, role, size, budget)
            assert 1 <= n0 and n0 * size <= budget[pool.chip]
            split = pe.ample_split(sc, role, size, n0, budget)
            assert split[role] == {"instances": n0, "chips_per_instance": size}
            for other, v in split.items():
                if other != role:  # more chips than the whole budget could ever give that role
                    chip = getattr(sc.deployment, other).chip
                    assert v["instances"] * v["chips_per_instance"] >= 2 * budget[chip]


def test_pool_ranked_search_on_the_simulator(tmp_path):
    out = tmp_path / "opt"
    res = run_cli("optimize", "paper/same-dc-pd", "--budget", "A=40", "--sizes", "6-10", "--prune", "--rank", "pools",
                  "--set", "workload.synth.requests=150", "--iterations", "2", "-j", "1", "--out", out, timeout=900)
    assert res.returncode == 0, res.stderr[-2000:]
    data = json.loads((out / "optimize.json").read_text())
    search, rows = data["search"], data["candidates"]
    assert search["rank"] == "pools" and set(search["pool_capacities"]) == {"prefill", "decode"}
    assert {int(s) for s in search["pool_capacities"]["prefill"]} == {6, 7, 8, 9, 10}  # every size that fits
    sim = [r for r in rows if r["status"] == "simulated"]
    best = max(r["full"]["throughput_within_sla_rps"] for r in sim)
    assert data["best"]["throughput_within_sla_rps"] == best
    assert search["simulations"] == len(sim) + 10
    open_reach = [r["reach_rps"] for r in rows if r["status"].startswith("unsettled")]
    assert search["ceiling_rps"] == pytest.approx(max([best, *open_reach]), abs=1e-5)
    under = search["largest_underestimate"]
    assert under == pytest.approx(max([0.0] + [r["full"]["throughput_within_sla_rps"] / r["estimate"]["rps"] - 1
                                                for r in sim if r["estimate"]["rps"]]), abs=1e-5)
    for r in rows:
        if r["status"].startswith("pruned: estimate"):
            # under is rounded to 6 digits in the file: a split on the boundary may round onto it
            assert r["estimate"]["rps"] * (1 + under) < (1 - sb.MARGIN) * best + 1e-5
            assert r["bound"]["bound_rps"] >= (1 - sb.MARGIN) * best  # else the bound pruned it
    assert (out / "optimize.png").is_file()


@pytest.mark.parametrize("args,says", [(["--rank", "pools"], "give --prune"),
                                       (["--prune", "--rank", "best"], "expected bound or pools")])
def test_rank_refusals(tmp_path, args, says):
    res = run_cli("optimize", "paper/same-dc-pd", "--budget", "A=40", "--set", "workload.synth.requests=150",
                  *args, "--out", tmp_path / "o")
    assert res.returncode == 2 and "Traceback" not in res.stderr and says in res.stderr, res.stderr
    assert not (tmp_path / "o").exists()


def _result(label: str, best_rps: float, reach: list[float]) -> dict:
    return {"best": {"label": label, "throughput_within_sla_rps": best_rps},
            "search": {"candidates": 2 + len(reach), "simulations": 1, "refined": 1, "pruned": 1,
                       "unsettled": len(reach), "ceiling_rps": max([best_rps, *reach])}}


def test_the_sizes_check_states_the_sign_only_when_the_open_splits_cannot_change_it():
    same = _result("P9x6 D3x11", 20.0, [])
    loss = sizes_check.compare(same, _result("P4x8 RLD1x11 MD3x10", 11.0, [12.0, 19.0]))
    assert loss["sign"] == "loss" and loss["throughput_change_pct"] == -45.0 and loss["pdd_change_at_most_pct"] == -5.0
    assert "no size in the range turns PDD's loss into a gain" in loss["words"]
    open_ = sizes_check.compare(same, _result("P4x8 RLD1x11 MD3x10", 11.0, [21.0]))  # an open split could pass 20
    assert open_["sign"] is None and "not settled" in open_["words"] and "--max-splits" in open_["words"]
    gain = sizes_check.compare(_result("P6x8 D5x8", 10.0, [11.0]), _result("P4x8 RLD1x8 MD4x8", 12.0, []))
    assert gain["sign"] == "gain" and gain["pdd_change_at_least_pct"] == pytest.approx(9.09, abs=0.01)
    assert sizes_check.compare(_result("x", 0.0, []), _result("y", 1.0, []))["sign"] is None
