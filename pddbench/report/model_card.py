"""`pddbench model show NAME`: a model's derived numbers, as the simulator uses them."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from pddbench.core.errors import InputError, UserError
from pddbench.models.architecture import derive
from pddbench.models.shipped import model_names, shipped_entry
from pddbench.schema.scenario import Model

REQUEST_TOKENS = (1_000, 32_000, 128_000)  # the KV a request of this many tokens sends over the WAN


def load_model(ref: str) -> tuple[Model, dict]:
    """A shipped model by name, or a Hugging Face config.json (as model.arch). Returns the model
    and the shipped file's provenance (source, published sizes)."""
    if ref.endswith(".json"):
        if not Path(ref).is_file():
            raise InputError(ref, "no such config.json file")
        try:
            return Model(name=Path(ref).parent.name or ref, arch=ref), {"source": ref}  # type: ignore[arg-type]
        except ValidationError as exc:
            err = exc.errors()[0]
            raise InputError(ref, f"{'.'.join(str(p) for p in err['loc']) or 'model'}: {err['msg']}") from None
    try:
        entry = shipped_entry(ref)
    except ValueError as exc:
        raise UserError(f"{exc}; `pddbench model list` shows them") from None
    return Model(**entry["model"]), {k: v for k, v in entry.items() if k != "model"}


def model_card(ref: str) -> dict:
    m, meta = load_model(ref)
    assert m.params_total_b is not None and m.params_active_b is not None and m.kv_bytes_per_token is not None
    card: dict = {"name": m.name, **meta, "given_by": "architecture" if m.arch else "sizes",
                  "params_total_b": round(m.params_total_b, 3), "params_active_b": round(m.params_active_b, 3),
                  "weight_bytes_per_param": m.weight_bytes_per_param,
                  "weight_gb": round(m.params_total_b * m.weight_bytes_per_param, 2),
                  "flops_per_token": m.flops_per_token or 2e9 * m.params_active_b,
                  "attn_flops_per_pair": m.attn_flops_per_pair or 4.0 * (m.layers or 0) * (m.hidden_size or 0),
                  "attention": m.attention, "kv_bytes_per_token": m.kv_bytes_per_token,
                  "sliding_window_tokens": m.sliding_window_tokens,
                  "sliding_kv_bytes_per_token": m.sliding_kv_bytes_per_token,
                  "fixed_state_bytes": m.fixed_state_bytes}
    if m.experts_total:
        card.update(experts_total=m.experts_total, experts_active=m.experts_active,
                    params_shared_b=round(m.moe_shared_params_b(), 3))
    if m.arch is not None:
        d = derive(m.arch)
        card.update(params_per_expert_b=round(d.params_per_expert_b, 6), moe_layers=d.moe_layers,
                    layers={"full_attention": d.full_layers, "sliding_attention": d.sliding_layers,
                            "linear_attention": d.linear_layers})
    card["wan_kv_bytes"] = {str(n): n * m.kv_bytes_per_token + min(n, m.sliding_window_tokens)
                            * m.sliding_kv_bytes_per_token + m.fixed_state_bytes for n in REQUEST_TOKENS}
    return card


def format_card(card: dict) -> str:
    lines = [f"{card['name']} (given by its {card['given_by']})", f"  source: {card.get('source', '-')}"]
    pub = card.get("published")
    lines.append(f"  parameters: {card['params_total_b']:g}B total, {card['params_active_b']:g}B active per token"
                 + (" (published: " + " / ".join(f"{pub[k]}B {w}" for k, w in (("params_total_b", "total"),
                                                                             ("params_active_b", "active")) if k in pub)
                    + ")" if pub else ""))
    if "experts_total" in card:
        lines.append(f"  MoE: {card['experts_total']} routed experts, top {card['experts_active']}; "
                     f"{card['params_shared_b']:g}B read by every token")
    lines.append(f"  weights: {card['weight_gb']:g} GB at {card['weight_bytes_per_param']:g} B/param")
    lines.append(f"  compute: {card['flops_per_token'] / 1e9:.2f} GFLOP/token, attention "
                 f"{card['attn_flops_per_pair'] / 1e6:.3f} MFLOP per (query, key) pair")
    if "layers" in card:
        lines.append("  layers: " + ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in card["layers"].items() if v))
    lines.append(f"  KV: {card['kv_bytes_per_token']:,} B per token ({card['attention']}, full-attention layers)")
    if card["sliding_window_tokens"]:
        lines.append(f"  sliding window: {card['sliding_kv_bytes_per_token']:,} B per token for the last "
                     f"{card['sliding_window_tokens']:,} tokens")
    if card["fixed_state_bytes"]:
        lines.append(f"  linear-attention state: {card['fixed_state_bytes']:,} B per request, sent once")
    lines.append("  WAN KV of a request: " + ", ".join(f"{int(n):,} tokens {b / 1e6:,.1f} MB"
                                                      for n, b in card["wan_kv_bytes"].items()))
    return "\n".join(lines)


def model_list() -> list[dict]:
    out = []
    for name in model_names():
        card = model_card(name)
        out.append({k: card.get(k) for k in ("name", "given_by", "params_total_b", "params_active_b",
                                             "kv_bytes_per_token", "fixed_state_bytes")})
    return out
