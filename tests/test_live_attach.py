"""Attach mode (`live.attach`): a live run against engines that already run (a user's fleet), here
a real vLLM P/D pair started beside the test as a user would start theirs; pddbench checks them,
starts only its front and client, and leaves them running. Mismatches are refused in one line."""

import json
import urllib.request
from pathlib import Path

import pytest

from pddbench.live.engines import vllm_available
from pddbench.live.net import free_port
from tests.conftest import REPO, run_cli

pytestmark = pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed (`make test` installs it)")
SCENARIO = REPO / "scenarios" / "live" / "same-dc-pd.yaml"
NAME = "user-model"  # not pddbench's default: the served name must travel to every request


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, tiny_model):
    """A P/D pair with NIXL, started outside pddbench's run (its own launcher, as any user's)."""
    import dataclasses

    from pddbench.live.engines import EngineGroup
    from pddbench.live.placement import same_dc_specs
    tmp = tmp_path_factory.mktemp("fleet")
    model = tiny_model
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
    return run_cli("run", SCENARIO, "--set", attach, "--set", "live.engines=null", "--set", f"live.model_dir={fleet['model']}",
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
    res = run_cli("run", SCENARIO, "--set", "live.attach={E0: {url: 'http://127.0.0.1:9'}}", "--set", "live.engines=null",
                  "--out", tmp_path / "r")
    assert res.returncode == 2 and "live.attach needs live.model_dir" in res.stderr and "Traceback" not in res.stderr


# -- `pddbench serve pd-proxy` in front of the same fleet (issue 28.5) --------------------------

def _inventory(fleet, tmp_path) -> Path:
    p, d = fleet["specs"]
    inv = tmp_path / "fleet.yaml"
    inv.write_text(json.dumps({"P": {"url": p.url, "kv_side_channel": f"127.0.0.1:{p.side_channel_port}"},
                               "D": {"url": d.url, "kv_side_channel": f"127.0.0.1:{d.side_channel_port}"}}))
    return inv


def _get(url: str) -> tuple[int, str]:
    import urllib.error

    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_serve_pd_proxy_in_front_of_running_engines(fleet, tmp_path):
    """The proxy as a service: replay 6 requests through it, read its counters and engine health,
    then Ctrl-C: it stops cleanly, logs a JSON line per request, and the engines keep serving."""
    import signal
    import subprocess
    import sys
    import time

    port = free_port()
    log = tmp_path / "serve.log"
    proc = subprocess.Popen([sys.executable, "-m", "pddbench", "serve", "pd-proxy", str(SCENARIO), "--inventory",
                             str(_inventory(fleet, tmp_path)), "--set", f"live.model_dir={fleet['model']}",
                             "--set", f"live.served_model_name={NAME}", "--port", str(port), "--log", str(log)],
                            stderr=subprocess.PIPE, text=True, cwd=REPO,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            if proc.poll() is not None:
                break
            try:
                if _get(url + "/health")[0] == 200:
                    break
            except OSError:
                time.sleep(0.2)
        assert proc.poll() is None, proc.stderr.read()[-2000:]
        status, body = _get(url + "/health/engines")
        assert status == 200 and json.loads(body)["engines"] == {"P": "ok", "D": "ok"}
        from pddbench.schema.scenario import load_scenario
        from pddbench.workload.source import workload_requests
        from pddbench.workload.trace import write_trace

        trace = tmp_path / "trace.jsonl"  # the live scenario's own trace (prompts within the tiny model's length)
        write_trace(trace, workload_requests(load_scenario(SCENARIO, ["workload.synth.requests=6"])))
        res = run_cli("replay", "--endpoint", url, "--trace", trace, "--model", NAME, "--rate", "2",
                      "--pipeline", "p_d", "--out", tmp_path / "replay", timeout=600)
        assert res.returncode == 0, res.stderr[-2000:]
        s = json.loads((tmp_path / "replay" / "summary.json").read_text())
        assert s["requests_completed"] == 6
        status, metrics = _get(url + "/metrics")
        assert status == 200 and 'pddbench_requests_total{pipeline="p_d",status="200"} 6.0' in metrics, metrics
        assert "pddbench_requests_in_flight 0.0" in metrics
    finally:
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=60)
    assert rc == 130, proc.stderr.read()[-2000:]  # stopped cleanly, but by Ctrl-C: 130 as every command
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert [x["event"] for x in lines][0] == "start" and lines[-1]["event"] == "stop"
    requests = [x for x in lines if x["event"] == "request"]
    assert len(requests) == 6 and all(x["status"] == 200 and x["prefill_ms"] > 0 for x in requests)
    for spec in fleet["specs"]:  # not the service's: still serving
        assert _get(spec.url + "/health")[0] == 200


@pytest.mark.parametrize("args,says", [
    (["--host", "0.0.0.0"], "listen on loopback or its own namespaces"),
    (["--host", "example.org"], "give an IP address"),
    (["--log", "/tmp"], "--log /tmp is a folder"),
])
def test_serve_refusals(fleet, tmp_path, args, says):
    res = run_cli("serve", "pd-proxy", SCENARIO, "--inventory", _inventory(fleet, tmp_path), "--set",
                  f"live.model_dir={fleet['model']}", "--set", f"live.served_model_name={NAME}", *args, timeout=120)
    assert res.returncode == 2 and "Traceback" not in res.stderr and says in res.stderr, res.stderr[-2000:]
