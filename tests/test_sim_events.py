"""Named events (pddbench/sim/engine.py): every event the simulator schedules has a kind, the
handler scheduled with a kind is named after it, and the run summary counts them by kind
(sim_events_by_kind, documented in docs/metrics.md)."""

from __future__ import annotations

import ast
import re

import pytest

from pddbench.measure.runner import simulate_summary
from pddbench.schema.scenario import Scenario, load_scenario
from pddbench.sim import engine
from pddbench.sim.engine import KIND_NAMES, N_KINDS, EventLoop
from tests.conftest import REPO

SIM = REPO / "pddbench" / "sim"
SIMULATOR_KINDS = set(KIND_NAMES) - {"unnamed"}


def _summary(name: str, requests: int = 500) -> dict:
    return simulate_summary(load_scenario(name, [f"workload.synth.requests={requests}", "workload.source=synth"]))[1]


@pytest.fixture(scope="module")
def runs() -> dict[str, dict]:
    return {name: _summary(f"paper/{name}") for name in ("same-dc-pd", "cross-dc-pd", "pdd-one-shot", "pdd-catch-up")}


def test_the_counts_by_kind_sum_to_the_total_and_name_every_simulator_kind(runs):
    for name, s in runs.items():
        by_kind = s["sim_events_by_kind"]
        assert list(by_kind) == sorted(SIMULATOR_KINDS), name  # every kind, sorted; never `unnamed`
        assert sum(by_kind.values()) == s["sim_events"] > 0, name
        assert by_kind["arrival"] == s["requests_total"], name
        assert by_kind["prefill_step"] == sum(i["steps"] for n, i in s["instances"].items() if n.startswith("P"))


def test_a_handoff_is_a_handoff_event_and_pd_has_none(runs):
    for name in ("pdd-one-shot", "pdd-catch-up"):
        s, by_kind = runs[name], runs[name]["sim_events_by_kind"]
        modes = s["handoff_modes"]
        handed = modes.get("one_shot", 0) + modes.get("catch_up", 0)
        assert handed > 0, f"{name}: no request was handed over at this size: enlarge the run"
        assert by_kind["handoff"] == handed, name  # one final handoff message per request MD took over
        assert by_kind["relay_kv_arrived"] > 0 and by_kind["md_kv_arrived"] > 0, name
    assert runs["pdd-one-shot"]["sim_events_by_kind"]["catch_up_round"] == 0
    assert runs["pdd-catch-up"]["sim_events_by_kind"]["catch_up_round"] > 0
    for name in ("same-dc-pd", "cross-dc-pd"):
        by_kind = runs[name]["sim_events_by_kind"]
        relay_kinds = ("handoff", "catch_up_tokens", "catch_up_round", "relay_kv_arrived", "md_kv_arrived")
        assert all(by_kind[k] == 0 for k in relay_kinds), (name, by_kind)
        assert by_kind["kv_arrived"] == runs[name]["requests_total"]  # each prompt's KV reaches its D once


def test_busy_decoder_and_pull_at_step_kinds_appear_when_modelled():
    s = _summary("paper/same-dc-pd", 200)
    assert s["sim_events_by_kind"]["pull_start"] == s["sim_events_by_kind"]["kv_at_busy_decoder"] == 0
    block = "twin_calibration" if "twin_calibration" in Scenario.model_fields else "deployment"
    sc = load_scenario("paper/same-dc-pd", ["workload.synth.requests=200", "workload.source=synth",
                                            f"{block}.kv_pull_at_decode_step=true", f"{block}.kv_pull_busy_extra_ms=2"])
    by_kind = simulate_summary(sc)[1]["sim_events_by_kind"]
    assert by_kind["pull_start"] > 0 and by_kind["kv_at_busy_decoder"] > 0
    assert by_kind["kv_arrived"] == 200  # a busy decoder's KV still arrives once, later


