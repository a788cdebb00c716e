"""Scenario schema: one pydantic model validates YAML files and `--set dotted.path=value` overrides.

A scenario names the workload, model, chips, deployment, network, policy, SLA and seed. The
resolved scenario (after overrides) is saved with every run.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Iterator, Literal

import yaml
from pydantic import BaseModel, Field, PrivateAttr, ValidationError, field_validator, model_serializer, model_validator

from netem.profile import LinkProfile, load_profile
from pddbench.core.errors import InputError, UserError
from pddbench.core.loading import is_stdin, load_yaml, load_yaml_value, read_text
from pddbench.core.shipped import resolve_scenario, shipped_scenario_names
from pddbench.models.architecture import Architecture, derive
from pddbench.models.shipped import model_names, shipped_arch, shipped_model
from pddbench.schema.ranges import with_range
from pddbench.schema.runtime_config import LatencyConfig, LiveConfig, TwinCalibration, check_engines
from pddbench.workload.fixed import FixedConfig
from pddbench.workload.synth import SynthConfig


class _Strict(BaseModel):
    # a non-finite number is refused by the schema itself (load_scenario's check does not see a
    # scenario built in code: optimize's trials, sweep points)
    model_config = {"extra": "forbid", "allow_inf_nan": False}


WorkloadSource = Literal["trace", "synth", "fixed"]


class Workload(_Strict):
    source: WorkloadSource | None = Field(
        None, description="where requests come from; may be left out when exactly one of trace/synth/fixed is given")
    trace: str | None = Field(None, min_length=1, description="Mooncake JSONL trace (source: trace)")
    synth: SynthConfig = Field(default_factory=SynthConfig, description="the agentic generator (source: synth)")
    fixed: FixedConfig | None = Field(None, description="a fixed-shape workload (source: fixed)")
    block_size: int = Field(512, ge=1, le=1_000_000)
    rate_scale: float = Field(1.0, ge=1e-6, le=1e6, description="arrival rate multiplier (timestamps divided by it)")
    max_requests: int | None = Field(None, ge=1, le=100_000_000)

    @model_validator(mode="after")
    def _one_source(self) -> "Workload":
        given = self._given()
        if self.source is None and len(given) > 1:
            raise ValueError(f"the workload gives {' and '.join(given)}: say which to use with workload.source "
                             f"({' | '.join(given)})")
        if self.source in ("trace", "fixed") and getattr(self, self.source) is None:
            raise ValueError(f"workload.source is '{self.source}' but workload.{self.source} is not set")
        return self

    def _given(self) -> list[str]:
        return [name for name in ("trace", "synth", "fixed")
                if (getattr(self, name) is not None if name != "synth" else "synth" in self.model_fields_set)]

    def resolved_source(self) -> WorkloadSource:
        """The stated source, else the one block given; the generator when none is."""
        if self.source is not None:
            return self.source
        given = self._given()
        return given[0] if given else "synth"  # type: ignore[return-value]


class Sla(_Strict):
    ttft_ms: float = Field(2000.0, ge=1e-3, le=1e9, description="per-request TTFT bound")
    tpot_ms: float = Field(100.0, ge=1e-3, le=1e9, description="per-request TPOT bound")
    percentile: float = Field(90.0, gt=0, le=100, description="the SLA holds when this percentile of TTFT and TPOT is within bounds")


class Chip(_Strict):
    peak_tflops: float = Field(ge=1e-6, le=1e9, description="dense peak at the serving precision")
    memory_gb: float = Field(ge=1e-6, le=1e9)
    memory_bw_tbps: float = Field(ge=1e-6, le=1e9)
    interconnect_gbps: float = Field(ge=1e-6, le=1e9, description="scale-up bandwidth per chip, one direction "
                                     "(NVLink: half the datasheet's both-directions figure)")
    price_per_hour: float = Field(ge=0, le=1e9)


# What model.arch derives, and which of those a scenario may still set beside it: the storage
# choices (weight and KV precision), not the shape (sizes that would contradict the architecture).
ARCH_DERIVED = {"params_total_b", "params_active_b", "layers", "hidden_size", "kv_bytes_per_token", "experts_total",
                "experts_active", "params_shared_b", "flops_per_token", "attn_flops_per_pair", "attention",
                "sliding_window_tokens", "sliding_kv_bytes_per_token", "fixed_state_bytes"}
ARCH_OVERRIDES = {"kv_bytes_per_token"}


class Model(_Strict):
    """The served model: by its architecture (`arch`, the fields of a Hugging Face config.json; see
    pddbench/models/architecture.py for what is derived from it) or by its sizes. Beside `arch`,
    only the sizes that do not contradict it may be given (ARCH_OVERRIDES: e.g. kv_bytes_per_token
    for a quantized KV cache); the derived ones are not saved, so a saved scenario re-derives them."""
    name: str = Field(min_length=1)
    arch: Architecture | None = Field(
        None, description="the architecture: a mapping of config.json fields, a shipped model's name, or a "
        "config.json path; every size below left unset is derived from it")
    params_total_b: float | None = Field(None, gt=0, le=1e6)
    params_active_b: float | None = Field(None, gt=0, le=1e6)
    layers: int | None = Field(None, ge=1, le=100_000)
    hidden_size: int | None = Field(None, ge=1, le=10_000_000)
    kv_bytes_per_token: int | None = Field(
        None, ge=1, le=10**9, description="KV cache bytes per token of context, full-attention layers (all "
        "layers of a model without sliding-window or linear attention)")
    attention: Literal["mha", "gqa", "mla"] = "gqa"
    weight_bytes_per_param: float = Field(1.0, gt=0, le=16)
    experts_total: int | None = Field(
        None, ge=1, description="MoE: routed experts per layer; unset = the simulator's old bound: a decode step "
        "reads min(total, active x batch) parameters")
    experts_active: int | None = Field(None, ge=1, description="MoE: routed experts each token uses (top-k)")
    params_shared_b: float | None = Field(
        None, ge=0, description="MoE: parameters every token uses (attention, embeddings, dense layers, shared "
        "experts); unset = derived so that shared + k/E x (total - shared) = params_active_b")
    flops_per_token: float | None = Field(
        None, gt=0, le=1e18, description="FLOPs of one token's matrix products; unset: 2 x params_active_b")
    attn_flops_per_pair: float | None = Field(
        None, gt=0, le=1e15, description="attention FLOPs per (query, key) pair, all layers; unset: 4 x layers x "
        "hidden_size")
    sliding_window_tokens: int = Field(0, ge=0, le=10**9, description="sliding-window layers keep this many tokens")
    sliding_kv_bytes_per_token: int = Field(0, ge=0, le=10**9, description="KV bytes per token, sliding-window layers")
    fixed_state_bytes: int = Field(0, ge=0, le=10**13, description="linear-attention state per request (bytes)")

    @field_validator("arch", mode="before")
    @classmethod
    def _arch_by_name(cls, value: Any) -> Any:
        return shipped_arch(value) if isinstance(value, str) else value

    @model_serializer(mode="wrap")
    def _derived_only_when_set(self, handler):
        # a model given by its sizes saves as before: the architecture's fields appear only when used
        data = handler(self)
        if isinstance(data, dict):
            for key in self._derived:
                data.pop(key, None)
            if isinstance(data.get("arch"), dict):
                data["arch"] = {k: v for k, v in data["arch"].items() if v is not None}
            for key in ("arch", "flops_per_token", "attn_flops_per_pair"):
                if data.get(key) is None:
                    data.pop(key, None)
            for key in ("sliding_window_tokens", "sliding_kv_bytes_per_token", "fixed_state_bytes"):
                if not data.get(key):
                    data.pop(key, None)
        return data

    _derived: set = PrivateAttr(default_factory=set)  # fields filled from `arch` (not saved)

    @model_validator(mode="after")
    def _sizes(self) -> "Model":
        if self.arch is not None:
            mixed = sorted(self.model_fields_set & ARCH_DERIVED - ARCH_OVERRIDES)
            if mixed:
                raise ValueError(f"model: {', '.join(mixed)} given beside model.arch, which derives them; give "
                                 "the architecture or the sizes, not both (to replace the whole model: --set "
                                 f"model=NAME; beside arch only {', '.join(sorted(ARCH_OVERRIDES))} may be set)")
            derived = derive(self.arch)
            self._derived = set(ARCH_DERIVED) - self.model_fields_set
            if "weight_bytes_per_param" not in self.model_fields_set and self.arch.weight_dtype_bytes:
                self._derived.add("weight_bytes_per_param")
                self.weight_bytes_per_param = self.arch.weight_dtype_bytes
            for key in ("params_total_b", "params_active_b", "kv_bytes_per_token", "flops_per_token",
                        "attn_flops_per_pair", "experts_total", "experts_active"):
                if getattr(self, key) is None:
                    setattr(self, key, getattr(derived, key))
            if self.layers is None:
                self.layers = self.arch.num_hidden_layers
            if self.hidden_size is None:
                self.hidden_size = self.arch.hidden_size
            if self.params_shared_b is None and derived.experts_total:
                self.params_shared_b = derived.params_shared_b
            if "attention" not in self.model_fields_set:
                self.attention = derived.attention  # type: ignore[assignment]
            for key in ("sliding_window_tokens", "sliding_kv_bytes_per_token", "fixed_state_bytes"):
                if key not in self.model_fields_set:
                    setattr(self, key, getattr(derived, key))
            for key in ("params_total_b", "params_active_b", "kv_bytes_per_token"):  # the fields' own ranges
                info = type(self).model_fields[key]
                value, top = getattr(self, key), next((m.le for m in info.metadata if hasattr(m, "le")), None)
                if value is not None and (value <= 0 or (top is not None and value > top)):
                    raise ValueError(f"model.arch gives {key} = {value:g}, outside its range (0, {top:g}]"
                                     + ("; an architecture with no full-attention layer needs "
                                        "model.kv_bytes_per_token (KV capacity is counted per token)"
                                        if key == "kv_bytes_per_token" else ""))
        missing = [k for k in ("params_total_b", "params_active_b", "layers", "hidden_size", "kv_bytes_per_token")
                   if getattr(self, k) is None]
        if missing:
            raise ValueError(f"model: give {', '.join(missing)}, or model.arch (a shipped model's name such as "
                             f"{model_names()[0]}, a config.json path, or its fields), or name a shipped model: "
                             f"model: NAME ({', '.join(model_names())})")
        return self

    @model_validator(mode="after")
    def _moe(self) -> "Model":
        if (self.experts_total is None) != (self.experts_active is None):
            raise ValueError("model: give experts_total and experts_active together (or neither)")
        if self.experts_total is None:
            if self.params_shared_b is not None:
                raise ValueError("model.params_shared_b needs experts_total and experts_active")
            return self
        assert self.experts_active is not None
        if self.experts_active > self.experts_total:
            raise ValueError("model.experts_active must not exceed experts_total")
        if self.params_active_b > self.params_total_b:
            raise ValueError("model.params_active_b must not exceed params_total_b")
        if self.moe_shared_params_b() < 0 or self.moe_shared_params_b() > self.params_total_b:
            raise ValueError("model: params_shared_b must lie in [0, params_total_b]; with experts_total and "
                             "experts_active as given, params_active_b implies a negative one: give params_shared_b")
        return self

    def moe_shared_params_b(self) -> float:
        """Parameters every token reads (billions): params_shared_b, or the value that makes a lone
        token read exactly params_active_b."""
        if self.params_shared_b is not None:
            return self.params_shared_b
        e, k = self.experts_total, self.experts_active
        assert e is not None and k is not None
        if e == k:
            return self.params_total_b
        return (e * self.params_active_b - k * self.params_total_b) / (e - k)


class Pool(_Strict):
    """A set of identical instances of one role."""
    chip: str
    instances: int = Field(ge=1, le=100_000)
    chips_per_instance: int = Field(8, ge=1, le=4096)
    dc: Literal["a", "b"] = "a"
    chunk_tokens: int = Field(8192, ge=1, le=10_000_000, description="prefill chunk / batched-token budget per step")
    max_batch_seqs: int = Field(256, ge=1, le=1_000_000, description="decode batch limit")
    kv_memory_fraction: float = Field(0.9, ge=1e-6, le=1, description="memory left after weights usable for KV")
    prefix_cache: bool = True
    pack_tail_chunks: bool = Field(False, description="prefill: let a tail chunk share a step with other requests")


DeploymentKind = Literal["colocated", "same_dc_pd", "cross_dc_pd", "pdd", "prfaas"]
ROLES_OF_KIND: dict[str, tuple[str, ...]] = {  # pools a simulated deployment of each kind needs
    "same_dc_pd": ("prefill", "decode"),
    "cross_dc_pd": ("prefill", "decode"),
    "pdd": ("prefill", "relay", "main"),
    "prfaas": ("prefill", "decode", "remote_prefill"),  # a local PD cluster + a prefill cluster across the WAN
}
ROLES = ("prefill", "decode", "relay", "main", "remote_prefill")  # every pool a deployment can have
LIVE_KINDS = ("colocated", "same_dc_pd", "cross_dc_pd", "pdd")  # what the live runtime deploys (live/placement.py)


class Deployment(_Strict):
    """The deployment, stated once for both runtimes. The simulator needs the pools of its kind;
    a live run needs only the kind and reads the pools' settings where given (e.g. the relay's
    max_batch_seqs is the PDD router's relay capacity)."""
    kind: DeploymentKind
    prefill: Pool | None = Field(None, description="P pool")
    decode: Pool | None = Field(None, description="D pool of the PD baselines")
    relay: Pool | None = Field(None, description="RLD pool (pdd)")
    main: Pool | None = Field(None, description="MD pool (pdd)")
    remote_prefill: Pool | None = Field(None, description="prfaas: the prefill cluster across the WAN (PrfaaS); "
                                        "prefill and decode are then the local PD cluster")
    kv_block_tokens: int = Field(1, ge=1, le=1_000_000, description="tokens per engine KV block: a transfer moves whole blocks "
                                 "(vLLM: 16 on GPU, 128 on CPU); 1 = exactly the tokens' bytes")
    decode_routing_slack_seqs: int = Field(
        16, ge=0, le=1_000_000, description="simulator: a decode instance (D or MD) may hold this many more sequences "
        "than the least loaded one and still win a request on its prefix-cache match; 0 = least loaded only "
        "(default 16: measured on paper/same-dc-pd and paper/pdd, see pddbench/sim/cluster.py)")
    def pools(self) -> dict[str, Pool]:
        return {role: p for role in ROLES if (p := getattr(self, role)) is not None}

    def relay_slots(self) -> int:
        """How many requests the relay takes at once: the relay pool's max_batch_seqs, else the
        schema's (the live PDD router's capacity; the simulator's twin gets the same)."""
        return (self.relay.max_batch_seqs if self.relay is not None
                else Pool.model_fields["max_batch_seqs"].default)


