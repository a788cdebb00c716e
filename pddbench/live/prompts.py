"""Token-id prompts from a trace's hash ids, so a server's prefix cache sees exactly the trace's
sharing: each hash id maps to its own block of tokens (same id -> the same tokens everywhere,
different ids -> different tokens), the last block cut to input_length.

Tokens come from a counter-based hash (splitmix64 of id and position), not a seeded RNG stream,
so they are identical across numpy versions and machines.
"""

from __future__ import annotations

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = x + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def block_tokens(hash_id: int, block_size: int, vocab_lo: int, vocab_hi: int) -> np.ndarray:
    """The token ids standing for one hash block."""
    if not 0 <= vocab_lo < vocab_hi:
        raise ValueError("need 0 <= vocab_lo < vocab_hi")
    pos = np.arange(block_size, dtype=np.uint64)
    with np.errstate(over="ignore"):
        keys = np.uint64(hash_id) * np.uint64(1 << 32) + pos
    return (_splitmix64(keys) % np.uint64(vocab_hi - vocab_lo)).astype(np.int64) + vocab_lo


def prompt_tokens(hash_ids: list[int], input_length: int, block_size: int, vocab_lo: int, vocab_hi: int) -> list[int]:
    if len(hash_ids) * block_size < input_length:
        raise ValueError(f"{len(hash_ids)} blocks of {block_size} cannot hold {input_length} tokens")
    if not hash_ids:
        return []
    blocks = [block_tokens(h, block_size, vocab_lo, vocab_hi) for h in hash_ids]
    return np.concatenate(blocks)[:input_length].tolist()
