"""Best split vs best split (issue 14.3): the control has the baseline's prefill chips, the common
loads stop at 0.9 of the smaller capacity, the words say where PDD's TTFT is lower or higher, the
regime load sits below every measured capacity, and a rate scale offers the load it was asked for."""

import pandas as pd
import pytest

from pddbench.reproduce import regime
from pddbench.reproduce import common_load
from pddbench.reproduce.best_vs_best import BUDGETS, control_split, measured, prefill_chips
from pddbench.measure.capacity import rate_scale_for
from pddbench.measure.runner import simulate_summary
from pddbench.schema.scenario import load_scenario
from tests.conftest import REPO

PAPER = REPO / "scenarios" / "paper"


def _split(p, d=None, r=None, m=None):
    out = {"prefill": {"instances": p[0], "chips_per_instance": p[1]}}
    if d:
        out["decode"] = {"instances": d[0], "chips_per_instance": d[1]}
    if r:
        out["relay"] = {"instances": r[0], "chips_per_instance": r[1]}
        out["main"] = {"instances": m[0], "chips_per_instance": m[1]}
    return out


def _opt(split):
    return {"best": {"split": split}}


def test_control_has_the_baselines_prefill_chips():
    same = _split((6, 8), d=(5, 8))
    pdd = _split((4, 9), r=(1, 7), m=(4, 8))
    ctl = control_split(pdd, same)
    assert prefill_chips(ctl) == 48 == prefill_chips(same) != prefill_chips(pdd)
    assert ctl["relay"] == pdd["relay"] and ctl["main"] == pdd["main"] and set(ctl) == set(pdd)
    assert pdd["prefill"] == {"instances": 4, "chips_per_instance": 9}  # the input is not changed
    scen = {"same-dc-pd": load_scenario(PAPER / "same-dc-pd.yaml"), "pdd": load_scenario(PAPER / "pdd.yaml")}
    plan = measured({"same-dc-pd": _opt(same), "pdd": _opt(pdd)}, scen)
    assert plan["best-same-dc-pd"]["chips"] == {"A": 88}
    assert plan["best-pdd"]["chips"] == {"A": 43, "B": 32}
    assert plan["control-pdd"]["chips"] == {"A": 55, "B": 32}  # the control's chips are stated, not hidden
    assert plan["control-pdd"]["label"].startswith("P6x8 RLD1x7 MD4x8")
    assert BUDGETS["pdd"] == {"A": 43, "B": 32} and BUDGETS["same-dc-pd"] == {"A": 88}


def _caps(*rps):
    return [{"throughput_within_sla_rps": v, "bound_by": "ttft"} for v in rps]


def test_common_loads_stop_at_0_9_of_the_smaller_capacity():
    info = common_load.loads({"best-same-dc-pd": _caps(20.0, 22.0), "best-pdd": _caps(9.0, 11.0)})
    assert info["smaller"] == "best-pdd" and info["capacities_rps"]["best-pdd"] == 10.0
    assert info["loads_rps"][-1] == pytest.approx(9.0) and max(info["loads_rps"]) == info["loads_rps"][-1]
    assert info["loads_rps"][0] == pytest.approx(1.0) and info["loads_rps"] == sorted(info["loads_rps"])
    full = common_load.loads({"a": _caps(5.0), "b": _caps(50.0)}, common_load.FULL_FRACTIONS)
    assert full["smaller"] == "a" and len(full["loads_rps"]) == 9 and full["loads_rps"][-1] == pytest.approx(4.5)
    with pytest.raises(AssertionError):
        common_load.loads({"a": _caps(5.0)}, (0.1, 0.5, 1.0))  # past 0.9 is refused


def _table(pdd_ttft):
    rows = []
    for i, load in enumerate((1.0, 5.0, 9.0)):
        for seed in (0, 1):
            rows.append({"deployment": "base", "load_rps": load, "seed": seed, "ttft_mean_ms": 100.0,
                         "ttft_p90_ms": 200.0, "tpot_p90_ms": 50.0, "slo_attainment": 0.99})
            rows.append({"deployment": "pdd", "load_rps": load, "seed": seed, "ttft_mean_ms": pdd_ttft[i],
                         "ttft_p90_ms": 200.0 * pdd_ttft[i] / 100, "tpot_p90_ms": 25.0, "slo_attainment": 0.9})
    return pd.DataFrame(rows)


def test_common_load_words_and_rows_follow_the_sign_per_load():
    tab = _table([80.0, 100.0, 150.0])
    text = common_load.words(tab, "base", "pdd")
    assert "mean TTFT against same-DC PD's is lower at 1 (-20.0 %) req/s; higher (or equal) at 5 (+0.0 %), 9 (+50.0 %)" in text
    assert "P90 TPOT against same-DC PD's is lower at 1 (-50.0 %), 5 (-50.0 %), 9 (-50.0 %)" in text
    assert "1: 99 vs 90 %" in text
    flipped = common_load.words(_table([150.0, 100.0, 80.0]), "base", "pdd")
    assert "lower at 9 (-20.0 %)" in flipped and flipped != text
    info = {"loads_rps": [1.0, 5.0, 9.0], "fractions": [0.1, 0.5, 0.9], "smaller": "pdd",
            "capacities_rps": {"base": 20.0, "pdd": 10.0}}
    light, heavy = common_load.measure_rows(tab, info, "base", "pdd", light=True)
    assert light.claim.id == "ttft_change_common_light" and light.values == pytest.approx([-20.0, -20.0])
    assert heavy.claim.id == "ttft_change_common_heavy" and heavy.values == pytest.approx([50.0, 50.0])


