"""The live deployment registry: every kind the schema accepts can be placed, and each placement
is one a host can run (distinct ports, fronts that exist, the WAN crossed only where stated)."""

from typing import get_args

import pytest

from netem.topology import DC_A, DC_B
from pddbench.live.deploy import FRONTS
from pddbench.live.placement import PLACEMENTS
from pddbench.scenario import DeploymentKind

PORT = 8300


def test_every_schema_kind_has_a_placement():
    assert set(get_args(DeploymentKind)) == set(PLACEMENTS)


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
    if p.calibrated:
        assert len(specs) <= 2  # calibration measures one P and one D
    if p.cross_dc:
        assert specs[0].netns == DC_A.netns and p.client_netns == DC_A.netns and p.client_host == DC_A.address
        assert any(s.netns == DC_B.netns for s in specs)  # something sits behind the WAN
    else:
        assert all(s.netns is None for s in specs) and p.client_netns is None
