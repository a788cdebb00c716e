"""Attach mode (`live.attach`): a live run against engines that already run (a user's fleet), here
a real vLLM P/D pair started beside the test as a user would start theirs; pddbench checks them,
starts only its front and client, and leaves them running. Mismatches are refused in one line."""

import json
import urllib.request

import pytest

from pddbench.live.engines import vllm_available
from pddbench.live.net import free_port
from tests.conftest import REPO, run_cli

pytestmark = pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed (`make test` installs it)")
SCENARIO = REPO / "scenarios" / "live" / "same-dc-pd.yaml"
NAME = "user-model"  # not pddbench's default: the served name must travel to every request


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """A P/D pair with NIXL, started outside pddbench's run (its own launcher, as any user's)."""
    import dataclasses

    from pddbench.live.engines import EngineGroup
    from pddbench.live.placement import same_dc_specs
    from pddbench.live.tiny_model import build_tiny_model_subprocess

    tmp = tmp_path_factory.mktemp("fleet")
    model = build_tiny_model_subprocess(tmp / "model")
    port = free_port()
    specs = [dataclasses.replace(s, served_name=NAME) for s in same_dc_specs(model, port)]
    with EngineGroup(specs, tmp / "logs") as group:
        yield {"model": model, "specs": specs, "group": group}


def _attach(fleet, **change) -> str:
    p, d = fleet["specs"]
    attach = {"P": {"url": p.url, "kv_side_channel": f"127.0.0.1:{p.side_channel_port}"},
              "D": {"url": d.url, "kv_side_channel": f"127.0.0.1:{d.side_channel_port}"}}
    for role, value in change.items():
        if value is None:
            attach.pop(role)
            continue
        for key, v in value.items():
            attach[role].pop(key) if v is None else attach[role].update({key: v})
    return "live.attach=" + json.dumps(attach)  # JSON is YAML


def _run(fleet, tmp_path, attach: str, *extra: str):
    return run_cli("run", SCENARIO, "--set", attach, "--set", f"live.model_dir={fleet['model']}",
                   "--set", f"live.served_model_name={NAME}", "--set", "workload.synth.requests=6",
                   "--set", "live.load=null", "--set", "live.rate_rps=2", *extra, "--out", tmp_path / "run", timeout=900)


def test_a_run_against_attached_engines_leaves_them_running(fleet, tmp_path):
    res = _run(fleet, tmp_path, _attach(fleet))
    assert res.returncode == 0, res.stderr[-3000:]
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert s["requests_completed"] == 6 and s["requests_failed"] == 0
    assert s["engine_metrics"]["external_kv_transfer_tokens"] > 0  # P's KV reached D through the attached pair
    assert [e["name"] for e in s["engines"]] == ["P", "D"] and all(e["attached"] for e in s["engines"])
    assert not (tmp_path / "run" / "logs" / "P.log").exists()  # no engine of its own
    for spec in fleet["specs"]:  # not ours: still serving
        with urllib.request.urlopen(spec.url + "/health", timeout=5) as r:
            assert r.status == 200


@pytest.mark.parametrize("change, extra, says", [
    ({}, ["--set", "live.served_model_name=tiny"], f"serves ['{NAME}'], not 'tiny'"),
    ({"D": None}, [], "a same_dc_pd deployment has the roles ['P', 'D']: attach exactly those"),
    ({"D": {"kv_side_channel": "127.0.0.1:9"}}, [], "its KV side channel 127.0.0.1:9 does not answer"),
    ({"P": {"url": "http://127.0.0.1:9"}}, [], "live.attach.P (http://127.0.0.1:9): no healthy OpenAI server"),
    ({"P": {"kv_side_channel": None}}, [], "give its kv_side_channel"),
])
def test_a_mismatched_engine_is_refused_in_one_line(fleet, tmp_path, change, extra, says):
    res = _run(fleet, tmp_path, _attach(fleet, **change), *extra)
    assert res.returncode == 2 and "Traceback" not in res.stderr and says in res.stderr, res.stderr[-2000:]
    assert not (tmp_path / "run").exists()
    for spec in fleet["specs"]:
        with urllib.request.urlopen(spec.url + "/health", timeout=5) as r:
            assert r.status == 200


def test_attach_needs_the_models_folder(tmp_path):
    res = run_cli("run", SCENARIO, "--set", "live.attach={E0: {url: 'http://127.0.0.1:9'}}", "--out", tmp_path / "r")
    assert res.returncode == 2 and "live.attach needs live.model_dir" in res.stderr and "Traceback" not in res.stderr
