"""Crossovers (issue 27.4): the bisection finds where a sign changes, the price crossover is exact,
every axis's overrides make a valid scenario that changes what it names, the climb stops at a
split no neighbour beats, and `pddbench crossovers` on the real simulator writes entries whose
probes agree with the value it reports."""

import json
import math

import pytest

from pddbench.reproduce import crossovers as cx
from tests.conftest import run_cli


@pytest.mark.parametrize("root", [3.0, 17.5, 99.0])
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("rising", [True, False])
def test_bisection_brackets_the_sign_change(root, log, rising):
    calls = []

    def adv(xs):
        calls.append(list(xs))
        return [(x - root) if rising else (root - x) for x in xs]

    found = cx.bisect(adv, 1.0, 100.0, 6, log)
    a, b = found["bracket"]
    assert a <= root <= b
    width = (math.log(b / a) / math.log(100.0)) if log else (b - a) / 99.0
    assert width == pytest.approx(2 ** -6)
    assert found["direction"] == ("PDD wins above it" if rising else "PDD wins below it")
    assert sum(len(c) for c in calls) == 2 + 6


def test_bisection_without_a_sign_change_says_which_side():
    won = cx.bisect(lambda xs: [5.0 for _ in xs], 1, 10, 4, False)
    lost = cx.bisect(lambda xs: [-1.0 for _ in xs], 1, 10, 4, True)
    gone = cx.bisect(lambda xs: [None for _ in xs], 1, 10, 4, True)
    assert won["value"] is None and "wins across" in won["direction"] and len(won["probes"]) == 2
    assert lost["value"] is None and "loses across" in lost["direction"]
    assert gone["value"] is None and "not measurable" in gone["direction"]


def _bcr_change(pdd, same, chips_b, now, price):
    cost = pdd["cost_per_hour"] + chips_b * (price - now)
    return (pdd["throughput_within_sla_rps"] / cost) / (same["throughput_within_sla_rps"] / same["cost_per_hour"]) - 1


@pytest.mark.parametrize("thr_pdd", [9.0, 14.0, 30.0])
def test_price_crossover_is_where_bcr_is_equal(thr_pdd):
    pdd = {"throughput_within_sla_rps": thr_pdd, "cost_per_hour": 160.64}
    same = {"throughput_within_sla_rps": 18.0, "cost_per_hour": 176.0}
    found = cx.price_crossover(pdd, same, 32, 2.52, (0.0, 10.08))
    if found["value"] is None:  # then the sign is the same at both ends of the range
        ends = [_bcr_change(pdd, same, 32, 2.52, p) for p in (0.0, 10.08)]
        assert (ends[0] > 0) == (ends[1] > 0)
    else:
        assert 0 <= found["value"] <= 10.08
        assert _bcr_change(pdd, same, 32, 2.52, found["value"]) == pytest.approx(0, abs=1e-9)
        assert _bcr_change(pdd, same, 32, 2.52, found["value"] * 0.9) > 0  # cheaper chip B: PDD wins


@pytest.mark.parametrize("name", list(cx.AXES))
def test_every_axis_override_makes_a_valid_scenario_that_changes_its_value(name):
    from pddbench.schema.scenario import load_scenario

    axis = cx.AXES[name]
    assert axis.lo <= axis.shipped <= axis.hi
    lo, hi = (load_scenario("paper/pdd", axis.overrides(v)) for v in (axis.lo, axis.hi))
    shipped = load_scenario("paper/pdd", axis.overrides(axis.shipped))
    base = load_scenario("paper/pdd")
    dump = lambda sc: json.dumps(sc.model_dump(mode="json"), sort_keys=True)
    assert dump(lo) != dump(hi)
    if name not in ("network.wan.rate_gbps", "workload.hit_mix_pdd_share"):
        assert dump(shipped) == dump(base)  # the shipped value is the shipped scenario
    if name == "network.wan.rate_gbps":
        assert shipped.network.wan_profile().rate_gbps == base.network.wan_profile().rate_gbps
        assert shipped.network.wan_profile().delay_ms == base.network.wan_profile().delay_ms


