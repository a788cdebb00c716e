import pytest

from pddbench.core.errors import InputError, UserError
from pddbench.schema.scenario import apply_overrides, load_scenario

BASE = """\
name: t
seed: 3
workload:
  synth:
    requests: 100
sla:
  ttft_ms: 1500
  tpot_ms: 80
"""


def _write(tmp_path, text):
    p = tmp_path / "s.yaml"
    p.write_text(text)
    return p


def test_loads_and_overrides(tmp_path):
    sc = load_scenario(_write(tmp_path, BASE), ["sla.ttft_ms=900", "workload.synth.seed=9", "seed=4"])
    assert (sc.sla.ttft_ms, sc.workload.synth.seed, sc.seed, sc.sla.tpot_ms) == (900, 9, 4, 80)


def test_validation_error_names_file_line_field(tmp_path):
    path = _write(tmp_path, BASE.replace("tpot_ms: 80", "tpot_ms: -1"))
    with pytest.raises(InputError) as exc:
        load_scenario(path)
    assert exc.value.field == "sla.tpot_ms" and exc.value.line == 8 and "valid range: 0.001 <= tpot_ms <= 1e+09" in str(exc.value)


def test_unknown_key_refused(tmp_path):
    with pytest.raises(InputError) as exc:
        load_scenario(_write(tmp_path, BASE + "slaa: {}\n"))
    assert exc.value.field == "slaa" and exc.value.line == 9


def test_bad_override_reports_set(tmp_path):
    with pytest.raises(InputError) as exc:
        load_scenario(_write(tmp_path, BASE), ["sla.ttft_ms=fast"])
    assert "from --set" in str(exc.value) and exc.value.field == "sla.ttft_ms"
    with pytest.raises(UserError):
        load_scenario(_write(tmp_path, BASE), ["sla.ttft_ms"])


def test_invalid_yaml(tmp_path):
    with pytest.raises(InputError) as exc:
        load_scenario(_write(tmp_path, "a: [1, 2\n"))
    assert "not valid YAML" in str(exc.value)


def test_apply_overrides_creates_nested():
    assert apply_overrides({}, ["a.b.c=[1, 2]", "a.d=x"]) == {"a": {"b": {"c": [1, 2]}, "d": "x"}}


PDD_POOLS = BASE + """\
model: {name: m, params_total_b: 1, params_active_b: 1, layers: 1, hidden_size: 8, kv_bytes_per_token: 10}
chips:
  A: {peak_tflops: 1000, memory_gb: 80, memory_bw_tbps: 3, interconnect_gbps: 900, price_per_hour: 2}
deployment:
  kind: pdd
  prefill: {chip: A, instances: 1}
  relay: {chip: A, instances: 1}
  main: {chip: A, instances: 2}
"""


@pytest.mark.parametrize("groups, says", [
    ("{c: [prefill]}", "'decode', 'relay' or 'main'"),  # only decoders share a core
    ("{c: [relay, main]}", "relay (1), main (2)"),
    ("{c: [decode, relay]}", "no decode pool"),
    ("{a: [relay], b: [relay]}", "in both 'a' and 'b'"),
])
def test_core_groups_are_decode_pools_of_equal_size(tmp_path, groups, says):
    with pytest.raises(InputError) as exc:
        load_scenario(_write(tmp_path, PDD_POOLS + f"twin_calibration:\n  core_groups: {groups}\n"))
    assert says in str(exc.value)
    equal = PDD_POOLS.replace("main: {chip: A, instances: 2}", "main: {chip: A, instances: 1}")
    sc = load_scenario(_write(tmp_path, equal + "twin_calibration:\n  core_groups: {c: [relay, main]}\n"))
    assert sc.twin_calibration.core_group_of("main") == "c" and sc.twin_calibration.core_group_of("prefill") is None


MOVED = ["kv_pull_at_decode_step: true", "kv_pull_busy_extra_ms: 3", "kv_pull_relay_busy_extra_ms: 3",
         "core_shared_step_factor: 1.5", "relay_step_factor: 2", "second_prefill_for_md: true"]


@pytest.mark.parametrize("line", MOVED)
def test_calibration_keys_under_deployment_say_where_they_moved(tmp_path, line):
    key = line.split(":")[0]
    with pytest.raises(InputError) as exc:
        load_scenario(_write(tmp_path, PDD_POOLS + f"  {line}\n"))
    assert (exc.value.field, exc.value.line) == (f"deployment.{key}", 17)
    assert f"moved to twin_calibration.{key}" in str(exc.value) and "\n" not in str(exc.value)
    with pytest.raises(InputError, match=f"twin_calibration.{key}.*from --set"):
        load_scenario(_write(tmp_path, PDD_POOLS), [f"deployment.{line.replace(': ', '=')}"])
    # where they live now, they load
    moved = load_scenario(_write(tmp_path, PDD_POOLS), [f"twin_calibration.{line.replace(': ', '=')}"])
    assert getattr(moved.twin_calibration, key) == load_scenario(
        _write(tmp_path, PDD_POOLS + f"twin_calibration:\n  {line}\n")).twin_calibration.model_dump()[key]


def test_a_pools_core_group_says_what_to_write(tmp_path):
    text = PDD_POOLS.replace("main: {chip: A, instances: 2}", "main: {chip: A, instances: 1, core_group: cpu0}")
    text = text.replace("relay: {chip: A, instances: 1}", "relay: {chip: A, instances: 1, core_group: cpu0}")
    with pytest.raises(InputError) as exc:
        load_scenario(_write(tmp_path, text))
    assert exc.value.field == "deployment.relay.core_group" and exc.value.line == 15
    assert "twin_calibration.core_groups: {cpu0: [relay, main]}" in str(exc.value)


