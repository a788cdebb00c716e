"""Property (issue 40, class 1): every value the scenario schema accepts simulates to the end, and
every other is refused with its valid range; never a hang, never an internal error. Extreme
floats (±1e-300 .. 1e300, subnormals, inf, nan, 0 and each field's own bounds) are drawn for
every numeric field of the scenario schema, found by walking the pydantic models
(pddbench/schema/ranges.py), not listed by hand; a short simulation (a few requests) must finish
under the watchdog and a wall-clock alarm, or the scenario be refused with a UserError (exit 2).

A bounded number of examples runs in the normal suite; PDDBENCH_FUZZ_EXAMPLES=2000 (nightly)
runs more."""

from __future__ import annotations

import math
import os
import signal
import sys

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netem.profile import LinkProfile
from pddbench.core.errors import SimulationStalled, UserError
from pddbench.schema.ranges import field_bounds, numeric_fields, with_range
from pddbench.schema.scenario import Scenario, load_scenario
from pddbench.sim.engine import ARRIVAL, DECODE_FINISH, EventLoop
from pddbench.sim.run import simulate

EXAMPLES = int(os.environ.get("PDDBENCH_FUZZ_EXAMPLES", "0"))
PROPS = settings(max_examples=EXAMPLES or 30, deadline=None, derandomize=not EXAMPLES,
                 suppress_health_check=list(HealthCheck))
WALL_S = 60  # one example's wall-clock ceiling: a loaded CI machine, pure Python; a hang hits it

EXTREMES = [0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 1e-300, -1e-300, 1e-12, 1e300, -1e300,
            1.7976931348623157e308, math.inf, -math.inf, math.nan]
BASES = {  # a few requests each: the relay pipeline with the WAN, and a PD cluster with an offload line
    "paper/pdd": ["workload.source=synth", "workload.synth.requests=6"],
    "prfaas/homogeneous-pd": ["workload.synth.requests=6"],
}


def _resolved(name: str) -> dict:
    """The base scenario as a plain mapping with its link profiles inline, so that every numeric
    field (the WAN's included) is a key to set."""
    data = load_scenario(name, BASES[name]).model_dump(mode="json", exclude_none=True)
    data.pop("live", None)  # a sim scenario states no live settings (they are validated, not used)
    return data