def test_unknown_axis_and_sizes_are_refused_before_any_work(tmp_path):
    bad = run_cli("crossovers", "--axes", "sla.tpot_ms,nope", "--out", tmp_path / "a")
    assert bad.returncode == 2 and "nope" in bad.stderr and "Traceback" not in bad.stderr
    big = run_cli("crossovers", "--max-searches", "5", "--out", tmp_path / "b")
    assert big.returncode == 2 and "capacity searches" in big.stderr and "--max-searches" in big.stderr
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_climb_stops_where_no_neighbour_is_better():
    from pddbench.reproduce.crossover_search import Climber
    from pddbench.reproduce.tasks import Settings
    from pddbench.sweep.executors import make_executor

    cfg = Settings.make(requests=120, seeds=1)
    with make_executor(1) as ex:
        cl = Climber(ex, cfg, 120, 2)
        job = ("same-dc-pd", ())
        (index, cap), = cl.best({job: 0}).values()
        n = len(cl.candidates("same-dc-pd"))
    for j in (index - 1, index + 1):
        if 0 <= j < n:  # searched and not better, or failed a check at the best's answer
            assert ((job, j) in cl.caps and cl.caps[(job, j)]["throughput_within_sla_rps"]
                    <= cap["throughput_within_sla_rps"]) or cl.below[(job, j)] <= cl._top(job, index)
    assert cap is cl.caps[(job, index)]


def _fake_climber(capacity: list[float]):
    """A Climber whose split i holds exactly the rate scales up to capacity[i] (a monotone
    verdict: the logic's unit test; test_climb_stops_where_no_neighbour_is_better and the
    crossovers command run the real simulator)."""
    from pddbench.measure.capacity import search_capacity
    from pddbench.reproduce.crossover_search import Climber
    from pddbench.reproduce.tasks import Settings
    from pddbench.sweep.executors import InlineExecutor
    from tests.test_sweep import _threshold_prober

    class Fake(Climber):
        def index(self, sc) -> int:
            return next(i for i, c in enumerate(self.candidates("same-dc-pd"))
                        if all(getattr(sc.deployment, r).instances == v["instances"] for r, v in c.items()))

        def _capacities(self, scenarios, hints, stop_if_near_fails=False):
            return [search_capacity(sc, 7, probe_many=_threshold_prober(capacity[self.index(sc)]), near=h,
                                    stop_if_near_fails=stop_if_near_fails) for sc, h in zip(scenarios, hints)]

    return Fake(InlineExecutor(), Settings.make(requests=150, seeds=1), 150, 7)


