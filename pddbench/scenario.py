"""Scenario schema: one pydantic model validates YAML files and `--set dotted.path=value` overrides.

A scenario names the workload, model, chips, deployment, network, policy, SLA and seed. The
resolved scenario (after overrides) is saved with every run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, Field, ValidationError, model_validator

from netem.profile import LinkProfile, load_profile
from pddbench.errors import InputError, UserError
from pddbench.shipped import resolve_scenario, shipped_scenario_names
from pddbench.runtime_config import LatencyConfig, LiveConfig
from pddbench.workload.fixed import FixedConfig
from pddbench.workload.synth import SynthConfig


class _Strict(BaseModel):
    model_config = {"extra": "forbid"}


WorkloadSource = Literal["trace", "synth", "fixed"]


class Workload(_Strict):
    source: WorkloadSource | None = Field(
        None, description="where requests come from; may be left out when exactly one of trace/synth/fixed is given")
    trace: str | None = Field(None, min_length=1, description="Mooncake JSONL trace (source: trace)")
    synth: SynthConfig = Field(default_factory=SynthConfig, description="the agentic generator (source: synth)")
    fixed: FixedConfig | None = Field(None, description="a fixed-shape workload (source: fixed)")
    block_size: int = Field(512, ge=1)
    rate_scale: float = Field(1.0, gt=0, description="arrival rate multiplier (timestamps divided by it)")
    max_requests: int | None = Field(None, ge=1)

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
    ttft_ms: float = Field(2000.0, gt=0, description="per-request TTFT bound")
    tpot_ms: float = Field(100.0, gt=0, description="per-request TPOT bound")
    percentile: float = Field(90.0, gt=0, le=100, description="the SLA holds when this percentile of TTFT and TPOT is within bounds")


class Chip(_Strict):
    peak_tflops: float = Field(gt=0, description="dense peak at the serving precision")
    memory_gb: float = Field(gt=0)
    memory_bw_tbps: float = Field(gt=0)
    interconnect_gbps: float = Field(gt=0, description="scale-up bandwidth per chip")
    price_per_hour: float = Field(ge=0)


class Model(_Strict):
    name: str
    params_total_b: float = Field(gt=0)
    params_active_b: float = Field(gt=0)
    layers: int = Field(ge=1)
    hidden_size: int = Field(ge=1)
    kv_bytes_per_token: int = Field(ge=1, description="KV cache bytes per token, all layers")
    attention: Literal["mha", "gqa", "mla"] = "gqa"
    weight_bytes_per_param: float = Field(1.0, gt=0)


class Pool(_Strict):
    """A set of identical instances of one role."""
    chip: str
    instances: int = Field(ge=1)
    chips_per_instance: int = Field(8, ge=1)
    dc: Literal["a", "b"] = "a"
    chunk_tokens: int = Field(8192, ge=1, description="prefill chunk / batched-token budget per step")
    max_batch_seqs: int = Field(256, ge=1, description="decode batch limit")
    kv_memory_fraction: float = Field(0.9, gt=0, le=1, description="memory left after weights usable for KV")
    prefix_cache: bool = True
    pack_tail_chunks: bool = Field(False, description="prefill: let a tail chunk share a step with other requests")


DeploymentKind = Literal["colocated", "same_dc_pd", "cross_dc_pd", "pdd"]
ROLES_OF_KIND: dict[str, tuple[str, ...]] = {  # pools a simulated deployment of each kind needs
    "same_dc_pd": ("prefill", "decode"),
    "cross_dc_pd": ("prefill", "decode"),
    "pdd": ("prefill", "relay", "main"),
}


class Deployment(_Strict):
    """The deployment, stated once for both runtimes. The simulator needs the pools of its kind;
    a live run needs only the kind and reads the pools' settings where given (e.g. the relay's
    max_batch_seqs is the PDD router's relay capacity)."""
    kind: DeploymentKind
    prefill: Pool | None = Field(None, description="P pool")
    decode: Pool | None = Field(None, description="D pool of the PD baselines")
    relay: Pool | None = Field(None, description="RLD pool (pdd)")
    main: Pool | None = Field(None, description="MD pool (pdd)")
    kv_block_tokens: int = Field(1, ge=1, description="tokens per engine KV block: a transfer moves whole blocks "
                                 "(vLLM: 16 on GPU, 128 on CPU); 1 = exactly the tokens' bytes")

    def pools(self) -> dict[str, Pool]:
        return {role: p for role in ("prefill", "decode", "relay", "main") if (p := getattr(self, role)) is not None}


class Network(_Strict):
    wan: LinkProfile | str = Field("cross-city-10g", description="profile name, YAML path or inline")
    rdma: LinkProfile | str = "same-dc-rdma"
    wan_lines: int = Field(1, ge=1)
    wan_line_price_per_hour: float = Field(0.0, ge=0)

    def wan_profile(self) -> LinkProfile:
        return self.wan if isinstance(self.wan, LinkProfile) else load_profile(self.wan)

    def rdma_profile(self) -> LinkProfile:
        return self.rdma if isinstance(self.rdma, LinkProfile) else load_profile(self.rdma)