def _settable(data: dict) -> list[tuple]:
    """Every numeric field of the schema that this scenario has a place for (its parent block is
    there), chips by their names."""
    out = []
    for loc, _number, _bounds in numeric_fields(Scenario):
        if loc[0] == "chips":
            continue
        node = data
        for part in loc[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            out.append(loc)
    for chip in data.get("chips", {}):
        out += [("chips", chip, name) for name in ("peak_tflops", "memory_gb", "memory_bw_tbps",
                                                   "interconnect_gbps", "price_per_hour")]
    return out


CASES = {name: (_resolved(name), _settable(_resolved(name))) for name in BASES}
WORK_SIZES = {"requests", "max_requests"}  # how much to simulate: kept small, as the bases set them


@st.composite
def extreme_scenarios(draw) -> tuple[dict, list[tuple[tuple, object]]]:
    name = draw(st.sampled_from(sorted(CASES)))
    data, fields = CASES[name]
    data = yaml.safe_load(yaml.safe_dump(data))  # a fresh copy
    changes = []
    for loc in draw(st.lists(st.sampled_from(fields), min_size=1, max_size=3, unique=True)):
        if loc[-1] in WORK_SIZES:
            continue
        number, bounds = field_bounds(Scenario, loc)
        edges = [] if bounds is None or number is int else [b for b in (bounds[0], bounds[2]) if b is not None]
        value = draw(st.sampled_from(edges) if edges and draw(st.booleans()) else st.sampled_from(EXTREMES))
        node = data
        for part in loc[:-1]:
            node = node[part]
        node[loc[-1]] = value
        changes.append((loc, value))
    return data, changes


class _WallClock(Exception):
    pass


def _alarm(_signum, _frame):
    raise _WallClock


@PROPS
@given(extreme_scenarios())
def test_extreme_values_simulate_to_the_end_or_are_refused_with_their_range(tmp_path_factory, case):
    data, changes = case
    path = tmp_path_factory.mktemp("sc") / "scenario.yaml"
    path.write_text(yaml.safe_dump(data))  # inf and nan as YAML writes them: .inf, .nan
    try:
        sc = load_scenario(path)
    except UserError as exc:
        assert not isinstance(exc, SimulationStalled)
        assert "\n" not in str(exc) and "field '" in str(exc), str(exc)
        if "range" in str(exc):
            assert "valid range:" in str(exc)
        return
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(WALL_S)  # heard inside the compiled loop too (it checks for signals)
    try:
        records, facts = simulate(sc)
    except _WallClock:
        pytest.fail(f"no end within {WALL_S} s of wall clock: {changes}")
    except SimulationStalled as exc:
        pytest.fail(f"accepted but stalled: {changes}: {exc}")
    except UserError as exc:  # refused where the simulator reads it (e.g. weights that do not fit)
        assert "\n" not in str(exc), str(exc)
        return
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert len(records) == 6 and not facts["interrupted"], changes
    assert math.isfinite(facts["sim_end_ms"]), (changes, facts["sim_end_ms"])


def test_the_walk_finds_the_numeric_fields_of_every_section():
    found = {".".join(loc) for loc, _n, _b in numeric_fields(Scenario)}
    for field in ("sla.ttft_ms", "network.wan.rate_gbps", "network.wan.outages.min_ms", "latency.compute_efficiency",
                  "workload.synth.rate_rps", "workload.fixed.rate_rps", "deployment.prefill.kv_memory_fraction",
                  "policy.relay_ttft_budget_fraction", "twin_calibration.relay_step_factor"):
        assert field in found
    assert field_bounds(Scenario, ("chips", "H20", "peak_tflops"))[1] is not None
    assert field_bounds(Scenario, ("network", "wan", "transfer_latency_ms", 0))[1] is not None


@pytest.mark.parametrize("override, field", [
    ("sla.ttft_ms=1e400", "sla.ttft_ms"), ("sla.tpot_ms=.nan", "sla.tpot_ms"), ("sla.ttft_ms=1e300", "sla.ttft_ms"),
    ("workload.synth.rate_rps=5e-324", "workload.synth.rate_rps"),
    ("network.wan={rate_gbps: 1e300}", "network.wan.rate_gbps"),
    ("network.wan={rate_gbps: 1e-300}", "network.wan.rate_gbps"),
    ("latency.compute_efficiency=1e-300", "latency.compute_efficiency"),
])
def test_an_extreme_value_is_refused_naming_the_field_and_its_range(override, field):
    with pytest.raises(UserError) as info:
        load_scenario("paper/pdd", [override])
    msg = str(info.value)
    assert f"field '{field}'" in msg and "valid range:" in msg, msg


def test_a_scenario_built_in_code_refuses_non_finite_numbers_too():
    """optimize's trials and sweep points validate a mapping, not a file: the schema itself refuses."""
    data = load_scenario("paper/pdd").model_dump(mode="json")
    data["sla"]["ttft_ms"] = math.inf
    with pytest.raises(ValueError, match="finite"):
        Scenario.model_validate(data)
    with pytest.raises(ValueError, match="finite"):
        LinkProfile.model_validate({"rate_gbps": math.nan})
    assert "valid range: 0.001 <= ttft_ms <= 1e+09" in with_range(Scenario, ("sla", "ttft_ms"), "bad")


def test_the_issue_repro_finishes():
    """A tiny KV (1 byte per token) on RDMA: a transfer's last fraction of a byte took less time than
    simulated time resolves at ~46 s, so its drain was rescheduled at the same instant for ever."""
    sc = load_scenario("prfaas/homogeneous-pd", [
        "model.kv_bytes_per_token=1", "workload.synth.requests=200", "deployment.prefill.instances=4",
        "deployment.decode.instances=2", "workload.synth.rate_rps=2"])
    records, facts = simulate(sc)
    assert len(records) == 200 and (records["failure_reason"] == "").all()


def test_the_watchdog_names_a_loop_that_makes_no_progress():
    loop = EventLoop()
    loop.stall_events = 1000

    def spin() -> None:
        loop.schedule(3, loop.now, spin)  # a link drain at the same instant, for ever

    loop.schedule(ARRIVAL, 5.0, spin)
    with pytest.raises(SimulationStalled, match="events in a row at simulated time 5.0 ms .*link_drain"):
        loop.run()
    assert loop.events < 1100

    steps = EventLoop()  # zero-length decode steps at one instant move requests on: not a stall
    steps.stall_events = 10
    left = [100]

    def step() -> None:
        left[0] -= 1
        if left[0]:
            steps.schedule(DECODE_FINISH, steps.now, step)

    steps.schedule(DECODE_FINISH, 1.0, step)
    steps.run()
    assert steps.events == 100


def test_a_stall_is_one_line_exit_1_naming_the_request(monkeypatch, tmp_path):
    from pddbench.sim import run as sim_run
    from tests.inprocess import cli

    loops = []
    build_cluster, make_deployment = sim_run.build_cluster, sim_run.make_deployment
    monkeypatch.setattr(sim_run, "build_cluster", lambda sc, loop: loops.append(loop) or build_cluster(sc, loop))

    class Spinning:  # request 2's arrival starts a loop that never moves time or any request on
        def __init__(self, deployment):
            self.deployment = deployment

        def arrive(self, req):
            self.deployment.arrive(req)
            if req.request_id == 2:
                spin(req)

    def spin(req):
        loops[0].schedule(3, loops[0].now, spin, req)

    monkeypatch.setattr(sim_run, "make_deployment", lambda sc, cluster: Spinning(make_deployment(sc, cluster)))
    monkeypatch.setattr(sim_run, "stall_limit", lambda sc, n: 10_000)
    res = cli("run", "paper/pdd", "--set", "workload.source=synth", "--set", "workload.synth.requests=5",
              "--out", str(tmp_path / "run"))
    assert res.code == 1, res.err
    assert res.one_line and "stalled" in res.err and "request 2 " in res.err, res.err
    assert not (tmp_path / "run").exists()
