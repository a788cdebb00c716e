"""Engines declared in the scenario (issue 28.1, 28.6): the shipped live scenarios declare exactly
the fixed layout; an impossible layout is refused in one line before anything starts; a GPU engine
gets device ids and vLLM's GPU arguments and none of the CPU-only settings; and a declared layout
other than the fixed one runs on real vLLM engines."""

import json

import pytest
import yaml

from pddbench.live.declared import declared_specs
from pddbench.live.engines import ENGINE_SITE, EngineSpec, vllm_available
from pddbench.live.placement import PLACEMENTS
from pddbench.schema.runtime_config import LIVE_ROLES
from pddbench.schema.scenario import load_scenario
from tests.conftest import REPO, run_cli

SHIPPED = ["colocated", "same-dc-pd", "cross-dc-pd", "pdd", "pdd-catch-up", "pdd-one-shot"]


def test_the_roles_table_is_the_placements_roles():
    for kind, placement in PLACEMENTS.items():
        assert [s.name for s in placement.engines("/m", 8300)] == list(LIVE_ROLES[kind])


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_live_scenarios_declare_the_fixed_layout(name):
    sc = load_scenario(f"live/{name}")
    assert sc.live.engines is not None
    declared = declared_specs(sc.deployment.kind, sc.live, "/model")
    fixed = PLACEMENTS[sc.deployment.kind].engines("/model", sc.live.port_base)
    assert declared == fixed
    for a, b in zip(declared, fixed):  # what is started: the same command line and environment
        assert a.command() == b.command() and a.env() == b.env()


def _scenario(tmp_path, kind: str, engines: list, **live) -> str:
    base = {"extends": str(REPO / "scenarios" / "live" / "base.yaml"), "name": "declared",
            "deployment": {"kind": kind}, "live": {"engines": engines, **live}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(base))
    return str(path)


P = {"role": "P", "datacenter": "a", "cpus": [0]}
D = {"role": "D", "datacenter": "a", "cpus": [1]}


@pytest.mark.parametrize("kind,engines,live,says", [
    ("same_dc_pd", [P], {}, "missing D"),
    ("pdd", [P, {**D, "role": "RLD"}, {**D, "role": "D"}], {}, "D is not one of its roles"),
    ("same_dc_pd", [P, P, D], {}, "role P is declared 2 times"),
    ("pdd", [P, {**D, "role": "RLD", "instances": 2}, {**D, "role": "MD", "datacenter": "b"}], {},
     "2 instances of RLD; a pdd deployment's front drives one RLD"),
    ("same_dc_pd", [{**P, "port": 9000, "instances": 2}, {**D, "port": 9001}], {}, "D's port 9001 is already P2's port"),
    ("same_dc_pd", [{**P, "port": 9001}, {**D, "port": 9001}], {}, "port 9001 is already P's port"),
    ("same_dc_pd", [P, {**D, "port": 8300}], {}, "the front's"),
    ("same_dc_pd", [{**P, "port": 9005}, {**D, "kv_connector": {"side_channel_port": 9005}}], {}, "side channel 9005"),
    ("cross_dc_pd", [P, D], {}, "D in datacenter a; a cross_dc_pd deployment puts D in b"),
    ("pdd", [P, {**D, "role": "RLD", "datacenter": "b"}, {**D, "role": "MD", "datacenter": "b"}], {}, "RLD in datacenter b"),
    ("same_dc_pd", [{**P, "gpus": [0]}, D], {}, "gpus given for a cpu engine"),
    ("same_dc_pd", [{**P, "cpus": [-1]}, D], {}, "greater than or equal to 0"),
    ("same_dc_pd", [{"role": "P", "datacenter": "a", "device": "gpu", "gpus": [0, 0]}, D], {}, "names a device twice"),
    ("same_dc_pd", [{**P, "kv_connector": {"buffer_device": "cuda"}}, D], {}, "buffer_device cuda on a cpu engine"),
    ("same_dc_pd", [{**P, "vllm": {"tensor_parallel_size": 2}}, D], {}, "tensor_parallel_size is a GPU setting"),
    ("same_dc_pd", [{**P, "port": 65535, "instances": 2}, D], {}, "P2's port would be 65536"),
    ("same_dc_pd", [{"role": "P", "datacenter": "a", "device": "gpu", "gpus": [0, 1],
                     "vllm": {"tensor_parallel_size": 4}}, D], {}, "tensor_parallel_size 4 but 2 gpus"),
    ("same_dc_pd", [{"role": "P", "datacenter": "a", "device": "gpu"}, D], {}, "needs gpus"),
    ("same_dc_pd", [{**P, "model": "/a"}, {**D, "model": "/b"}], {"model_dir": "/a"}, "different models"),
    ("same_dc_pd", [{**P, "model": "org/name"}, {**D, "model": "org/name"}], {}, "give live.model_dir too"),
    ("same_dc_pd", [P, D], {"attach": {"P": {"url": "http://127.0.0.1:9"}}, "model_dir": "/m"}, "not both"),
])
def test_an_impossible_layout_is_refused_in_one_line(tmp_path, kind, engines, live, says):
    res = run_cli("run", _scenario(tmp_path, kind, engines, **live), "--out", tmp_path / "r")
    assert res.returncode == 2 and "Traceback" not in res.stderr and says in res.stderr, res.stderr
    assert not (tmp_path / "r").exists()