class Policy(_Strict):
    handoff_mode: Literal["adaptive", "one_shot", "catch_up"] = "adaptive"
    catch_up_threshold_tokens: int = Field(64, ge=0, description="adaptive: Catch-Up above this many pending tokens")
    catch_up_batch_tokens: int = Field(32, ge=1, description="tokens handed over per Catch-Up batch")
    relay_busy_fraction: float = Field(0.8, gt=0, le=1, description="adaptive: One-Shot when RLD load exceeds this")
    relay_ttft_budget_fraction: float = Field(
        0.1, ge=0, description="use P->RLD->MD when predicted WAN KV time exceeds this share of the TTFT SLA")
    singular_filter: bool = True
    singular_min_input_tokens: int = Field(32768, ge=1, description="singular flow: input at least this long ...")
    singular_max_output_tokens: int = Field(16, ge=1, description="... and max_tokens at most this")
    catch_up_max_rounds: int = Field(8, ge=1)
    relay_only_pipeline: bool = Field(False, description="ablation: P->RLD only for low-hit requests (excluded by the article)")
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
    live: LiveConfig = Field(default_factory=LiveConfig, description="runtime: live settings")

    @model_validator(mode="after")
    def _runnable(self) -> "Scenario":
        d = self.deployment
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
        if self.model is None:
            raise ValueError("a simulated scenario needs a model")
        return self


# -- loading ---------------------------------------------------------------------------------

def parse_override(text: str) -> tuple[list[str], Any]:
    if "=" not in text:
        raise UserError(f"--set '{text}': expected dotted.path=value, e.g. --set sla.ttft_ms=1500")
    key, raw = text.split("=", 1)
    if not key or any(not part for part in key.split(".")):
        raise UserError(f"--set '{text}': empty path component")
    try:
        value = yaml.safe_load(raw) if raw != "" else ""
    except yaml.YAMLError:
        value = raw
    return key.split("."), value


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    for text in overrides:
        path, value = parse_override(text)
        node = data
        for part in path[:-1]:
            nxt = node.get(part)
            if not isinstance(nxt, dict):
                nxt = {} if nxt is None else nxt
                if not isinstance(nxt, dict):
                    raise UserError(f"--set '{text}': '{part}' is not a mapping")
                node[part] = nxt
            node = nxt
        node[path[-1]] = value
    return data


def _yaml_line(text: str, loc: tuple) -> int | None:
    """1-based line of the deepest YAML node on the path `loc`, for error messages."""
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    line = None
    for key in loc:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if k.value == str(key):
                    line, node = k.start_mark.line + 1, v
                    break
            else:
                return line
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def _deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _read_yaml(path: Path, depth: int = 0) -> tuple[dict, str]:
    """A scenario mapping; `extends: other.yaml` (relative to the file) is merged underneath."""
    if not path.is_file():
        what = "is a directory, not a scenario file" if path.is_dir() else "no such scenario file"
        raise InputError(str(path), f"{what} (shipped scenarios: {', '.join(shipped_scenario_names())})")
    text = path.read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise InputError(str(path), f"is not valid YAML ({getattr(exc, 'problem', exc)})",
                         line=mark.line + 1 if mark else None) from None
    if not isinstance(data, dict):
        raise InputError(str(path), "must be a YAML mapping")
    parent = data.pop("extends", None)
    if parent is not None:
        if depth > 8:
            raise InputError(str(path), "extends nests too deep (a cycle?)", field="extends")
        base, _ = _read_yaml(path.parent / str(parent), depth + 1)
        data = _deep_merge(base, data)
    return data, text


def _resolve_beside(data: dict, section: str, key: str, scenario: Path, overrides: list[str]) -> None:
    """Relative data paths in a scenario file are relative to that file, so scenarios travel with
    their data; a path given with --set stays relative to the working directory."""
    value = (data.get(section) or {}).get(key)
    if (isinstance(value, str) and not Path(value).is_absolute()
            and not any(o.startswith(f"{section}.{key}=") for o in overrides)
            and (scenario.parent / value).exists()):
        data[section][key] = str(scenario.parent / value)


def load_scenario(path: str | Path, overrides: list[str] | None = None) -> Scenario:
    """A scenario by path, or a shipped one by name (e.g. 'paper/pdd')."""
    path = resolve_scenario(path)
    data, text = _read_yaml(path)
    data = apply_overrides(data, overrides or [])
    for section, key in (("workload", "trace"), ("latency", "calibration_csv")):
        _resolve_beside(data, section, key, path, overrides or [])
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p in ("str", "LinkProfile")))
        field = ".".join(map(str, loc))
        via_set = any(o.split("=", 1)[0] == field for o in overrides or [])
        msg = err["msg"].removeprefix("Value error, ") + (" (from --set)" if via_set else "")
        raise InputError(str(path), msg, line=_yaml_line(text, loc), field=field) from None