def test_regime_load_is_below_every_measured_capacity():
    caps = {"regime-same-dc-pd": _caps(15.0, 16.0, 14.0), "regime-cross-dc-pd": _caps(9.5, 8.0, 10.0)}
    choice = regime.choose(caps)
    assert choice["load_rps"] == pytest.approx(0.9 * 8.0) and choice["smaller"] == "regime-cross-dc-pd"
    assert all(choice["load_rps"] < v for vs in choice["capacities_rps"].values() for v in vs)
    assert "7.20 req/s" in choice["text"] and "30 s" in choice["text"]
    # the WAN line's own capacity bounds it too: 10 Gbit/s at 250 MB of KV per request is 5 req/s
    line = regime.line_capacity_rps({"wan_kv_bytes": 250e6 * 100, "requests_total": 100}, 10.0)
    assert line == pytest.approx(5.0)
    by_line = regime.choose(caps, [line, 6.0, None])
    assert by_line["load_rps"] == pytest.approx(4.5) and by_line["smaller"] == "the WAN line"
    assert "line rate / KV bytes per request" in by_line["text"]
    assert regime.line_capacity_rps({"wan_kv_bytes": 0, "requests_total": 10}, 10.0) is None  # nothing crossed
    assert regime.capacity_overrides() == ["sla.ttft_ms=30000"]


def test_rate_scale_offers_the_asked_load():
    sc = load_scenario(PAPER / "same-dc-pd.yaml", ["workload.synth.requests=120"])
    _, base = simulate_summary(sc)
    trial = sc.model_copy(deep=True)
    trial.workload.rate_scale = rate_scale_for(2.5, base["offered_rps"])
    _, s = simulate_summary(trial)
    assert s["offered_rps"] == pytest.approx(2.5, rel=1e-3)


def test_best_split_rows_need_a_steady_ranking():
    """A best split ranked on a short trace, or pre-selected on one, is no steady evidence."""
    from pddbench.reproduce.best_vs_best import ranking_reason

    search = lambda n, coarse=None: {"search": {"requests": n, "coarse_requests": coarse, "refine_top": 3 if coarse else None,
                                                "candidates": 10}}
    assert ranking_reason({"pdd": search(12_000), "same-dc-pd": search(24_000)}) == ""
    short = ranking_reason({"pdd": search(12_000), "same-dc-pd": search(1_000)})
    assert "ranked on 1,000-request traces" in short and "--requests 12000" in short
    pre = ranking_reason({"pdd": search(12_000, 1_000), "same-dc-pd": search(12_000)})
    assert "pre-selected on 1,000-request traces (the top 3 of 10 measured on 12,000)" in pre


def test_a_capacity_that_moved_is_searched_again_on_twice_the_requests():
    """After the first checks, the deployments whose capacity moved beyond 3 % on twice the
    requests are searched again: seed 0 takes its check's result, the other seeds run on 2n, and a
    new check runs on 4n; the control, a copy of PDD's best, is not searched on its own."""
    import json

    from pddbench.reproduce.tasks import Settings, doubled_tasks, unconverged

    cap = lambda rps, n: {"capacity": {"throughput_within_sla_rps": rps, "requests": n, "warnings": []}}
    same = {"prefill": {"instances": 6, "chips_per_instance": 8}, "decode": {"instances": 5, "chips_per_instance": 8}}
    pdd = {"prefill": {"instances": 4, "chips_per_instance": 8}, "relay": {"instances": 1, "chips_per_instance": 8},
           "main": {"instances": 4, "chips_per_instance": 8}}
    plan = {"best-same-dc-pd": {"split": same}, "best-pdd": {"split": pdd}, "control-pdd": {"split": pdd}}
    results = {}
    for name, (a, b) in {"same-dc-pd": (14.375, 13.5625), "pdd": (9.5, 9.4375), "best-same-dc-pd": (18.25, 16.5),
                         "best-pdd": (9.5625, 9.5)}.items():
        results[("capacity", name, 0)], results[("convergence", name, 0)] = cap(a, 12_000), cap(b, 24_000)
    moved = unconverged(results, plan)
    assert moved == ["same-dc-pd", "best-same-dc-pd"]
    cfg = Settings(seeds=3)
    tasks = doubled_tasks(results, cfg, plan, moved)
    assert [k for k, _ in tasks] == [("convergence", "same-dc-pd", 0), ("capacity", "same-dc-pd", 1),
                                     ("capacity", "same-dc-pd", 2), ("convergence", "best-same-dc-pd", 0),
                                     ("capacity", "best-same-dc-pd", 1), ("capacity", "best-same-dc-pd", 2)]
    requests = [json.loads(p.task)["scenario"]["workload"]["synth"]["requests"] for _, p in tasks]
    assert requests == [48_000, 24_000, 24_000] * 2
    assert results[("capacity", "same-dc-pd", 0)]["capacity"]["requests"] == 24_000  # the check's own result
    assert results[("capacity", "pdd", 0)]["capacity"]["requests"] == 12_000  # converged: left as it was
    assert json.loads(tasks[4][1].task)["scenario"]["deployment"]["decode"]["instances"] == 5  # the best split's
