"""A model's architecture (the fields of its Hugging Face config.json) and what the simulator
derives from it, in one place: weight parameters (total, shared, per routed expert), FLOPs per
token, attention FLOPs per (query, key) pair, KV bytes per token of the full-attention layers, and
the state of sliding-window and linear-attention layers, which stops growing with the context and
crosses the WAN once per request.

Counting rules (each a fact of the published architecture, not a fit):
- Parameters: embeddings (vocab x hidden, the LM head again unless tied), per layer the attention
  projections (GQA: q, k, v, o; MLA: q_a, q_b or q, kv_a, kv_b, o; a gated full-attention q doubles;
  Gated DeltaNet: in_proj_qkvz, in_proj_ba, conv1d, out_proj) and the MLP (dense: gate, up, down;
  MoE: routed experts, shared experts, router). Norms and biases are left out (< 0.1 %).
- Active parameters: everything but the routed experts, plus top-k routed experts per MoE layer.
- FLOPs per token: 2 x (active parameters - the input embedding, a lookup) plus the linear-attention
  state update and read-out (4 x value heads x key dim x value dim per linear layer).
- Attention FLOPs per (query, key) pair: 2 x heads x (qk head dim + v head dim) summed over the
  full- and sliding-attention layers (a sliding layer's pairs are counted as if full: an upper bound).
- KV bytes per token: per full-attention layer, GQA 2 x kv_heads x head_dim, MLA the compressed
  latent kv_lora_rank + qk_rope_head_dim, times kv_cache_dtype_bytes.
- Sliding-window layers: the same per-token bytes, but for at most `sliding_window` tokens.
- Linear-attention layers: a fixed state per request: value heads x key dim x value dim (the
  recurrent state) + conv channels x (kernel - 1) (the convolution's tail), times the state's bytes.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, model_validator

LayerType = Literal["full_attention", "sliding_attention", "linear_attention"]

# Hugging Face spells a few fields two ways; the second spelling is read as the first.
HF_ALIASES = {"num_experts": "n_routed_experts", "num_local_experts": "n_routed_experts"}


class Architecture(BaseModel):
    """The fields of a Hugging Face config.json that set a model's size, compute and KV."""
    model_config = {"extra": "forbid"}

    num_hidden_layers: int = Field(ge=1, le=10_000)
    hidden_size: int = Field(ge=1, le=1_000_000)
    num_attention_heads: int = Field(ge=1, le=100_000)
    num_key_value_heads: int | None = Field(None, ge=1, le=100_000, description="GQA: KV heads (unset: = heads)")
    head_dim: int | None = Field(None, ge=1, le=100_000, description="unset: hidden_size / heads")
    intermediate_size: int = Field(0, ge=0, le=10_000_000, description="dense MLP width")
    vocab_size: int = Field(ge=1, le=100_000_000)
    tie_word_embeddings: bool = False
    attn_output_gate: bool = Field(False, description="a gated full attention (Qwen3-Next): q_proj twice as wide")
    # MLA (DeepSeek-V2/V3)
    kv_lora_rank: int | None = Field(None, ge=1, le=1_000_000)
    q_lora_rank: int | None = Field(None, ge=1, le=1_000_000)
    qk_rope_head_dim: int | None = Field(None, ge=0, le=100_000)
    qk_nope_head_dim: int | None = Field(None, ge=0, le=100_000)
    v_head_dim: int | None = Field(None, ge=1, le=100_000)
    # MoE
    n_routed_experts: int | None = Field(None, ge=1, le=1_000_000)
    num_experts_per_tok: int | None = Field(None, ge=1, le=1_000_000)
    moe_intermediate_size: int | None = Field(None, ge=1, le=10_000_000)
    n_shared_experts: int = Field(0, ge=0, le=10_000)
    shared_expert_intermediate_size: int | None = Field(None, ge=0, le=10_000_000,
                                                        description="Qwen: one shared expert of this width")
    first_k_dense_replace: int = Field(0, ge=0, description="the first k layers have a dense MLP")
    # hybrid attention
    layer_types: list[LayerType] | None = Field(None, description="per layer; unset: full_attention_interval or all full")
    full_attention_interval: int | None = Field(None, ge=1, description="every n-th layer full, the rest linear")
    sliding_window: int | None = Field(None, ge=1)
    linear_num_key_heads: int | None = Field(None, ge=1)
    linear_num_value_heads: int | None = Field(None, ge=1)
    linear_key_head_dim: int | None = Field(None, ge=1)
    linear_value_head_dim: int | None = Field(None, ge=1)
    linear_conv_kernel_dim: int = Field(4, ge=1)
    # storage (pddbench's, not config.json's: the serving choice)
    kv_cache_dtype_bytes: float = Field(2.0, gt=0, le=8, description="bytes per KV element (bf16 2, fp8 1)")
    state_dtype_bytes: float = Field(2.0, gt=0, le=8, description="bytes per linear-attention state element")
    weight_dtype_bytes: float | None = Field(
        None, gt=0, le=8, description="bytes per weight; from a config.json's torch_dtype / fp8 quantization_config; "
        "model.weight_bytes_per_param when unset")

    @model_validator(mode="after")
    def _consistent(self) -> "Architecture":
        moe = (self.n_routed_experts, self.num_experts_per_tok, self.moe_intermediate_size)
        if any(v is not None for v in moe) and any(v is None for v in moe):
            raise ValueError("MoE needs n_routed_experts (or num_experts), num_experts_per_tok and "
                             "moe_intermediate_size together")
        if self.n_routed_experts and self.num_experts_per_tok and self.num_experts_per_tok > self.n_routed_experts:
            raise ValueError("num_experts_per_tok must not exceed n_routed_experts")
        if self.kv_lora_rank is not None and (self.qk_rope_head_dim is None or self.qk_nope_head_dim is None
                                              or self.v_head_dim is None):
            raise ValueError("MLA (kv_lora_rank) needs qk_rope_head_dim, qk_nope_head_dim and v_head_dim")
        if self.layer_types is not None and len(self.layer_types) != self.num_hidden_layers:
            raise ValueError(f"layer_types lists {len(self.layer_types)} layers, num_hidden_layers is "
                             f"{self.num_hidden_layers}")
        kinds = set(self.types())
        if "sliding_attention" in kinds and self.sliding_window is None:
            raise ValueError("sliding_attention layers need sliding_window")
        if "linear_attention" in kinds and None in (self.linear_num_key_heads, self.linear_num_value_heads,
                                                     self.linear_key_head_dim, self.linear_value_head_dim):
            raise ValueError("linear_attention layers need linear_num_key_heads, linear_num_value_heads, "
                             "linear_key_head_dim and linear_value_head_dim")
        if self.head_dim is None and self.kv_lora_rank is None and self.hidden_size % self.num_attention_heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not a multiple of num_attention_heads "
                             f"{self.num_attention_heads}: give head_dim")
        if self.first_k_dense_replace > self.num_hidden_layers:
            raise ValueError(f"first_k_dense_replace {self.first_k_dense_replace} exceeds num_hidden_layers "
                             f"{self.num_hidden_layers}")
        if self.first_k_dense_replace and self.intermediate_size == 0:
            raise ValueError("first_k_dense_replace needs intermediate_size (the dense layers' MLP)")
        if self.n_routed_experts is None and self.intermediate_size == 0:
            raise ValueError("a dense model needs intermediate_size")
        return self

    def types(self) -> list[str]:
        if self.layer_types is not None:
            return list(self.layer_types)
        n = self.full_attention_interval
        return ["full_attention" if n is None or (i + 1) % n == 0 else "linear_attention"
                for i in range(self.num_hidden_layers)]

    @classmethod
    def from_config_json(cls, path: Path) -> "Architecture":
        """A Hugging Face config.json: the known fields are read, the rest (rope, dtype, ...) ignored."""
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError(f"{path}: a config.json holds one JSON object")
        known: dict = {}
        dtype_bytes = {"bfloat16": 2, "float16": 2, "float32": 4, "float8_e4m3fn": 1}.get(str(data.get("torch_dtype")))
        quant = data.get("quantization_config") or {}
        if isinstance(quant, dict) and str(quant.get("quant_method", "")).lower() == "fp8":
            dtype_bytes = 1
        if dtype_bytes:
            known["weight_dtype_bytes"] = dtype_bytes
        for key, value in data.items():
            name = HF_ALIASES.get(key, key)
            if name in cls.model_fields and value is not None:
                known[name] = value
        return cls(**known)


