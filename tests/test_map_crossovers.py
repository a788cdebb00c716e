"""The map's words never contradict the crossovers (issue 39, point 5): where a crossover of the
same claim lies inside the map's range of an axis, every sentence generated from the map says so
instead of "nowhere/everywhere on the map"; where it lies outside, or is another claim's, or
along an axis the map cannot honestly stand for, the words stay as they were."""

from __future__ import annotations

import pandas as pd

from pddbench.reproduce.answer import answer_lines, where_line
from pddbench.reproduce.map_crossovers import axis_points, inside
from pddbench.reproduce.sensitivity import describe_map
from pddbench.workload.synth import MOONCAKE_LIKE_HIST, PDD_LIKE_HIST

AXES = ["sla.tpot_ms", "network.wan", "model.kv_bytes_per_token"]
THR = ("throughput_change_pct", "PDD's throughput-within-SLA gain", "positive")


def _map(gain, wans=("cross-city-10g", "cross-city-100g")) -> pd.DataFrame:
    rows = [{"sla.tpot_ms": t, "network.wan": w, "model.kv_bytes_per_token": k,
             "throughput_change_pct": gain(t, w, k), "ttft_change_pct": 4.0}
            for t in (60, 150) for w in wans for k in (4400, 47606)]
    return pd.DataFrame(rows)


def _item(axis, value, bracket=None, claim="throughput_change_best", direction="PDD wins below it"):
    return {"claim": claim, "axis": axis, "value": value, "bracket": bracket or [value * 0.95, value * 1.05],
            "range": [1, 1e6], "direction": direction}


NOWHERE = _map(lambda t, w, k: -5.0 - t / 100)
TPOT_INSIDE = _item("sla.tpot_ms", 61.6, [53.2, 71.3])


def test_nowhere_becomes_none_of_the_points_with_a_crossover_inside():
    metric, subject, good = THR
    plain = where_line(NOWHERE, AXES, metric, subject, good)
    assert "nowhere on the map (0 of 8 points)" in plain and "crossover" not in plain
    line = where_line(NOWHERE, AXES, metric, subject, good, [TPOT_INSIDE])
    assert "nowhere" not in line and "at none of the map's 8 points" in line
    assert "TPOT SLA (ms) = 61.6: PDD wins below it" in line
    assert "around the map's value 60" in line  # the bisection's bracket (53 .. 71) holds the map's 60
    words = describe_map(NOWHERE, AXES, metric, subject, good, [TPOT_INSIDE])
    assert "everywhere on the map" not in words and "negative at every point of the map" in words
    assert "TPOT SLA (ms) = 61.6: PDD wins below it" in words
    assert "everywhere on the map" in describe_map(NOWHERE, AXES, metric, subject, good)


def test_a_crossover_outside_the_maps_range_or_of_another_claim_is_not_said():
    metric, subject, good = THR
    others = [_item("sla.tpot_ms", 300.0),  # beyond the map's 60 .. 150
              _item("model.kv_bytes_per_token", 80000.0),  # beyond 4400 .. 47606
              _item("sla.tpot_ms", 100.0, claim="bcr_change"),  # no map metric for BCR
              _item("offered_load_fraction", 0.5, claim="ttft_change_common"),  # not a map axis
              {**_item("sla.tpot_ms", 100.0), "value": None, "bracket": None}]  # no sign change found
    assert where_line(NOWHERE, AXES, metric, subject, good, others) == where_line(NOWHERE, AXES, metric, subject, good)
    plain = describe_map(NOWHERE, AXES, metric, subject, good)
    assert describe_map(NOWHERE, AXES, metric, subject, good, others) == plain
    # the TTFT words take only the TTFT claim's crossovers
    assert "crossover" not in describe_map(NOWHERE, AXES, "ttft_change_pct", "TTFT", "negative", [TPOT_INSIDE])


def test_between_the_maps_values_and_the_mixed_and_everywhere_cases():
    metric, subject, good = THR
    kv = _item("model.kv_bytes_per_token", 20000.0, [19000.0, 21000.0], direction="PDD wins above it")
    mixed = _map(lambda t, w, k: 3.0 if t == 60 else -3.0)
    line = where_line(mixed, AXES, metric, subject, good, [kv])
    assert "at 4 of 8 map points" in line and "between the map's values 4400 and 47606" in line
    assert "KV bytes/token = 2e+04: PDD wins above it" in line
    assert "between the map's values 4400 and 47606" in describe_map(mixed, AXES, metric, subject, good, [kv])
    everywhere = _map(lambda t, w, k: 5.0)
    line = where_line(everywhere, AXES, metric, subject, good, [kv])
    assert "everywhere" not in line and "at all of the map's 8 points; but" in line
    assert "positive everywhere" not in describe_map(everywhere, AXES, metric, subject, good, [kv])


def test_the_wan_profiles_stand_for_their_line_rate_only_when_nothing_else_differs():
    metric, subject, good = THR
    rate = _item("network.wan.rate_gbps", 31.0, [29.0, 33.0], direction="PDD wins above it")
    line = where_line(NOWHERE, AXES, metric, subject, good, [rate])
    assert "WAN line rate (Gbit/s) = 31: PDD wins above it" in line
    assert "between the map's values cross-city-10g (10) and cross-city-100g (100)" in line
    assert "crossover" not in where_line(NOWHERE, AXES, metric, subject, good, [_item("network.wan.rate_gbps", 300.0)])
    # lossy-wan differs from the searched line in more than its rate: no honest point of the rate axis
    lossy = _map(lambda t, w, k: -5.0, wans=("cross-city-10g", "lossy-wan"))
    assert axis_points("network.wan", ["cross-city-10g", "lossy-wan"]) is None
    assert "crossover" not in where_line(lossy, AXES, metric, subject, good, [rate])


def test_the_hit_mix_stands_for_its_share_of_the_pdd_like_mix():
    from pddbench.reproduce.tasks import HIT_MIX_NAMES

    name, points = axis_points("workload.synth.target_hist", [list(PDD_LIKE_HIST), list(MOONCAKE_LIKE_HIST)])
    assert name == "workload.hit_mix_pdd_share" and sorted(points.values()) == [0.0, 1.0]
    df = pd.DataFrame([{"workload.synth.target_hist": n, "throughput_change_pct": -1.0} for n in HIT_MIX_NAMES.values()])
    found = inside(df, ["workload.synth.target_hist"], "throughput_change_pct",
                   [_item("workload.hit_mix_pdd_share", 0.4, [0.38, 0.42])])
    assert len(found) == 1 and found[0]["lower"].endswith("(0)") and found[0]["upper"].endswith("(1)")


def test_the_answer_block_carries_the_crossover_into_the_maps_line():
    lines = answer_lines([], NOWHERE, AXES, 1, 1000, False, 400, 12_000,
                         crossovers={"crossovers": [TPOT_INSIDE], "not_searched": []})
    map_line = next(x for x in lines if x.startswith("- PDD's throughput-within-SLA gain goes"))
    assert "nowhere" not in map_line and "61.6" in map_line