def test_role_of_an_engine_name():
    from pddbench.schema.runtime_config import role_of

    assert [role_of(n) for n in ("E0", "P", "P2", "D12", "RLD", "MD")] == ["E0", "P", "P", "D", "RLD", "MD"]


@pytest.mark.parametrize("inventory,says", [
    ("P: {url: 'http://h:abc'}\nD: {url: 'http://h:1'}\n", "field 'P.url'"),
    ("P: {url: 'http://h:99999'}\nD: {url: 'http://h:1'}\n", "port 99999 is not between 1 and 65535"),
    ("P: {url: 'https://h:8000'}\nD: {url: 'http://h:1'}\n", "field 'P.url'"),
    ("P: {url: 'http://h:1', kv_side_channel: 'h:70000'}\n", "port 70000"),
    ("[1, 2]\n", "expected a mapping of role to engine"),
])
def test_a_bad_inventory_is_refused_in_one_line(tmp_path, inventory, says):
    inv = tmp_path / "fleet.yaml"
    inv.write_text(inventory)
    res = run_cli("serve", "pd-proxy", "live/same-dc-pd", "--inventory", inv, "--set", "live.model_dir=/m")
    assert res.returncode == 2 and "Traceback" not in res.stderr and says in res.stderr, res.stderr
    assert str(inv) in res.stderr


def test_a_gpu_engine_gets_devices_and_no_cpu_settings(tmp_path):
    sc = load_scenario(_scenario(tmp_path, "pdd", [
        {"role": "P", "datacenter": "a", "device": "gpu", "gpus": [0, 1], "model": "org/small",
         "vllm": {"gpu_memory_utilization": 0.8, "max_model_len": 4096, "extra_args": ["--max-num-seqs", "64"]}},
        {"role": "RLD", "datacenter": "a", "device": "gpu", "gpus": [2], "model": "org/small"},
        {"role": "MD", "datacenter": "b", "device": "cpu", "cpus": [0, 1], "model": "org/small"}], model_dir="/copy"))
    p, rld, md = declared_specs("pdd", sc.live, "/copy")
    cmd = p.command()
    assert cmd[cmd.index("--model") + 1] == "org/small" and "--enforce-eager" not in cmd
    assert cmd[cmd.index("--tensor-parallel-size") + 1] == "2" and cmd[cmd.index("--gpu-memory-utilization") + 1] == "0.8"
    assert cmd[cmd.index("--max-model-len") + 1] == "4096" and cmd[-2:] == ["--max-num-seqs", "64"]
    kv = json.loads(cmd[cmd.index("--kv-transfer-config") + 1])
    assert kv == {"kv_connector": "NixlConnector", "kv_role": "kv_producer", "kv_buffer_device": "cuda"}
    env = p.env()
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1" and p.cores is None
    for cpu_only in ("VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND", "UCX_TLS"):
        assert cpu_only not in env or env.get(cpu_only) == __import__("os").environ.get(cpu_only)
    assert str(ENGINE_SITE) not in env.get("PYTHONPATH", "")
    assert rld.command()[rld.command().index("--tensor-parallel-size") + 1] == "1"
    # the CPU engine beside them keeps every CPU setting, pinned to both its cores
    md_env = md.env()
    assert md.cores == {0, 1} and md_env["VLLM_CPU_OMP_THREADS_BIND"] == "0,1" and "--enforce-eager" in md.command()
    assert md_env["VLLM_CPU_KVCACHE_SPACE"] == "1" and str(ENGINE_SITE) in md_env["PYTHONPATH"]
    assert "CUDA_VISIBLE_DEVICES" not in md_env or md_env["CUDA_VISIBLE_DEVICES"] == __import__("os").environ.get(
        "CUDA_VISIBLE_DEVICES")
    assert md.netns is not None and p.netns is not None and md.netns != p.netns  # MD across the WAN