class Network(_Strict):
    wan: LinkProfile | str = Field("cross-city-10g", description="profile name, YAML path or inline")
    rdma: LinkProfile | str = "same-dc-rdma"
    wan_lines: int = Field(1, ge=1, le=1024)
    wan_line_price_per_hour: float = Field(0.0, ge=0, le=1e9)

    def wan_profile(self) -> LinkProfile:
        return self.wan if isinstance(self.wan, LinkProfile) else load_profile(self.wan)

    def rdma_profile(self) -> LinkProfile:
        return self.rdma if isinstance(self.rdma, LinkProfile) else load_profile(self.rdma)


class Policy(_Strict):
    handoff_mode: Literal["adaptive", "one_shot", "catch_up"] = "adaptive"
    catch_up_threshold_tokens: int = Field(64, ge=0, le=1_000_000_000, description="adaptive: Catch-Up above this many pending tokens")
    catch_up_batch_tokens: int = Field(32, ge=1, le=1_000_000_000, description="tokens handed over per Catch-Up batch")
    relay_busy_fraction: float = Field(
        0.8, ge=1e-6, le=1, description="adaptive: One-Shot when RLD load exceeds this; a request that would take the "
        "relay path goes P->MD instead when the least loaded relay is at least this full")
    relay_ttft_budget_fraction: float = Field(
        0.1, ge=0, le=1e6, description="use P->RLD->MD when predicted WAN KV time exceeds this share of the TTFT SLA")
    singular_filter: bool = True
    singular_min_input_tokens: int = Field(32768, ge=1, le=1_000_000_000, description="singular flow: input at least this long ...")
    singular_max_output_tokens: int = Field(16, ge=1, le=1_000_000_000, description="... and max_tokens at most this")
    catch_up_max_rounds: int = Field(8, ge=1, le=100_000)
    relay_only_pipeline: bool = Field(False, description="ablation: P->RLD only for low-hit requests (excluded by the article)")
    offload_threshold_tokens: int = Field(
        19_400, ge=0, le=1_000_000_000, description="prfaas: a prefill goes to the remote cluster when its uncached length (after the "
        "local prefix cache) is above this (PrfaaS' case study: t = 19.4k tokens)")
    offload_wan_budget_fraction: float = Field(
        0.5, ge=0, le=1e6, description="prfaas: ... and the line delivers its KV, as predicted now (queue included), within "
        "this share of the TTFT SLA; else it is prefilled locally (bandwidth-aware; ASSUMPTION: PrfaaS states no value)")
    relay_finish_stops_wan_kv: bool = Field(
        True, description="a relay that finishes first stops MD's WAN KV transfer; false: the transfer drains and MD "
        "keeps the prompt (vLLM 0.32's NixlConnector cannot stop a read in flight: an aborted request's blocks are "
        "freed when its reads complete)")