def test_an_old_scenario_file_is_one_line_and_exit_2(tmp_path):
    from tests.conftest import run_cli

    res = run_cli("run", _write(tmp_path, PDD_POOLS + "  kv_pull_busy_extra_ms: 3\n"), "--out", tmp_path / "out")
    said = [ln for ln in (res.stdout + res.stderr).splitlines() if "Warning" not in ln and "extension_of" not in ln]
    assert res.returncode == 2 and len(said) == 1 and "twin_calibration.kv_pull_busy_extra_ms" in said[0], said
    assert not (tmp_path / "out").exists()


def test_saved_scenario_lists_the_calibration_only_when_set(tmp_path):
    import yaml

    from pddbench.schema.runtime_config import TwinCalibration
    from pddbench.schema.scenario import Scenario

    plain = load_scenario("paper/pdd").model_dump(mode="json")
    assert "twin_calibration" not in plain and "core_group" not in str(plain) and "kv_pull" not in str(plain)
    set_one = load_scenario("paper/pdd", ["twin_calibration.kv_pull_busy_extra_ms=3"]).model_dump(mode="json")
    assert set_one["twin_calibration"] == {**TwinCalibration().model_dump(mode="json"), "kv_pull_busy_extra_ms": 3.0}
    # a saved scenario reads back as it was, with or without the section
    for data in (plain, set_one):
        again = Scenario.model_validate(yaml.safe_load(yaml.safe_dump(data))).model_dump(mode="json")
        assert again == data


def test_saved_run_scenario_has_no_calibration_section(tmp_path):
    from tests.conftest import run_cli

    res = run_cli("run", "paper/same-dc-pd", "--set", "workload.synth.requests=30", "--out", tmp_path / "run")
    assert res.returncode == 0, res.stderr[-2000:]
    saved = (tmp_path / "run" / "scenario.yaml").read_text()
    assert "twin_calibration" not in saved and "core_group" not in saved and "kv_pull" not in saved
    assert load_scenario(tmp_path / "run" / "scenario.yaml").twin_calibration.kv_pull_busy_extra_ms == 0.0


@pytest.mark.parametrize("section, says", [
    ("model: {name: m, params_total_b: 1, params_active_b: 1, layers: 1, hidden_size: 8, kv_bytes_per_token: 10}\n",
     "config.json"),
    ("twin_calibration: {relay_step_factor: 2}\n", "simulator's"),
])
def test_a_live_scenario_states_no_simulator_settings(tmp_path, section, says):
    with pytest.raises(InputError) as exc:
        load_scenario(_write(tmp_path, BASE + "runtime: live\ndeployment: {kind: pdd}\n" + section))
    assert says in str(exc.value) and exc.value.field == section.split(":")[0] and exc.value.line == 11


def test_unknown_chip_in_deployment(tmp_path):
    text = BASE + """\
chips:
  A: {peak_tflops: 1000, memory_gb: 80, memory_bw_tbps: 3, interconnect_gbps: 900, price_per_hour: 2}
deployment:
  kind: same_dc_pd
  prefill: {chip: A, instances: 1}
  decode: {chip: Z, instances: 1}
"""
    with pytest.raises(InputError) as exc:
        load_scenario(_write(tmp_path, text))
    assert "'Z'" in str(exc.value)


def test_workload_states_its_source(tmp_path):
    both = BASE.replace("workload:\n", "workload:\n  fixed: {requests: 10}\n")
    with pytest.raises(InputError) as exc:
        load_scenario(_write(tmp_path, both))
    assert "workload.source" in str(exc.value) and "synth" in str(exc.value) and "fixed" in str(exc.value)
    sc = load_scenario(_write(tmp_path, both), ["workload.source=fixed"])
    assert sc.workload.resolved_source() == "fixed"
    with pytest.raises(InputError, match="workload.trace is not set"):
        load_scenario(_write(tmp_path, BASE), ["workload.source=trace"])
    with pytest.raises(InputError, match="workload.trace"):
        load_scenario(_write(tmp_path, BASE), ["workload.trace=", "workload.source=trace"])


def test_old_live_deployment_key_says_what_to_write(tmp_path):
    text = BASE + "runtime: live\nlive:\n  deployment: pdd\n"
    with pytest.raises(InputError, match="deployment.kind"):
        load_scenario(_write(tmp_path, text))


def test_live_only_kind_is_refused_by_the_simulator(tmp_path):
    with pytest.raises(InputError, match="runs live only"):
        load_scenario(_write(tmp_path, BASE + "deployment:\n  kind: colocated\n"))


def test_shipped_scenario_by_name_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert load_scenario("paper/pdd").deployment.kind == "pdd"
    assert load_scenario("live/pdd.yaml").deployment.relay.max_batch_seqs == 8
    with pytest.raises(InputError) as exc:
        load_scenario("paper/no-such")
    assert "paper/pdd" in str(exc.value)  # the message lists what is shipped


def test_commands_default_to_shipped_scenarios_from_any_directory(tmp_path):
    from tests.conftest import run_cli

    res = run_cli("sim-speed", "--requests", "300", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert '"requests": 300' in res.stdout
