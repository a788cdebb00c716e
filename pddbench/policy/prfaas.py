"""Where Prefill-as-a-Service (PrfaaS: Qin et al., arXiv 2604.15039) prefills a request.

Pure functions, as pdd.py: they see what a real router can observe (the uncached length after
the local prefix cache, the line's predicted delivery time now) and the policy settings.

Selective offloading: a request whose uncached prefill length is above the threshold goes to the
remote, compute-dense prefill cluster; a shorter one stays in the local PD cluster end to end.
Bandwidth-aware: an offload is made only while the line delivers its KV in time (the prediction
includes the line's queue), else the request is prefilled locally. Cache-aware placement within a
site is the site's own cache-aware routing (the instance with the least work after its prefix
match). Not modelled: the paper's short-timescale re-balancing of local prefill and decode nodes,
and moving a prefix cache across clusters when bandwidth is abundant.
"""

from __future__ import annotations

from typing import Literal

OffloadReason = Literal["offloaded", "short_uncached", "line_busy"]
REASONS: tuple[str, ...] = ("offloaded", "short_uncached", "line_busy")  # offload_reason of a prfaas record


def choose_prefill_site(*, uncached_local_tokens: int, threshold_tokens: int, predicted_wan_kv_ms: float,
                        ttft_sla_ms: float, wan_budget_fraction: float) -> OffloadReason:
    """'offloaded' (prefill in the remote cluster, KV over the WAN), or why it stays local:
    'short_uncached' (the local prefix cache leaves at most threshold_tokens to compute) or
    'line_busy' (the line would deliver the KV later than its budget)."""
    if uncached_local_tokens <= threshold_tokens:
        return "short_uncached"
    if predicted_wan_kv_ms > wan_budget_fraction * ttft_sla_ms:
        return "line_busy"
    return "offloaded"


def streamed_kv_arrival_ms(*, prefill_end_ms: float, line_done_ms: float, last_layer_ms: float) -> float:
    """When a layer-wise streamed KV is all at the decoder. Each layer's KV leaves as soon as the
    layer is computed, so the transfer overlaps the prefill: it is done at the later of the line
    having carried every byte (the transfer started with the prefill) and the last layer's share
    crossing after the prefill ends (`last_layer_ms`: the line's prediction for one layer's bytes)."""
    return max(line_done_ms, prefill_end_ms + last_layer_ms)
