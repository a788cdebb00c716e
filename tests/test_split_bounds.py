"""Analytic split bounds and the pruned split search (issue 27.3): the bound is above the capacity
the simulator measures on a steady trace, a pool that cannot hold the weights bounds its split at
0, and `optimize --prune` simulates in order of bound, prunes only what cannot come within the
margin of the best, and says when it ran out of simulations."""

import json

import pytest

from pddbench.schema.scenario import load_scenario
from pddbench.sweep import split_bounds as sb
from pddbench.sweep.optimize import parse_sizes, with_split
from tests.conftest import run_cli

SAME = {"prefill": {"instances": 6, "chips_per_instance": 8}, "decode": {"instances": 5, "chips_per_instance": 8}}
PDD = {"prefill": {"instances": 4, "chips_per_instance": 8}, "relay": {"instances": 1, "chips_per_instance": 8},
       "main": {"instances": 4, "chips_per_instance": 8}}


@pytest.mark.parametrize("name,split", [("same-dc-pd", SAME), ("pdd", PDD)])
def test_bound_is_above_the_steady_capacity(name, split):
    from pddbench.measure.capacity import search_capacity

    sc = load_scenario(f"paper/{name}", ["workload.synth.requests=12000"])
    b = sb.bound(sc, split, sb.profile(sc))
    cap = search_capacity(with_split(sc, split), iterations=3)
    assert cap["throughput_within_sla_rps"] > 0
    assert b["bound_rps"] >= cap["throughput_within_sla_rps"], (b, cap["throughput_within_sla_rps"])


def test_a_pool_that_cannot_hold_the_weights_bounds_at_zero():
    sc = load_scenario("paper/same-dc-pd", ["workload.synth.requests=200"])
    small = {**SAME, "prefill": {"instances": 20, "chips_per_instance": 4}}  # 4 x 128 GB x 0.9 < 600 GB
    b = sb.bound(sc, small, sb.profile(sc))
    assert b["bound_rps"] == 0 and "do not fit" in b["limit"]


def test_more_chips_never_lower_the_bound():
    sc = load_scenario("paper/pdd", ["workload.synth.requests=300"])
    prof = sb.profile(sc)
    more = {**PDD, "prefill": {"instances": 5, "chips_per_instance": 8}}
    assert sb.bound(sc, more, prof)["bound_rps"] >= sb.bound(sc, PDD, prof)["bound_rps"]


def test_size_ranges_parse_and_are_counted_first():
    from pddbench.core.errors import UserError

    assert parse_sizes("4-16") == list(range(4, 17))
    assert parse_sizes("7,9-10") == [7, 9, 10]
    for bad in ("1-100000000", "a-b", "4-"):
        with pytest.raises(UserError):
            parse_sizes(bad)


@pytest.mark.parametrize("max_splits", [2, 500])
def test_pruned_search_on_the_simulator(tmp_path, max_splits):
    out = tmp_path / "opt"
    res = run_cli("optimize", "paper/same-dc-pd", "--budget", "A=40", "--sizes", "6-10", "--prune", "--set",
                  "workload.synth.requests=150", "--iterations", "2", "-j", "1", "--max-splits", str(max_splits),
                  "--out", out, timeout=900)
    assert res.returncode == 0, res.stderr[-2000:]
    data = json.loads((out / "optimize.json").read_text())
    rows, search = data["candidates"], data["search"]
    sim = [r for r in rows if r["status"] == "simulated"]
    best = max(r["full"]["throughput_within_sla_rps"] for r in sim)
    assert data["best"]["throughput_within_sla_rps"] == best and len(sim) == search["refined"] <= max_splits
    for r in rows:
        if r["status"].startswith("pruned: bound"):
            assert r["bound"]["bound_rps"] < (1 - sb.MARGIN) * best
        if r["status"].startswith("unsettled"):
            assert r["bound"]["bound_rps"] >= (1 - sb.MARGIN) * best
    assert search["exhaustive"] == (search["unsettled"] == 0)
    bounds = [r["bound"]["bound_rps"] for r in sim]
    assert min(bounds) >= max((r["bound"]["bound_rps"] for r in rows if r["status"] != "simulated"), default=0) or \
        search["unsettled"] == 0  # simulated in order of bound
    if max_splits == 2:
        assert len(sim) <= 2
