"""Block-hash prefix cache with optional LRU capacity.

Block ids are chained hashes (an id stands for its block *and* every block before it), so the
radix tree over token blocks collapses to a set of ids: a request's cached prefix is its run of
leading ids present in the set. Blocks are touched last-to-first, so within one request a parent
block is always more recent than its children and LRU evicts leaves before the prefixes they hang
from, as a radix tree's leaf-first eviction would.

That order is also why this is fast: the set is prefix-closed along every request's chain (a block
is never held without its parent), so match() is a binary search, and recency is a stamp per block
written in bulk rather than a linked list reordered block by block. Eviction walks the touches in
stamp order and skips the stale ones (blocks touched again later): the same victims in the same
order as an ordered dict's least-recent-first pops.
"""

from __future__ import annotations

from collections import deque
from operator import itemgetter
from typing import Sequence

# Touch logs are rebuilt from the live stamps when they hold this many more entries than blocks.
_COMPACT_SLACK = 1 << 16


class PrefixCache:
    def __init__(self, capacity_blocks: int | None = None):
        if capacity_blocks is not None and capacity_blocks < 0:
            raise ValueError("capacity_blocks must be >= 0 or None (unbounded)")
        self.capacity_blocks = capacity_blocks
        self._stamp: dict[int, int] = {}  # block id -> recency stamp of its last touch
        self._clock = 0
        # Touches in stamp order, kept only when capacity is bounded: [first stamp, ids, next index].
        self._touches: deque[list] = deque()
        self._logged = 0  # ids held in _touches
        self.evicted_blocks = 0

    def __len__(self) -> int:
        return len(self._stamp)

    def __contains__(self, block_id: int) -> bool:
        return block_id in self._stamp

    def match(self, hash_ids: Sequence[int]) -> int:
        """Number of leading blocks of `hash_ids` held now (does not change recency)."""
        held = self._stamp
        n = len(hash_ids)
        if not n or hash_ids[0] not in held:
            return 0
        if hash_ids[n - 1] in held:
            return n
        lo, hi = 1, n - 1  # hash_ids[:lo] held, hash_ids[hi] not
        while lo < hi:
            mid = (lo + hi) >> 1
            if hash_ids[mid] in held:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def insert(self, hash_ids: Sequence[int], held: int = 0) -> None:
        """Hold every block of `hash_ids`, most recent first in prefix order; evict LRU leaves.
        `held` (the caller's match() just made) is accepted for callers' sake; the touch order,
        last block first, does not depend on it."""
        n = len(hash_ids)
        if self.capacity_blocks == 0 or not n:
            return
        touched = hash_ids[::-1]
        base = self._clock
        self._stamp.update(zip(touched, range(base, base + n)))
        self._clock = base + n
        if self.capacity_blocks is None:
            return
        self._touches.append([base, touched, 0])
        self._logged += n
        excess = len(self._stamp) - self.capacity_blocks
        if excess > 0:
            self._evict(excess)
        if self._logged > 2 * len(self._stamp) + _COMPACT_SLACK:
            self._compact()

    def access(self, hash_ids: Sequence[int]) -> int:
        """Match then insert, as a serving engine does on admission; returns the hit blocks."""
        hit = self.match(hash_ids)
        self.insert(hash_ids, hit)
        return hit

    def _evict(self, excess: int) -> None:
        """Drop the `excess` least recently touched blocks (a touch is live if its stamp is current)."""
        stamp, touches = self._stamp, self._touches
        self.evicted_blocks += excess
        while excess:
            entry = touches[0]
            base, ids, i = entry
            n = len(ids)
            while i < n and excess:
                h = ids[i]
                if stamp.get(h) == base + i:
                    del stamp[h]
                    excess -= 1
                i += 1
            if i == n:
                touches.popleft()
                self._logged -= n
            else:
                entry[2] = i

    def _compact(self) -> None:
        """Rewrite the touch log as one entry of the live blocks, oldest first; stamps renumbered."""
        order = [h for h, _ in sorted(self._stamp.items(), key=itemgetter(1))]
        self._stamp = {h: i for i, h in enumerate(order)}
        self._clock = len(order)
        self._touches = deque([[0, order, 0]])
        self._logged = len(order)
