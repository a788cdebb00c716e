"""Live deployment kinds, one registry: `PLACEMENTS[kind]` says which engines run where, what front
stands before them, the pipeline label the records get, and whether the emulated WAN is needed.
A new kind is one entry here (and, with a new front, one in deploy's front dispatch)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from netem.topology import DC_A, DC_B
from pddbench.live.engines import EngineSpec

LOCAL_HOST = "127.0.0.1"


def colocated_specs(model_dir: str, port: int) -> list[EngineSpec]:
    return [EngineSpec("E0", model_dir, port + 1, cpu=0)]


def same_dc_specs(model_dir: str, port: int) -> list[EngineSpec]:
    return [EngineSpec("P", model_dir, port + 1, cpu=0, kv_role="kv_producer", side_channel_port=port + 101),
            EngineSpec("D", model_dir, port + 2, cpu=1, kv_role="kv_consumer", side_channel_port=port + 102)]


def cross_dc_specs(model_dir: str, port: int) -> list[EngineSpec]:
    return [EngineSpec("P", model_dir, port + 1, host=DC_A.address, netns=DC_A.netns, cpu=0,
                       kv_role="kv_producer", side_channel_port=port + 101),
            EngineSpec("D", model_dir, port + 2, host=DC_B.address, netns=DC_B.netns, cpu=1,
                       kv_role="kv_consumer", side_channel_port=port + 102)]


def pdd_specs(model_dir: str, port: int) -> list[EngineSpec]:
    """P and RLD in dc-a (the fast local KV path), MD in dc-b behind the WAN. Two cores: P has its
    own (prefill is on every request's TTFT path); RLD and MD, both decoders, share the other.
    Measured on the live trace: MD on P's core instead gave TTFT p90 2759 ms vs 1577 ms."""
    return [EngineSpec("P", model_dir, port + 1, host=DC_A.address, netns=DC_A.netns, cpu=0,
                       kv_role="kv_producer", side_channel_port=port + 101),
            EngineSpec("RLD", model_dir, port + 2, host=DC_A.address, netns=DC_A.netns, cpu=1,
                       kv_role="kv_consumer", side_channel_port=port + 102),
            EngineSpec("MD", model_dir, port + 3, host=DC_B.address, netns=DC_B.netns, cpu=1,
                       kv_role="kv_consumer", side_channel_port=port + 103)]


@dataclass(frozen=True)
class Placement:
    engines: Callable[[str, int], list[EngineSpec]]  # (model_dir, port_base) -> the engines, P first
    front: str | None  # "pd_proxy", "pdd_router", or None: the client talks to the one engine
    pipeline: str      # label the replay client writes into every record
    cross_dc: bool     # needs the emulated WAN; the front and the client then sit in dc-a
    calibrated: bool   # what `live.calibrate_engine` can measure: P (first engine) and the last decoder, P -> it

    @property
    def client_netns(self) -> str | None:
        """Where the front and the replay client run: dc-a across datacenters, else the host."""
        return DC_A.netns if self.cross_dc else None

    @property
    def client_host(self) -> str:
        return DC_A.address if self.cross_dc else LOCAL_HOST


PLACEMENTS: dict[str, Placement] = {
    "colocated": Placement(colocated_specs, front=None, pipeline="colocated", cross_dc=False, calibrated=True),
    "same_dc_pd": Placement(same_dc_specs, front="pd_proxy", pipeline="p_d", cross_dc=False, calibrated=True),
    "cross_dc_pd": Placement(cross_dc_specs, front="pd_proxy", pipeline="p_d", cross_dc=True, calibrated=True),
    # pdd: P's prefill, MD's decode steps and the P -> MD pull over the WAN (RLD shares MD's engine type)
    "pdd": Placement(pdd_specs, front="pdd_router", pipeline="pdd", cross_dc=True, calibrated=True),
}
