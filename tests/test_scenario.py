import pytest

from pddbench.errors import InputError, UserError
from pddbench.scenario import apply_overrides, load_scenario

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
    assert exc.value.field == "sla.tpot_ms" and exc.value.line == 8 and "greater than 0" in str(exc.value)


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


@pytest.mark.parametrize("pools, says", [
    ("  prefill: {chip: A, instances: 1, core_group: c}\n  relay: {chip: A, instances: 1}\n"
     "  main: {chip: A, instances: 1}\n", "only decode pools"),
    ("  prefill: {chip: A, instances: 1}\n  relay: {chip: A, instances: 1, core_group: c}\n"
     "  main: {chip: A, instances: 2, core_group: c}\n", "relay (1), main (2)"),
])
def test_core_groups_are_decode_pools_of_equal_size(tmp_path, pools, says):
    text = BASE + """\
chips:
  A: {peak_tflops: 1000, memory_gb: 80, memory_bw_tbps: 3, interconnect_gbps: 900, price_per_hour: 2}
deployment:
  kind: pdd
""" + pools
    with pytest.raises(InputError) as exc:
        load_scenario(_write(tmp_path, text))
    assert says in str(exc.value)
    with pytest.raises(InputError, match="needs a model"):  # without the groups the next check speaks
        load_scenario(_write(tmp_path, text.replace("core_group: c", "core_group: null")))


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