@pytest.mark.parametrize("shape", ["rising", "falling", "peak", "plateau", "two-peaks"])
def test_the_checked_climb_ends_where_a_climb_over_full_searches_ends(shape):
    """Checking a neighbour with one simulation at the current answer instead of searching it
    changes no climb on a monotone verdict: from every start, the same best split as climbing
    over the candidates' true capacities to a strictly better neighbour (a tie within the
    search's resolution keeps the current split), with fewer simulations."""
    n = len(_fake_climber([1.0]).candidates("same-dc-pd"))
    caps = {"rising": [1 + i for i in range(n)], "falling": [n - i for i in range(n)],
            "peak": [n - abs(i - n // 2) for i in range(n)], "plateau": [min(i, 2) + 1 for i in range(n)],
            "two-peaks": [6 if i == n - 2 else max(1, 4 - abs(i - 1)) for i in range(n)]}[shape]
    caps = [c * 0.37 for c in caps]

    def reference(i: int) -> int:
        while True:
            better = [j for j in (i - 1, i + 1) if 0 <= j < n and caps[j] > caps[i]]
            if not better:
                return i
            i = max(better, key=lambda j: (caps[j], -j))

    job = ("same-dc-pd", ())
    for start in range(n):
        cl = _fake_climber(caps)
        (index, cap), = cl.best({job: start}).values()
        assert index == reference(start), (shape, start)
        assert cl.checks > 0
        assert cl.searches < 1 + 2 * (abs(index - start) + 1)  # never every neighbour searched in full


@pytest.mark.parametrize("shape", ["rising", "peak", "two-peaks"])
def test_the_climb_simulates_no_split_twice_at_one_rate(shape):
    """A neighbour's check is the first probe of its capacity search (never simulated again when
    it holds; one simulation when it fails), so across a whole climb no (split, rate) pair is
    simulated twice; the effort's count of simulations is the number of simulations the prober saw."""
    from collections import Counter

    from pddbench.measure.capacity import search_capacity
    from tests.test_sweep import _threshold_prober

    n = len(_fake_climber([1.0]).candidates("same-dc-pd"))
    caps = {"rising": [1 + i for i in range(n)], "peak": [n - abs(i - n // 2) for i in range(n)],
            "two-peaks": [6 if i == n - 2 else max(1, 4 - abs(i - 1)) for i in range(n)]}[shape]
    seen: Counter = Counter()
    cl = _fake_climber(caps)

    def capacities(scenarios, hints, stop_if_near_fails=False):
        out = []
        for sc, h in zip(scenarios, hints):
            i, inner = cl.index(sc), _threshold_prober(caps[cl.index(sc)])

            def probe(scales, i=i, inner=inner):
                seen.update((i, round(s, 9)) for s in scales)
                return inner(scales)
            out.append(search_capacity(sc, 7, probe_many=probe, near=h, stop_if_near_fails=stop_if_near_fails))
        return out

    cl._capacities = capacities
    (index, _), = cl.best({("same-dc-pd", ()): 0}).values()
    assert all(caps[j] <= caps[index] for j in (index - 1, index + 1) if 0 <= j < n)  # a local best
    assert seen and max(seen.values()) == 1
    assert bool(cl.below) == (shape != "rising")  # the failed checks: one simulation each, counted
    assert cl.effort()["simulations"] == sum(seen.values())


def test_crossovers_command_on_the_simulator(tmp_path):
    out = tmp_path / "cx"
    res = run_cli("crossovers", "--axes", "sla.tpot_ms,chips.B.price_per_hour,offered_load_fraction", "--steps", "2",
                  "--requests", "150", "--iterations", "2", "-j", "1", "--out", out, timeout=900)
    assert res.returncode == 0, res.stderr[-2000:]
    data = json.loads((out / "crossovers.json").read_text())
    assert (out / "crossovers.png").stat().st_size > 0 and (out / "crossovers.md").is_file()
    seen = {(i["claim"], i["axis"]) for i in data["crossovers"]}
    assert seen == {("throughput_change_best", "sla.tpot_ms"), ("bcr_change", "sla.tpot_ms"),
                    ("bcr_change", "chips.B.price_per_hour"), ("throughput_change_best", "chips.B.price_per_hour"),
                    ("ttft_change_common", "offered_load_fraction")}
    for it in data["crossovers"]:
        assert {"claim", "axis", "value", "range", "direction", "fixed"} <= set(it)
        pts = sorted((p["value"], p["advantage_pct"]) for p in it["probes"] if p["advantage_pct"] is not None)
        if it["value"] is None:
            signs = {a > 0 for _, a in pts}
            assert len(signs) <= 1, it  # no sign change reported: none among the probes either
        else:
            lo, hi = it["range"]
            assert lo <= it["value"] <= hi
            below = [a for v, a in pts if v < it["value"]]
            above = [a for v, a in pts if v > it["value"]]
            assert below and above and (below[-1] > 0) != (above[0] > 0), it
    assert len(data["words"]) == len(data["crossovers"])
    # every simulation is counted to the axis (or stage) that asked for it: the price simulates
    # nothing, the shipped values' climbs and the TPOT SLA's search capacities, and the load
    # simulates both best splits at each probed load (its TTFT, no capacity search)
    settings = data["settings"]
    by_axis = settings["simulations_by_axis"]
    assert sum(by_axis.values()) == settings["simulations"]
    assert set(by_axis) == {"shipped values", "sla.tpot_ms", "offered_load_fraction"} and min(by_axis.values()) > 0
    load, = (i for i in data["crossovers"] if i["axis"] == "offered_load_fraction")
    assert by_axis["offered_load_fraction"] == settings["ttft_simulations"] == 2 * len(load["probes"])
    assert settings["simulations"] == settings["capacity_probes"] + settings["neighbour_checks"] + 2 * len(load["probes"])
    # the estimate before work counts them too, from above
    from pddbench.core.limits import warm_probes

    searches = settings["estimated_capacity_searches"] * (warm_probes(2) + cx.CHECKS_PER_SEARCH)
    assert settings["estimated_simulations"] - searches == cx.estimated_ttft_simulations(
        ["sla.tpot_ms", "offered_load_fraction"], 2) >= settings["ttft_simulations"]


def test_ctrl_c_keeps_the_axes_already_searched(tmp_path):
    """Ctrl-C after the first axis: exit 130, one line, crossovers.json kept and marked interrupted
    with that axis's entries, the folder released."""
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import REPO

    out = tmp_path / "cx"
    proc = subprocess.Popen([sys.executable, "-m", "pddbench", "crossovers", "--axes",
                             "chips.B.price_per_hour,sla.tpot_ms", "--steps", "10", "--requests", "3000",
                             "--iterations", "3", "-j", "1", "--out", str(out)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 600
    while not (out / "crossovers.json").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert "Traceback" not in err
    assert proc.returncode == 130, err[-2000:]
    kept = json.loads((out / "crossovers.json").read_text())
    assert kept["interrupted"] is True and kept["complete"] is False
    assert {i["axis"] for i in kept["crossovers"]} == {"chips.B.price_per_hour"}
    assert not (out / ".claim").exists() and "kept" in err.strip().splitlines()[-1]


def test_frontier_on_the_simulator(tmp_path):
    """--frontier X,Y: one row per Y value, each a crossover along X whose probes agree with it."""
    out = tmp_path / "fr"
    res = run_cli("crossovers", "--axes", "chips.B.price_per_hour", "--frontier",
                  "sla.tpot_ms,network.wan.rate_gbps", "--frontier-points", "2", "--steps", "1", "--requests", "120",
                  "--iterations", "2", "-j", "1", "--out", out, timeout=900)
    assert res.returncode == 0, res.stderr[-2000:]
    data = json.loads((out / "crossovers.json").read_text())
    front = data["frontier"]
    assert (front["x"], front["y"]) == ("sla.tpot_ms", "network.wan.rate_gbps")
    assert [r["y"] for r in front["rows"]] == pytest.approx([1.0, 400.0])
    for row in front["rows"]:
        signs = {p["advantage_pct"] > 0 for p in row["probes"] if p["advantage_pct"] is not None}
        assert (row["value"] is None) == (len(signs) <= 1)
    assert (out / "frontier.png").stat().st_size > 0 and "Frontier" in data["words"][-1]
    by_axis = data["settings"]["simulations_by_axis"]
    assert sum(by_axis.values()) == data["settings"]["simulations"] and by_axis["frontier"] > 0
    assert set(by_axis) <= {"shipped values", "frontier"}
    bad = run_cli("crossovers", "--frontier", "sla.tpot_ms,sla.tpot_ms", "--out", tmp_path / "bad")
    assert bad.returncode == 2 and "--frontier" in bad.stderr and not (tmp_path / "bad").exists()


@pytest.mark.parametrize("name", list(cx.AXES))
@pytest.mark.parametrize("points", [1, 2, 5])
def test_frontier_values_span_the_axis(name, points):
    vals = cx.frontier_values(name, points)
    a = cx.AXES[name]
    assert len(vals) == points and vals == sorted(vals)
    if points == 1:
        assert vals == [a.shipped]
    else:
        assert vals[0] == pytest.approx(a.lo) and vals[-1] == pytest.approx(a.hi)


def test_answer_line_lists_an_axis_without_a_sign_change_only_when_no_claim_crosses_on_it():
    from pddbench.reproduce.answer import crossover_line

    item = lambda claim, axis, value: {"claim": claim, "axis": axis, "value": value,
                                       "direction": "PDD wins below it" if value else "PDD loses across the whole range"}
    line = crossover_line([item("bcr_change", "chips.B.price_per_hour", 0.38),
                           item("throughput_change_best", "chips.B.price_per_hour", None),
                           item("throughput_change_best", "sla.ttft_ms", None)], [])
    head, _, tail = line.partition("no sign change along")
    assert "0.38" in head and "TTFT SLA" in tail and "price" not in tail
    assert "nowhere in the ranges searched" in crossover_line([item("throughput_change_best", "sla.ttft_ms", None)], [])


def test_the_answer_opens_with_where_pdd_wins_from_the_crossovers_found():
    """The answer's first line says where PDD's throughput gain holds (each throughput crossover
    with its side, written as a reader writes numbers); nothing where no crossover was found."""
    from pddbench.reproduce.answer import wins_where

    items = [{"claim": "throughput_change_best", "axis": "sla.tpot_ms", "value": 46.19, "direction": "PDD wins below it"},
             {"claim": "bcr_change", "axis": "sla.tpot_ms", "value": 61.6, "direction": "PDD wins below it"},
             {"claim": "throughput_change_best", "axis": "workload.synth.output_median_tokens", "value": 1001.48,
              "direction": "PDD wins above it"},
             {"claim": "throughput_change_best", "axis": "sla.ttft_ms", "value": None,
              "direction": "PDD loses across the whole range"}]
    text = wins_where(items)
    assert "TPOT SLA (ms) below 46.2" in text and "output median (tokens) above 1,001" in text
    assert "61.6" not in text and "TTFT SLA" not in text
    assert wins_where(items[3:]) is None


def test_a_climb_starts_where_the_analytic_bound_moves_its_best():
    """Climber.shifted moves a start by as many splits as the bound's best moves between the two
    scenarios: along an axis the bound sees, toward its new best; along one it does not see (the
    TTFT SLA, the WAN line), not at all; always inside the candidates."""
    from pddbench.reproduce.crossover_search import Climber
    from pddbench.reproduce.tasks import Settings

    cl = Climber(None, Settings.make(requests=600, seeds=1), 600, 7)
    d = "same-dc-pd"
    shipped, n = (d, ()), len(cl.candidates(d))
    argmax = lambda job: max(range(n), key=lambda i: (cl._bounds(job)[i], -i))
    tight = (d, ("sla.tpot_ms=40",))  # a tight TPOT SLA needs more decode, less prefill: the bound's best moves
    move = argmax(tight) - argmax(shipped)
    assert move < 0  # candidates run from the fewest prefill instances up: a tight TPOT SLA, fewer
    for start in range(n):
        assert cl.shifted(tight, start, shipped) == min(max(start + move, 0), n - 1)
        assert cl.shifted(shipped, start, tight) == min(max(start - move, 0), n - 1)
        assert cl.shifted((d, ("sla.ttft_ms=20000",)), start, shipped) == start
        pdd_start = min(start, len(cl.candidates("pdd")) - 1)
        assert cl.shifted(("pdd", tuple(cx.AXES["network.wan.rate_gbps"].overrides(1))), pdd_start,
                          ("pdd", ())) == pdd_start
        assert cl.shifted(tight, start, None) == start


def test_a_warm_start_from_another_split_of_a_nearest_probe_moves_as_its_bound_moves():
    from pddbench.reproduce.crossover_search import Climber
    from pddbench.reproduce.tasks import Settings

    cl = Climber(None, Settings.make(requests=600, seeds=1), 600, 7)
    d = "same-dc-pd"
    shipped, tight = (d, ()), (d, ("sla.tpot_ms=40",))
    cl.caps[(shipped, 6)] = {"rate_scale": 2.0}
    cl.caps[(shipped, 9)] = {"rate_scale": 1.0}
    ratio = cl._bounds(tight)[6] / cl._bounds(shipped)[6]
    assert ratio < 0.9  # the tight SLA lowers that split's bound
    assert cl.hint(tight, 2, (shipped,)) == pytest.approx(2.0 * ratio)  # split 2 unknown there: the nearest, 6, scaled
    assert cl.hint(tight, 6, (shipped,)) == pytest.approx(2.0 * ratio)  # the same split: as before
    cl.caps[(tight, 5)] = {"rate_scale": 1.5}
    assert cl.hint(tight, 2, (shipped,)) == 1.5  # the job's own nearest split first, unscaled
