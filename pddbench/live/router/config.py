"""What the PDD router is told (RouterConfig) and what it tells the client about each request
(Trip, the `pdd` object of the last chunk).

RouterConfig carries the scenario's own `Policy`, so a policy default lives only in the schema;
the rest is what the policy does not say: where the engines are, KV geometry, the WAN, the SLA.
Both processes validate it with the same class (model_dump_json / model_validate_json)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

from pydantic import BaseModel, Field

from netem.profile import LinkProfile
from pddbench.schema.scenario import Policy

AbortReason = Literal["", "singular_flow", "relay_finish", "md_error"]


class RouterConfig(BaseModel):
    model_config = {"extra": "forbid"}
    policy: Policy
    prefill: str = Field(description="P's base URL")
    relay: str = Field(description="RLD's base URL")
    main: str = Field(description="MD's base URL")
    kv_bytes_per_token: int = Field(ge=1)
    kv_block_tokens: int = Field(ge=1, description="engine KV block: transfer unit and MD's prefix-cache granularity")
    relay_slots: int = Field(ge=1, description="relay requests that count as a fully busy relay (its batch limit)")
    wan: LinkProfile = Field(description="the scenario's WAN, for the router's transfer-time prediction")
    ttft_sla_ms: float = Field(gt=0)
    min_relay_tokens: int = Field(0, ge=0, description="start a handoff no earlier: lets tests exercise it")
    md_cache_blocks: int | None = Field(None, ge=1, description="MD prefix-cache estimate capacity; None: unbounded")


@dataclass
class Trip:
    """What the router saw of one request. Meanings shared with the simulator's records:
    transfer_aborted: a WAN KV transfer the pipeline would have made was never started or was
    stopped (transfer_abort_reason says which); a pull left to drain is not aborted.
    wan_kv_bytes: KV bytes that crossed (or were booked to cross) the WAN; wan_kv_bytes_saved:
    bytes kept off it by an abort (0 for relay_finish live: vLLM cannot stop a read in flight).
    handoff_mode: none (no handoff planned), relay_finish (ended on the relay), one_shot/catch_up."""
    pipeline: str = "p_md"
    handoff_mode: str = "none"
    relay_tokens: int = 0
    main_tokens: int = 0
    p_cached_tokens: int = 0
    decode_cached_tokens: int = 0
    prefill_ms: float = float("nan")
    wan_kv_ms: float = float("nan")
    handoff_ms: float = float("nan")
    relay_busy_ms: float = 0.0
    catch_up_rounds: int = 0
    rdma_kv_bytes: int = 0
    wan_kv_bytes: int = 0
    wan_token_id_bytes: int = 0
    wan_kv_bytes_saved: int = 0
    transfer_aborted: bool = False
    transfer_abort_reason: AbortReason = ""
    singular_flow: bool = False
    md_error: str = ""                # why MD could not take the KV, when it could not

    def abort(self, reason: AbortReason, saved_bytes: int = 0) -> None:
        self.transfer_aborted, self.transfer_abort_reason, self.wan_kv_bytes_saved = True, reason, saved_bytes

    def as_pdd(self) -> dict:
        """JSON-ready: unmeasured times (NaN) become null."""
        return {k: (None if isinstance(v, float) and v != v else v) for k, v in asdict(self).items()}
