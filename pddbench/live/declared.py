"""Engines declared in the scenario (`live.engines`, issue 28.1): one per role, each with its model,
device (CPU cores or GPU ids), vLLM arguments, datacenter and KV connector, turned into the same
EngineSpecs the fixed layout (placement.py) builds, so everything after the start is shared. The
schema (pddbench/schema/runtime_config.py, check_engines) has already refused a layout the kind
cannot run."""

from __future__ import annotations

from netem.topology import DC_A, DC_B
from pddbench.live.engines import EngineSpec
from pddbench.live.placement import LOCAL_HOST, PLACEMENTS
from pddbench.schema.runtime_config import LiveConfig, engine_instances

KV_ROLE = {"E0": None, "P": "kv_producer", "D": "kv_consumer", "RLD": "kv_consumer", "MD": "kv_consumer"}


def declared_specs(kind: str, cfg: LiveConfig, model_dir: str) -> list[EngineSpec]:
    """The declared engines as EngineSpecs, in the kind's role order (P first, as the fronts and
    the calibration expect): across datacenters each in its datacenter's namespace, else on loopback."""
    cross_dc = PLACEMENTS[kind].cross_dc
    out = []
    for e, name, port, side in engine_instances(kind, cfg.engines, cfg.port_base):
        dc = (DC_A if e.datacenter == "a" else DC_B) if cross_dc else None
        kv = KV_ROLE[e.role]
        out.append(EngineSpec(
            name, e.model or model_dir, port, host=dc.address if dc else LOCAL_HOST, netns=dc.netns if dc else None,
            cpu=e.cpus[0] if e.cpus and len(e.cpus) == 1 else None,
            cpus=tuple(e.cpus) if e.cpus and len(e.cpus) > 1 else None,
            kv_role=kv, side_channel_port=side if kv else None, max_model_len=e.vllm.max_model_len,
            extra_env=dict(e.env), gpus=tuple(e.gpus) if e.gpus else None,
            tensor_parallel_size=e.vllm.tensor_parallel_size, gpu_memory_utilization=e.vllm.gpu_memory_utilization,
            enforce_eager=e.vllm.enforce_eager, kv_buffer_device=e.kv_connector.buffer_device,
            extra_args=tuple(e.vllm.extra_args)))
    return out
