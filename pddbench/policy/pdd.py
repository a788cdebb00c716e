"""Routing and handoff decisions of PDD.

Pure functions: they see only what a real router can observe (prompt length, prefix matches,
predicted link time, relay load, tokens produced so far) and the policy settings, so the
simulator and the live router make the same choice in the same situation.
"""

from __future__ import annotations

from typing import Literal

Pipeline = Literal["p_md", "p_rld_md", "p_rld"]
HandoffMode = Literal["one_shot", "catch_up"]

TOKEN_ID_BYTES = 4
HANDOFF_HEADER_BYTES = 64


def kv_transfer_bytes(tokens: int, kv_bytes_per_token: int, block_tokens: int = 1, window_tokens: int = 0,
                      window_bytes_per_token: int = 0, fixed_bytes: int = 0) -> int:
    """Bytes a KV transfer of `tokens` moves: whole engine blocks (a partial last block too) of the
    full-attention layers' KV, and, for a hybrid model, its sliding-window layers' KV of at most
    `window_tokens` tokens and its linear-attention layers' fixed state, sent once."""
    nbytes = -(-tokens // block_tokens) * block_tokens * kv_bytes_per_token
    if tokens > 0 and (window_bytes_per_token or fixed_bytes):
        nbytes += min(tokens, window_tokens) * window_bytes_per_token + fixed_bytes
    return nbytes


def choose_pipeline(*, predicted_wan_kv_ms: float, ttft_sla_ms: float, budget_fraction: float,
                    relay_only_ablation: bool = False, relay_utilisation: float | None = None,
                    relay_busy_fraction: float = 1.0) -> Pipeline:
    """P->MD when the KV reaches MD well within the TTFT budget (high-hit requests: little to
    send); otherwise mask the WAN with a relay: P->RLD->MD. The excluded P->RLD-only pipeline
    exists only as an ablation.

    Relay load: `relay_utilisation` is the load of the relay the request would go to (the least
    loaded one, 0..1). When it is at or above `relay_busy_fraction`, every relay is busy: a relay
    path would queue behind the relay's own backlog and push it further into saturation, while
    the WAN prediction says nothing about that queue. The request then goes P->MD and waits for
    the WAN instead. None (the default, for older callers) ignores relay load."""
    if predicted_wan_kv_ms <= budget_fraction * ttft_sla_ms:
        return "p_md"
    if relay_utilisation is not None and relay_utilisation >= relay_busy_fraction:
        return "p_md"
    return "p_rld" if relay_only_ablation else "p_rld_md"


def is_singular_flow(*, input_tokens: int, uncached_tokens: int, max_output_tokens: int,
                     min_input_tokens: int, max_output: int) -> bool:
    """Very long, mostly uncached input with a very short output: the relay finishes it before
    its KV could reach MD, so the WAN transfer is never worth starting."""
    return (input_tokens >= min_input_tokens and uncached_tokens >= input_tokens // 2
            and max_output_tokens <= max_output)


def choose_handoff_mode(*, configured: Literal["adaptive", "one_shot", "catch_up"], pending_tokens: int,
                        threshold_tokens: int, relay_utilisation: float, relay_busy_fraction: float) -> HandoffMode:
    """Adaptive: Catch-Up when many eager tokens are pending (one big extend step would be a
    stall the user feels) and the relay has room to keep decoding; One-Shot otherwise, which
    frees the relay soonest."""
    if configured != "adaptive":
        return configured
    if pending_tokens > threshold_tokens and relay_utilisation < relay_busy_fraction:
        return "catch_up"
    return "one_shot"


def catch_up_finished(*, pending_tokens: int, batch_tokens: int, rounds: int, max_rounds: int) -> bool:
    """Stop catching up (final switch) once the backlog fits one small batch, or after
    max_rounds when MD cannot replay faster than the relay decodes."""
    return pending_tokens <= batch_tokens or rounds >= max_rounds


def handoff_message_bytes(tokens: int) -> int:
    """Bytes on the wire for handing over `tokens` token ids."""
    return HANDOFF_HEADER_BYTES + TOKEN_ID_BYTES * tokens