@dataclass(frozen=True)
class Derived:
    """What the simulator takes from an architecture (see the module docstring for each rule)."""
    params_total_b: float
    params_active_b: float
    params_shared_b: float          # read by every token: all but the routed experts
    params_per_expert_b: float      # one routed expert of one layer
    moe_layers: int
    experts_total: int | None
    experts_active: int | None
    flops_per_token: float
    attn_flops_per_pair: float
    kv_bytes_per_token: int         # full-attention layers, per token of context
    sliding_window_tokens: int      # 0: no sliding-window layers
    sliding_kv_bytes_per_token: int
    fixed_state_bytes: int          # linear-attention layers, per request
    full_layers: int
    sliding_layers: int
    linear_layers: int
    attention: str                  # mha | gqa | mla

    def as_dict(self) -> dict:
        return asdict(self)


def derive(a: Architecture) -> Derived:
    h, heads = a.hidden_size, a.num_attention_heads
    kv_heads = a.num_key_value_heads or heads
    head_dim = a.head_dim or h // heads
    types = a.types()
    mla = a.kv_lora_rank is not None

    if mla:
        assert a.qk_rope_head_dim is not None and a.qk_nope_head_dim is not None and a.v_head_dim is not None
        qk_dim, v_dim = a.qk_nope_head_dim + a.qk_rope_head_dim, a.v_head_dim
        q = (h * a.q_lora_rank + a.q_lora_rank * heads * qk_dim) if a.q_lora_rank else h * heads * qk_dim
        kv = h * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank * heads * (a.qk_nope_head_dim + v_dim)
        attn_params = q + kv + heads * v_dim * h
        kv_elems_per_layer = a.kv_lora_rank + a.qk_rope_head_dim
    else:
        qk_dim = v_dim = head_dim
        q = h * heads * head_dim * (2 if a.attn_output_gate else 1)
        attn_params = q + 2 * h * kv_heads * head_dim + heads * head_dim * h
        kv_elems_per_layer = 2 * kv_heads * head_dim
    pair_flops_per_layer = 2.0 * heads * (qk_dim + v_dim)

    lin_params = lin_flops = lin_state = 0.0
    if "linear_attention" in types:
        kh, vh = a.linear_num_key_heads, a.linear_num_value_heads
        dk, dv = a.linear_key_head_dim, a.linear_value_head_dim
        assert kh and vh and dk and dv
        key_dim, value_dim = kh * dk, vh * dv
        conv_dim = 2 * key_dim + value_dim
        lin_params = h * (2 * key_dim + 2 * value_dim) + h * 2 * vh + conv_dim * a.linear_conv_kernel_dim \
            + value_dim * h
        lin_flops = 4.0 * vh * dk * dv
        lin_state = (vh * dk * dv + conv_dim * (a.linear_conv_kernel_dim - 1)) * a.state_dtype_bytes

    moe = a.n_routed_experts is not None
    dense_mlp = 3 * h * a.intermediate_size
    expert = 3 * h * (a.moe_intermediate_size or 0)
    shared_width = (a.shared_expert_intermediate_size or 0) + a.n_shared_experts * (a.moe_intermediate_size or 0)
    total = active = 0.0
    moe_layers = 0
    for i, kind in enumerate(types):
        layer = {"full_attention": attn_params, "sliding_attention": attn_params}.get(kind, lin_params)
        if moe and i >= a.first_k_dense_replace:
            assert a.n_routed_experts and a.num_experts_per_tok
            moe_layers += 1
            common = layer + 3 * h * shared_width + h * a.n_routed_experts  # attention, shared experts, router
            total += common + a.n_routed_experts * expert
            active += common + a.num_experts_per_tok * expert
        else:
            total += layer + dense_mlp
            active += layer + dense_mlp
    embed = a.vocab_size * h
    head = 0 if a.tie_word_embeddings else embed
    total += embed + head
    active += embed + head
    routed_total = moe_layers * (a.n_routed_experts or 0) * expert

    full, sliding, linear = (types.count(k) for k in ("full_attention", "sliding_attention", "linear_attention"))
    per_layer_kv = kv_elems_per_layer * a.kv_cache_dtype_bytes
    return Derived(
        params_total_b=total / 1e9, params_active_b=active / 1e9, params_shared_b=(total - routed_total) / 1e9,
        params_per_expert_b=expert / 1e9, moe_layers=moe_layers,
        experts_total=a.n_routed_experts, experts_active=a.num_experts_per_tok,
        flops_per_token=2.0 * (active - embed) + linear * lin_flops,
        attn_flops_per_pair=(full + sliding) * pair_flops_per_layer,
        kv_bytes_per_token=round(full * per_layer_kv),
        sliding_window_tokens=a.sliding_window if sliding else 0,
        sliding_kv_bytes_per_token=round(sliding * per_layer_kv),
        fixed_state_bytes=round(linear * lin_state),
        full_layers=full, sliding_layers=sliding, linear_layers=linear,
        attention="mla" if mla else ("gqa" if kv_heads < heads else "mha"))
