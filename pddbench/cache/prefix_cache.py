"""Block-hash prefix cache with optional LRU capacity.

Block ids are chained hashes (an id stands for its block *and* every block before it), so the
radix tree over token blocks collapses to a set of ids: a request's cached prefix is its run of
leading ids present in the set. Blocks are touched last-to-first, so within one request a parent
block is always more recent than its children and LRU evicts leaves before the prefixes they hang
from, as a radix tree's leaf-first eviction would.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Sequence


class PrefixCache:
    def __init__(self, capacity_blocks: int | None = None):
        if capacity_blocks is not None and capacity_blocks < 0:
            raise ValueError("capacity_blocks must be >= 0 or None (unbounded)")
        self.capacity_blocks = capacity_blocks
        self._blocks: OrderedDict[int, None] = OrderedDict()
        self.evicted_blocks = 0

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, block_id: int) -> bool:
        return block_id in self._blocks

    def match(self, hash_ids: Sequence[int]) -> int:
        """Number of leading blocks of `hash_ids` held now (does not change recency)."""
        blocks = self._blocks
        n = 0
        for h in hash_ids:
            if h not in blocks:
                break
            n += 1
        return n

    def insert(self, hash_ids: Sequence[int], held: int = 0) -> None:
        """Hold every block of `hash_ids`, most recent first in prefix order; evict LRU leaves.
        `held`: the caller's match() of these ids, just made; those leading blocks are known to be
        here, so they are moved without being looked up first (the same steps in the same order)."""
        if self.capacity_blocks == 0:
            return
        blocks = self._blocks
        move = blocks.move_to_end
        for h in reversed(hash_ids[held:]):
            if h in blocks:
                move(h)
            else:
                blocks[h] = None
        for h in reversed(hash_ids[:held]):
            move(h)
        if self.capacity_blocks is not None:
            excess = len(blocks) - self.capacity_blocks
            for _ in range(max(0, excess)):
                blocks.popitem(last=False)
            self.evicted_blocks += max(0, excess)

    def access(self, hash_ids: Sequence[int]) -> int:
        """Match then insert, as a serving engine does on admission; returns the hit blocks."""
        hit = self.match(hash_ids)
        self.insert(hash_ids, hit)
        return hit