class Scenario(_Strict):
    name: str = "scenario"
    description: str = ""
    runtime: Literal["sim", "live"] = "sim"
    seed: int = 0
    workload: Workload = Field(default_factory=Workload)
    sla: Sla = Field(default_factory=Sla)
    model: Model | None = None
    chips: dict[str, Chip] = Field(default_factory=dict)
    deployment: Deployment | None = None
    network: Network = Field(default_factory=Network)
    policy: Policy = Field(default_factory=Policy)
    latency: LatencyConfig = Field(default_factory=LatencyConfig)
    twin_calibration: TwinCalibration = Field(
        default_factory=TwinCalibration, description="simulator: the twin of a live run (pddbench fidelity); "
        "left out of a saved scenario.yaml unless set")
    live: LiveConfig = Field(default_factory=LiveConfig, description="runtime: live settings")

    @field_validator("model", mode="before")
    @classmethod
    def _shipped_model(cls, value: Any) -> Any:
        return shipped_model(value) if isinstance(value, str) else value

    @model_serializer(mode="wrap")
    def _calibration_only_when_set(self, handler):
        # a scenario that never sets the twin's calibration does not list its defaults: they
        # live in TwinCalibration alone, and a saved scenario.yaml shows only what was chosen
        data = handler(self)
        if "twin_calibration" not in self.model_fields_set and isinstance(data, dict):
            data.pop("twin_calibration", None)
        return data

    @model_validator(mode="after")
    def _runnable(self) -> "Scenario":
        d = self.deployment
        if d is not None and self.runtime == "live" and d.kind not in LIVE_KINDS:
            raise ValueError(f"deployment kind {d.kind} runs in the simulator only (runtime: sim); live runs deploy "
                             + ", ".join(LIVE_KINDS))
        if d is not None and self.runtime == "live" and self.live.engines is not None:
            check_engines(d.kind, self.live.engines, self.live.port_base, self.live.model_dir)
        if d is None or self.runtime == "live":
            return self  # live engines are placed by the live runtime; pools only tune it
        if d.kind not in ROLES_OF_KIND:
            raise ValueError(f"deployment kind {d.kind} runs live only (runtime: live)")
        for role in ROLES_OF_KIND[d.kind]:
            if getattr(d, role) is None:
                raise ValueError(f"deployment kind {d.kind} needs a '{role}' pool")
        for role, pool in d.pools().items():
            if pool.chip not in self.chips:
                raise ValueError(f"deployment.{role}.chip '{pool.chip}' is not among chips {sorted(self.chips)}")
        pools = d.pools()
        for name, roles in self.twin_calibration.core_groups.items():
            missing = [r for r in roles if r not in pools]
            if missing:
                raise ValueError(f"twin_calibration.core_groups.{name}: the {d.kind} deployment has no "
                                 f"{' or '.join(missing)} pool (it has {', '.join(pools)})")
            if len({pools[r].instances for r in roles}) > 1:
                raise ValueError(f"twin_calibration.core_groups.{name}: pools "
                                 + ", ".join(f"{r} ({pools[r].instances})" for r in roles)
                                 + " must have the same number of instances (instance i of each shares core i)")
        if self.model is None:
            raise ValueError("a simulated scenario needs a model")
        return self


