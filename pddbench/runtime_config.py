"""Settings of each runtime, as parts of the scenario schema: the simulator's step-time model
(`latency:`) and the live runtime (`live:`). Pure data: no runtime code is imported here, so the
schema can be read (and validated) where neither the simulator nor vLLM is wanted."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator


class LatencyConfig(BaseModel):
    model_config = {"extra": "forbid"}
    kind: Literal["roofline", "calibrated"] = "roofline"
    compute_efficiency: float = Field(0.45, gt=0, le=1, description="achieved / peak FLOPs")
    memory_efficiency: float = Field(0.7, gt=0, le=1, description="achieved / peak memory bandwidth")
    prefill_overhead_ms: float = Field(4.0, ge=0, description="fixed cost per prefill step (scheduling, comms)")
    decode_overhead_ms: float = Field(3.0, ge=0, description="fixed cost per decode step")
    calibration_csv: str | None = Field(
        None, description="for kind=calibrated: CSV with phase,tokens,attn_pairs,batch,kv_tokens,step_ms (and optionally cached_tokens)")


class LiveConfig(BaseModel):
    """How a live run drives real engines. The deployment itself is `deployment.kind`."""
    model_config = {"extra": "forbid"}

    @model_validator(mode="before")
    @classmethod
    def _kind_moved(cls, data):
        if isinstance(data, dict) and "deployment" in data:
            raise ValueError("live.deployment is now stated once for both runtimes: write deployment.kind instead")
        return data

    @model_validator(mode="after")
    def _one_load(self):
        if self.load is not None:
            other = [k for k in ("rate_rps", "time_scale", "concurrency") if getattr(self, k) is not None]
            if other:
                raise ValueError(f"live.load and live.{other[0]} both set: choose one (set the other to null)")
        return self

    model_dir: str | None = Field(None, description="served model; unset builds the tiny random model in the run folder")
    port_base: int = Field(8300, ge=1024, le=65000)
    time_scale: float | None = Field(None, gt=0)
    rate_rps: float | None = Field(None, gt=0, description="fixed mean arrival rate (req/s); or live.load")
    load: float | None = Field(None, gt=0, le=4, description=(
        "arrival rate as a fraction of the deployment's capacity measured on this machine before the "
        "replay (pddbench/live/capacity_probe.py); excludes rate_rps, time_scale and concurrency"))
    probe_requests: int = Field(24, ge=4, le=1000, description="live.load: requests in the capacity probe")
    probe_concurrency: int = Field(4, ge=1, le=256, description="live.load: probe requests in flight at a time")
    arrival: Literal["constant", "poisson", "gamma"] = "poisson"
    concurrency: int | None = Field(None, ge=1)
    duration_s: float | None = Field(None, gt=0)
    vocab_lo: int = 16
    vocab_hi: int = 1024
    timeout_s: float = Field(300.0, gt=0)
    calibrate_probes: int = Field(100, ge=10)
    min_relay_tokens: int = Field(0, ge=0, description="pdd: hold each handoff until the relay has produced this many tokens")
    front_added_delay_ms: float = Field(0.0, ge=0, le=60000, description=(
        "an injected regression: the PD proxy / PDD router holds every request this long before serving it "
        "(to check that the nightly gate fails on a real slowdown; 0 in every shipped scenario)"))
    calibrate_engine: bool = Field(False, description="after the replay, measure P's prefill and D's decode step "
                                   "times into engine_calibration.csv, and the P -> D KV transfer into "
                                   "kv_transfer_calibration.csv (colocated / same_dc_pd / cross_dc_pd), "
                                   "for `pddbench fidelity`")