def test_several_p_and_d_instances_are_numbered_and_all_behind_the_proxy(tmp_path):
    from pddbench.live.deploy import pd_proxy_front

    sc = load_scenario(_scenario(tmp_path, "cross_dc_pd", [{"role": "P", "datacenter": "a", "cpus": [0], "instances": 3},
                                                           {"role": "D", "datacenter": "b", "cpus": [1], "instances": 2}]))
    specs = declared_specs("cross_dc_pd", sc.live, "/m")
    assert [s.name for s in specs] == ["P", "P2", "P3", "D", "D2"]
    assert [s.port for s in specs] == [8301, 8302, 8303, 8304, 8305]
    assert [s.side_channel_port for s in specs] == [8401, 8402, 8403, 8404, 8405]
    assert {s.netns for s in specs[:3]} == {"pddb-dc-a"} and {s.netns for s in specs[3:]} == {"pddb-dc-b"}
    _module, args, _log = pd_proxy_front(sc, specs, 2048, tmp_path)
    assert [args[i + 1] for i, a in enumerate(args) if a == "--prefill"] == [s.url for s in specs[:3]]
    assert [args[i + 1] for i, a in enumerate(args) if a == "--decode"] == [s.url for s in specs[3:]]


def test_fixed_layout_engines_are_unchanged_cpu_engines():
    spec = EngineSpec("P", "/m", 8301, cpu=0, kv_role="kv_producer", side_channel_port=8401)
    assert not spec.on_gpu and spec.cores == {0} and "--enforce-eager" in spec.command()
    assert json.loads(spec.command()[spec.command().index("--kv-transfer-config") + 1])["kv_buffer_device"] == "cpu"


@pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed")
def test_a_declared_layout_other_than_the_fixed_one_runs_on_real_engines(tmp_path):
    """Same-DC PD with two P engines, its cores swapped, its own ports and vLLM arguments: the run
    completes through the proxy (whose warm-up goes over every P -> D pair), and the engines it
    started answered on the declared ports."""
    engines = [{"role": "P", "datacenter": "a", "cpus": [1], "port": 8391, "instances": 2,
                "vllm": {"max_model_len": 7168, "extra_args": ["--max-num-seqs", "16"]},
                "kv_connector": {"side_channel_port": 8397}},
               {"role": "D", "datacenter": "a", "cpus": [0], "port": 8394, "vllm": {"max_model_len": 7168}}]
    scenario = _scenario(tmp_path, "same_dc_pd", engines, port_base=8390, load=None, rate_rps=2.0)
    res = run_cli("run", scenario, "--set", "workload.synth.requests=6", "--out", tmp_path / "r", timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["requests_completed"] == 6, summary.get("requests_completed")
    ran = {e["name"]: e for e in summary["engines"]}
    assert ran["P"]["port"] == 8391 and ran["P2"]["port"] == 8392 and ran["D"]["port"] == 8394
    assert ran["P"]["cores"] == [1] == ran["P2"]["cores"] and ran["D"]["cores"] == [0] and ran["P"]["gpus"] is None


def test_the_gpu_benchmark_is_the_live_pdd_scenario_on_gpu_engines():
    """benchmarks/gpu/live_pdd.sh's scenario differs from live/pdd only in its engines, all on GPU
    device 0 in their datacenters; its script is valid bash (it runs only on a GPU host)."""
    import subprocess

    gpu = load_scenario(str(REPO / "benchmarks" / "gpu" / "live-pdd.yaml"))
    cpu = load_scenario("live/pdd")
    assert gpu.model_dump(exclude={"name": True, "live": {"engines"}}) == cpu.model_dump(
        exclude={"name": True, "live": {"engines"}})
    specs = declared_specs("pdd", gpu.live, "/model")
    assert [(s.name, s.gpus, s.on_gpu) for s in specs] == [("P", (0,), True), ("RLD", (0,), True), ("MD", (0,), True)]
    assert specs[0].netns != specs[2].netns
    assert subprocess.run(["bash", "-n", str(REPO / "benchmarks" / "gpu" / "live_pdd.sh")]).returncode == 0