# -- loading ---------------------------------------------------------------------------------

MAX_INT = 2**63 - 1  # every integer in a scenario fits int64


def parse_override(text: str) -> tuple[list[str], Any]:
    if "=" not in text:
        raise UserError(f"--set '{text}': expected dotted.path=value, e.g. --set sla.ttft_ms=1500")
    key, raw = text.split("=", 1)
    if not key or any(not part for part in key.split(".")):
        raise UserError(f"--set '{text}': empty path component")
    if not raw.strip():
        raise InputError("--set", f"has an empty value in '{text}'; give one (null unsets a field)", field=key)
    return key.split("."), load_yaml_value(raw)


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    for text in overrides:
        path, value = parse_override(text)
        node = data
        for i, part in enumerate(path[:-1]):
            nxt = node.get(part)
            if i == 0 and part == "model" and isinstance(nxt, str):
                try:  # a shipped model named whole, then one of its fields set
                    nxt = node[part] = shipped_model(nxt)
                except ValueError as exc:
                    raise UserError(f"--set '{text}': {exc}") from None
            if not isinstance(nxt, dict):
                nxt = {} if nxt is None else nxt
                if not isinstance(nxt, dict):
                    whole = ".".join(path[: i + 1])
                    raise UserError(f"--set '{text}': {whole} is {nxt!r}, not a mapping; set it whole "
                                    f"(--set {whole}={{...}})")
                node[part] = nxt
            node = nxt
        node[path[-1]] = value
    return data


