"""The live deployment registry: every kind the schema accepts can be placed, and each placement
is one a host can run (distinct ports, fronts that exist, the WAN crossed only where stated)."""

from typing import get_args

import pytest

from netem.topology import DC_A, DC_B
from pddbench.live.deploy import FRONTS
from pddbench.live.placement import PLACEMENTS
from pddbench.schema.scenario import DeploymentKind

PORT = 8300


def test_every_schema_kind_has_a_placement():
    from pddbench.schema.scenario import LIVE_KINDS

    assert set(LIVE_KINDS) == set(PLACEMENTS) and set(LIVE_KINDS) <= set(get_args(DeploymentKind))
    assert set(get_args(DeploymentKind)) - set(LIVE_KINDS) == {"prfaas"}  # the simulator-only kind, refused live


@pytest.mark.parametrize("kind", sorted(PLACEMENTS))
def test_placement_names_engines_on_distinct_ports(kind):
    specs = PLACEMENTS[kind].engines("/model", PORT)
    ports = [s.port for s in specs] + [s.side_channel_port for s in specs if s.side_channel_port is not None]
    assert len(set(ports)) == len(ports), ports
    assert PORT not in ports  # the front listens on port_base
    assert len({s.name for s in specs}) == len(specs)


@pytest.mark.parametrize("kind", sorted(PLACEMENTS))
def test_placement_front_and_network_agree(kind):
    p = PLACEMENTS[kind]
    specs = p.engines("/model", PORT)
    assert p.front is None or p.front in FRONTS
    assert p.front is not None or len(specs) == 1  # without a front the client talks to the one engine
    if p.calibrated:  # calibration measures P (first) and the last decoder, which takes P's KV
        assert len(specs) == 1 or (specs[0].kv_role == "kv_producer" and specs[-1].kv_role == "kv_consumer")
    if p.cross_dc:
        assert specs[0].netns == DC_A.netns and p.client_netns == DC_A.netns and p.client_host == DC_A.address
        assert any(s.netns == DC_B.netns for s in specs)  # something sits behind the WAN
    else:
        assert all(s.netns is None for s in specs) and p.client_netns is None


def test_run_live_tears_down_front_engines_and_wan_on_ctrl_c(tmp_path, monkeypatch):
    """Ctrl-C during the replay of a pdd run: the front, the engines and the WAN all come down,
    in that order (stand-ins record it; no vLLM or root needed)."""
    from contextlib import contextmanager

    from pddbench.live import deploy
    from pddbench.schema.scenario import load_scenario

    events = []

    def cm(name, value=None):
        @contextmanager
        def manager(*_a, **_k):
            events.append(f"{name} up")
            try:
                yield value
            finally:
                events.append(f"{name} down")
        return manager

    class Engines:
        def __init__(self, specs, logs):
            self.specs = specs

        def __enter__(self):
            events.append("engines up")
            return self

        def __exit__(self, *exc):
            events.append("engines down")

        def metrics(self):
            return {}

    def replay(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(deploy, "vllm_available", lambda: True)
    monkeypatch.setattr(deploy, "emulated_wan", cm("wan", {"backend": "test"}))
    monkeypatch.setattr(deploy, "EngineGroup", Engines)
    monkeypatch.setattr(deploy, "running_front", cm("front", "http://10.77.0.1:8300"))
    monkeypatch.setattr(deploy, "kv_bytes_per_token", lambda _model: 1024)
    monkeypatch.setattr(deploy, "run_replay", replay)
    probe = {"capacity_rps": 2.0, "requests": 24, "concurrency": 4, "makespan_s": 12.0, "mean_probe_input_tokens": 400.0}
    monkeypatch.setattr(deploy, "run_capacity_probe", lambda *_a, **_k: probe)  # live.load's probe, before the replay
    sc = load_scenario("live/pdd", ["live.model_dir=/model"])
    with pytest.raises(KeyboardInterrupt):
        deploy.run_live(sc, tmp_path)
    assert events == ["wan up", "engines up", "front up", "front down", "engines down", "wan down"]
    assert (tmp_path / "router.json").is_file()  # the router's settings are written before it starts
