"""Per-request prefix hit rate and the 7-bucket histogram of the PDD article.

hit_tokens = min(leading cached blocks * block_size, input_length); hit rate = hit_tokens /
input_length. Bucket i holds edges[i] <= 100*hit < edges[i+1], the last bucket includes 100;
bucket membership is decided in exact integer arithmetic so 0.95 never lands in 93-95.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from pddbench.cache import PrefixCache
from pddbench.workload.trace import Request

HIST_EDGES_PCT: tuple[int, ...] = (0, 90, 93, 95, 97, 98, 99, 100)
N_BUCKETS = len(HIST_EDGES_PCT) - 1
BUCKET_LABELS = tuple(f"{a}-{b}%" for a, b in zip(HIST_EDGES_PCT[:-1], HIST_EDGES_PCT[1:]))


def hit_tokens(requests: Sequence[Request], block_size: int = 512,
               cache_blocks: int | None = None) -> np.ndarray:
    """Cached prompt tokens per request, replaying arrivals through a prefix cache.

    cache_blocks=None is the ideal cache: every block id seen in any earlier request.
    """
    cache = PrefixCache(cache_blocks)
    out = np.empty(len(requests), dtype=np.int64)
    for i, req in enumerate(requests):
        out[i] = min(cache.access(req.hash_ids) * block_size, req.input_length)
    return out


def bucket_of(hit_tok: int, input_len: int) -> int:
    """Histogram bucket of one request, exact: 100*hit/input >= edge  <=>  100*hit >= edge*input."""
    b = 0
    for edge in HIST_EDGES_PCT[1:-1]:
        if 100 * hit_tok >= edge * input_len:
            b += 1
        else:
            break
    return b


def buckets(hit_tok: np.ndarray, input_len: np.ndarray) -> np.ndarray:
    hundred_hit = 100 * hit_tok.astype(np.int64)
    inp = input_len.astype(np.int64)
    b = np.zeros(len(hit_tok), dtype=np.int64)
    for edge in HIST_EDGES_PCT[1:-1]:
        b += hundred_hit >= edge * inp
    return b


def histogram(bucket_ids: np.ndarray) -> list[float]:
    """Fraction of requests per bucket (all zeros for no requests)."""
    counts = np.bincount(bucket_ids, minlength=N_BUCKETS).astype(float)
    total = counts.sum()
    return (counts / total).tolist() if total else [0.0] * N_BUCKETS