def yaml_line(text: str, loc: tuple) -> tuple[int | None, bool]:
    """1-based line of the deepest YAML node on the path `loc`, and whether all of `loc` was found."""
    try:
        node = yaml.compose(text)
    except (yaml.YAMLError, RecursionError):
        return None, False
    line = None
    for key in loc:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if k.value == str(key):
                    line, node = k.start_mark.line + 1, v
                    break
            else:
                return line, False
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
            line = node.start_mark.line + 1
        else:
            return line, False
    return line, True


Layers = list[tuple[Path, str]]  # the scenario file, then the bases it extends: (path, text)


def where(layers: Layers, loc: tuple) -> tuple[Path, int | None]:
    """The file (the scenario or the base that sets it) and line of the value at `loc`."""
    for path, text in layers:
        line, complete = yaml_line(text, loc)
        if complete:
            return path, line
    return layers[0][0], yaml_line(layers[0][1], loc)[0]


def _deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def read_yaml(path: Path, depth: int = 0) -> tuple[dict, Layers]:
    """A scenario mapping; `extends: other.yaml` (relative to the file) is merged underneath."""
    if path.is_dir() or not (path.exists() or is_stdin(path)):
        what = "is a directory, not a scenario file" if path.is_dir() else "no such scenario file"
        raise InputError(str(path), f"{what} (shipped scenarios: {', '.join(shipped_scenario_names())})")
    text = read_text(path, "scenario file")
    data = load_yaml(text, str(path))
    if data is None:
        raise InputError(str(path), "is empty: a scenario is a YAML mapping (see scenarios/paper/)")
    if not isinstance(data, dict):
        raise InputError(str(path), "must be a YAML mapping")
    parent = data.pop("extends", None)
    if parent is None:
        return data, [(path, text)]
    if not isinstance(parent, str) or not parent.strip():
        raise InputError(str(path), "must name a base scenario file", yaml_line(text, ("extends",))[0], "extends")
    if depth > 8:
        raise InputError(str(path), "extends nests too deep (a cycle?)", field="extends")
    base, layers = read_yaml(path.parent / parent, depth + 1)
    if isinstance(base.get("model"), str) and isinstance(data.get("model"), dict):
        try:  # a base naming a shipped model, a child setting some of its fields
            base["model"] = shipped_model(base["model"])
        except ValueError as exc:
            raise InputError(str(path.parent / parent), str(exc), field="model") from None
    return _deep_merge(base, data), [(path, text), *layers]


