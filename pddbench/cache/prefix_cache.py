"""Block-hash prefix cache with optional LRU capacity.

Block ids are chained hashes (an id stands for its block *and* every block before it), so the
radix tree over token blocks collapses to a set of ids: a request's cached prefix is its run of
leading ids present in the set. Blocks are touched last-to-first, so within one request a parent
block is always more recent than its children and LRU evicts leaves before the prefixes they hang
from, as a radix tree's leaf-first eviction would.

That order is also what makes it fast. The set is prefix-closed along every chain (a block is never
held without its parent), so match() is a binary search. And recency need not be written block by
block: an insert consumes one clock value per block, last block first, so a parent's last touch is
its most recent child's + 1 unless an insert ended at it. Only the last block of an insert gets a
stamp, and only leaves (the only blocks LRU can pick) wait for eviction: leaves made by inserts in a queue (their stamps only grow), parents left childless in a small heap.
Same victims in the same order as a least-recently-used list of every block, at O(new blocks) per
insert instead of O(blocks).
"""

from __future__ import annotations

from collections import deque
from heapq import heappop, heappush
from typing import Sequence


class PrefixCache:
    def __init__(self, capacity_blocks: int | None = None):
        if capacity_blocks is not None and capacity_blocks < 0:
            raise ValueError("capacity_blocks must be >= 0 or None (unbounded)")
        self.capacity_blocks = capacity_blocks
        self._stamp: dict[int, int] = {}  # held block -> clock of the last insert that ended at it, or -1
        self._parent: dict[int, int | None] = {}  # bounded caches only, as the next two
        self._children: dict[int, int] = {}  # held children per held block
        # Leaves waiting for eviction as (stamp, block), stale entries skipped: made by an insert
        # (stamps in order), and parents whose last child was evicted (a heap).
        self._fresh: deque[tuple[int, int]] = deque()
        self._orphans: list[tuple[int, int]] = []
        self._clock = 0
        self.evicted_blocks = 0

    def __len__(self) -> int:
        return len(self._stamp)

    def __contains__(self, block_id: int) -> bool:
        return block_id in self._stamp

    def held_blocks(self) -> list[int]:
        """Every held block id (in no particular order)."""
        return list(self._stamp)

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

    def insert(self, hash_ids: Sequence[int], held: int | None = None) -> None:
        """Hold every block of `hash_ids`, most recent first in prefix order; evict LRU leaves.
        `held`: the caller's match() of these ids, just made (looked up here when not given)."""
        n = len(hash_ids)
        if self.capacity_blocks == 0 or not n:
            return
        if held is None:
            held = self.match(hash_ids)
        stamp = self._stamp
        base = self._clock
        self._clock = base + n
        if self.capacity_blocks is None:
            if held < n:
                stamp.update(dict.fromkeys(hash_ids[held:], 0))
            return
        children = self._children
        if held < n:  # the tail past the match is all new (prefix-closure); -1: learnt from children
            new = hash_ids[held:]
            stamp.update(dict.fromkeys(new, -1))
            self._parent.update(zip(new, hash_ids[held - 1:n - 1] if held else (None, *hash_ids[:n - 1])))
            children.update(dict.fromkeys(new, 1))
            children[hash_ids[n - 1]] = 0
            if held:
                children[hash_ids[held - 1]] += 1
        last = hash_ids[n - 1]
        stamp[last] = base
        if not children[last]:
            self._fresh.append((base, last))
        excess = len(stamp) - self.capacity_blocks
        if excess > 0:
            self._evict(excess)
        if len(self._fresh) + len(self._orphans) > 4 * len(stamp) + 1024:  # mostly stale: rebuild
            self._fresh = deque(sorted((stamp[h], h) for h, c in children.items() if not c))
            self._orphans = []

    def access(self, hash_ids: Sequence[int]) -> int:
        """Match then insert, as a serving engine does on admission; returns the hit blocks."""
        hit = self.match(hash_ids)
        self.insert(hash_ids, hit)
        return hit

    def _evict(self, excess: int) -> None:
        """Drop the `excess` least recently touched blocks, leaves first. A parent left without
        children is a leaf now; its last touch is its last direct one (kept) or its evicted child's
        + 1, and that child was the least recent block, so either way it is ordered right by the
        stamp it holds (-1 when it never ended an insert)."""
        stamp, parent, children, fresh, orphans = (
            self._stamp, self._parent, self._children, self._fresh, self._orphans)
        self.evicted_blocks += excess
        while excess:
            if orphans and (not fresh or orphans[0][0] < fresh[0][0]):
                s, h = heappop(orphans)
            else:
                s, h = fresh.popleft()
            if stamp.get(h) != s or children[h]:
                continue  # touched again since, or has grown children: not this leaf's turn
            del stamp[h], children[h]
            excess -= 1
            p = parent.pop(h)
            if p is not None:
                children[p] -= 1
                if not children[p]:
                    heappush(orphans, (stamp[p], p))