def test_the_documented_kinds_are_the_summary_kinds():
    text = (REPO / "docs" / "metrics.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `sim_events_by_kind` |"))
    named = set(re.findall(r"`([a-z_]+)`", row.split("|")[2]))
    assert set(KIND_NAMES) <= named, f"kinds docs/metrics.md does not name: {sorted(set(KIND_NAMES) - named)}"


def test_kind_constants_names_and_counters_agree():
    assert len(KIND_NAMES) == N_KINDS == len(set(KIND_NAMES))
    for i, name in enumerate(KIND_NAMES):
        assert getattr(engine, name.upper()) == i
    size = re.search(r"_by_kind\[(\d+)\]", (SIM / "engine.pxd").read_text())
    assert size and int(size.group(1)) == N_KINDS, "engine.pxd's _by_kind array must have N_KINDS counters"


def test_an_unknown_kind_is_refused_and_unnamed_events_are_counted_apart():
    loop = EventLoop()
    for bad in (-1, N_KINDS):
        with pytest.raises(ValueError, match="unknown event kind"):
            loop.schedule(bad, 1.0, print)
        with pytest.raises(ValueError, match="unknown event kind"):
            loop.schedule_after(bad, 1.0, print)
    seen = []
    loop.schedule(engine.HANDOFF, 2.0, seen.append, "handoff")
    loop.at(1.0, seen.append, "unnamed")
    loop.schedule_after(engine.ARRIVAL, 2.0, seen.append, "arrival")  # same time: in scheduling order
    loop.run()
    assert seen == ["unnamed", "handoff", "arrival"]
    by_kind = loop.events_by_kind()
    assert (by_kind["handoff"], by_kind["arrival"], by_kind["unnamed"], loop.events) == (1, 1, 1, 3)
    assert sum(by_kind.values()) == loop.events


# where a scheduling call takes its handler, counted from the kind's argument
HANDLER_AFTER_KIND = {"schedule": 2, "schedule_after": 2, "send_as": 2, "pull": 1, "_send": 1}
# the handler is a variable: when_decoder_pulls starts whichever pull its caller asked for
# (Deployment._send, PDD._start_md_pull)
DYNAMIC = {("PULL_START", "start")}


def _kind_uses() -> list[tuple[str, int, str, str]]:
    """(file, line, kind, handler name) of each call in pddbench/sim that passes a kind constant."""
    constants = {name.upper() for name in KIND_NAMES} - {"UNNAMED"}
    uses = []
    for path in sorted(SIM.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            for i, arg in enumerate(node.args):
                if not (isinstance(arg, ast.Name) and arg.id in constants):
                    continue
                func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "?")
                assert func in HANDLER_AFTER_KIND, f"{path.name}:{node.lineno}: {func}() takes a kind: add it here"
                handler = node.args[i + HANDLER_AFTER_KIND[func]]
                name = handler.attr if isinstance(handler, ast.Attribute) else handler.id
                uses.append((path.name, node.lineno, arg.id, name))
    return uses


def test_each_kinds_handler_is_named_after_it_and_the_simulator_schedules_no_unnamed_event():
    uses = _kind_uses()
    misnamed = [f"{f}:{n}: {kind} -> {h}" for f, n, kind, h in uses
                if kind.lower() not in h.lower() and (kind, h) not in DYNAMIC]
    assert not misnamed, misnamed
    used = {kind.lower() for *_, kind, _ in uses}
    assert used == SIMULATOR_KINDS, f"kinds never scheduled: {sorted(SIMULATOR_KINDS - used)}"
    # at() / after() / send() schedule UNNAMED events: for tests and tools only
    unnamed = [f"{path.name}:{node.lineno}: .{node.func.attr}()" for path in sorted(SIM.glob("*.py"))
               for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
               and node.func.attr in ("at", "after", "send")]
    assert not unnamed, f"events scheduled without a kind (use schedule / schedule_after / send_as): {unnamed}"