def resolve_beside(data: dict, section: str, key: str, scenario: Path, overrides: list[str]) -> None:
    """Relative data paths in a scenario file are relative to that file, so scenarios travel with
    their data; a path given with --set stays relative to the working directory."""
    block = data.get(section)
    value = block.get(key) if isinstance(block, dict) else None
    if (isinstance(value, str) and value and not Path(value).is_absolute()
            and not any(o.startswith(f"{section}.{key}=") for o in overrides)
            and (scenario.parent / value).exists()):
        data[section][key] = str(scenario.parent / value)


def numbers(node: Any, loc: tuple = ()) -> Iterator[tuple[tuple, str]]:
    """(location, problem) of every non-finite float and every integer beyond int64."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from numbers(v, (*loc, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from numbers(v, (*loc, i))
    elif isinstance(node, float) and not math.isfinite(node):
        yield loc, f"must be a finite number, got {node}"
    elif isinstance(node, int) and not isinstance(node, bool) and abs(node) > MAX_INT:
        yield loc, f"is beyond 64 bits ({len(str(node))} digits)"
    elif isinstance(node, float) and abs(node) > MAX_INT:
        yield loc, f"is absurdly large ({node:g})"


def _misplaced(data: dict) -> Iterator[tuple[tuple, str]]:
    """(location, what to write instead) of every setting a scenario states where it no longer
    lives or where its runtime would ignore it."""
    d = data.get("deployment")
    if isinstance(d, dict):
        for key in d:
            if key in TwinCalibration.model_fields:
                yield ("deployment", key), (f"has moved to twin_calibration.{key} (the simulator's model of the live "
                                            "engines is one section now): write it there")
        groups: dict[str, list[str]] = {}
        for role, pool in d.items():
            if isinstance(pool, dict) and pool.get("core_group") is not None:
                groups.setdefault(str(pool["core_group"]), []).append(role)
        for role, pool in d.items():
            if isinstance(pool, dict) and "core_group" in pool:
                shared = ", ".join(f"{g}: [{', '.join(r)}]" for g, r in groups.items()) or "NAME: [relay, main]"
                yield ("deployment", role, "core_group"), f"has moved: write twin_calibration.core_groups: {{{shared}}}"
    live = data.get("live")
    if data.get("runtime", "sim") != "live" and isinstance(live, dict):
        for key in ("engines", "attach", "ray_address", "ray_wan"):
            if live.get(key) is not None:
                yield ("live", key), ("says which engines a live run uses, but this scenario runs in the simulator "
                                      "(runtime: sim), which would ignore it: remove it, or set runtime: live")
                break
    if data.get("runtime") == "live":
        if data.get("model") is not None:
            yield ("model",), ("a live run takes its model from live.model_dir (unset: the tiny model) and its KV "
                               "bytes per token from that model's config.json: remove the model block")
        if "twin_calibration" in data:
            yield ("twin_calibration",), "is the simulator's (the twin of a live run; fidelity measures it): remove it"


def _refuse(layers: Layers, loc: tuple, msg: str, overrides: list[str]) -> InputError:
    msg = with_range(Scenario, loc, msg)
    field = ".".join(map(str, loc))
    if any(o.split("=", 1)[0] == field for o in overrides):
        return InputError(str(layers[0][0]), msg + " (from --set)", field=field)
    path, line = where(layers, loc)
    return InputError(str(path), msg, line=line, field=field)


_TYPE_TAGS = {"str", "int", "float", "bool", "none", "LinkProfile"}


def clean_loc(loc: tuple) -> tuple:
    """pydantic's location without union-branch tags such as 'function-after[_check(), LinkProfile]'."""
    return tuple(p for p in loc if isinstance(p, int) or not (p in _TYPE_TAGS or re.search(r"[\[\](),]", p)))


def clean_msg(msg: str) -> str:
    for prefix in ("Value error, ", "Assertion failed, "):
        msg = msg.removeprefix(prefix)
    return re.sub(r"function-(after|before|wrap|plain)\[[^\]]*\]", "value", msg)


def load_scenario(path: str | Path, overrides: list[str] | None = None) -> Scenario:
    """A scenario by path, or a shipped one by name (e.g. 'paper/pdd')."""
    overrides = overrides or []
    path = resolve_scenario(path)
    data, layers = read_yaml(path)
    data = apply_overrides(data, overrides)
    for section, key in (("workload", "trace"), ("latency", "calibration_csv"), ("model", "arch")):
        resolve_beside(data, section, key, path, overrides)
    for loc, problem in (*numbers(data), *_misplaced(data)):
        raise _refuse(layers, loc, problem, overrides)
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise _refuse(layers, clean_loc(err["loc"]), clean_msg(err["msg"]), overrides) from None
