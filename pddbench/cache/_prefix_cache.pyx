# distutils: language = c++
# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The prefix cache of prefix_cache.py compiled: the same algorithm, step for step, over C++
containers (a hash map of block nodes, a deque and a heap of leaves), so the same calls give the
same hits and the same victims in the same order; tests/test_prefix_cache.py holds both to a
plain LRU. A simulation makes a million cache calls per 100,000 requests; in Python they were
about a third of its time (dict, deque and heap work per block).

Block ids are unsigned 64-bit (trace ids are int64 >= 0; the live router's are 8-byte hashes)."""

from libc.stdint cimport int64_t, uint64_t
from libcpp.deque cimport deque
from libcpp.pair cimport pair
from libcpp.unordered_map cimport unordered_map
from libcpp.vector cimport vector
from libcpp.algorithm cimport sort
from cython.operator cimport dereference as deref


cdef extern from *:
    """
    #include <cstdint>
    #include <functional>
    #include <queue>
    #include <utility>
    #include <vector>
    typedef std::pair<int64_t, uint64_t> Leaf;
    typedef std::priority_queue<Leaf, std::vector<Leaf>, std::greater<Leaf> > LeafHeap;
    """
    cdef cppclass LeafHeap:  # a min-heap of (stamp, block), as heapq orders the tuples
        void push(pair[int64_t, uint64_t]&)
        pair[int64_t, uint64_t]& top()
        void pop()
        size_t size()
        bint empty()


cdef struct Node:
    int64_t stamp       # clock of the last insert that ended at the block, or -1
    uint64_t parent
    int64_t children    # held children
    bint has_parent


cdef class PrefixCache:
    cdef unordered_map[uint64_t, Node] _held
    cdef deque[pair[int64_t, uint64_t]] _fresh
    cdef LeafHeap _orphans
    cdef int64_t _capacity  # -1: unbounded
    cdef int64_t _clock
    cdef public object evicted_blocks

    def __init__(self, capacity_blocks=None):
        if capacity_blocks is not None and capacity_blocks < 0:
            raise ValueError("capacity_blocks must be >= 0 or None (unbounded)")
        self._capacity = -1 if capacity_blocks is None else capacity_blocks
        self._clock = 0
        self.evicted_blocks = 0

    @property
    def capacity_blocks(self):
        return None if self._capacity < 0 else self._capacity

    def __len__(self):
        return self._held.size()

    def __contains__(self, block_id):
        return self._held.count(<uint64_t>block_id) > 0

    def held_blocks(self) -> list:
        """Every held block id (in no particular order)."""
        return [p.first for p in self._held]

    cdef Py_ssize_t _match(self, list ids):
        cdef Py_ssize_t n = len(ids), lo, hi, mid
        if not n or not self._held.count(<uint64_t>ids[0]):
            return 0
        if self._held.count(<uint64_t>ids[n - 1]):
            return n
        lo, hi = 1, n - 1  # ids[:lo] held, ids[hi] not
        while lo < hi:
            mid = (lo + hi) >> 1
            if self._held.count(<uint64_t>ids[mid]):
                lo = mid + 1
            else:
                hi = mid
        return lo

    def match(self, hash_ids):
        """Number of leading blocks of `hash_ids` held now (does not change recency)."""
        return self._match(hash_ids if type(hash_ids) is list else list(hash_ids))

    def insert(self, hash_ids, held=None):
        """Hold every block of `hash_ids`, most recent first in prefix order; evict LRU leaves.
        `held`: the caller's match() of these ids, just made (looked up here when not given)."""
        cdef list ids = hash_ids if type(hash_ids) is list else list(hash_ids)
        cdef Py_ssize_t n = len(ids), h0, i
        if self._capacity == 0 or not n:
            return
        h0 = self._match(ids) if held is None else held
        cdef int64_t base = self._clock
        self._clock = base + n
        cdef Node node
        if self._capacity < 0:
            node.stamp, node.children, node.has_parent, node.parent = 0, 0, False, 0
            for i in range(h0, n):
                self._held[<uint64_t>ids[i]] = node
            return
        if h0 < n:  # the tail past the match is all new (prefix-closure)
            node.stamp, node.children = -1, 1
            for i in range(h0, n):
                node.has_parent = i > 0
                node.parent = <uint64_t>ids[i - 1] if i > 0 else 0
                self._held[<uint64_t>ids[i]] = node
            self._held[<uint64_t>ids[n - 1]].children = 0
            if h0:
                self._held[<uint64_t>ids[h0 - 1]].children += 1
        cdef uint64_t last = <uint64_t>ids[n - 1]
        cdef Node* last_node = &self._held[last]
        last_node.stamp = base
        if not last_node.children:
            self._fresh.push_back(pair[int64_t, uint64_t](base, last))
        cdef int64_t excess = <int64_t>self._held.size() - self._capacity
        if excess > 0:
            self._evict(excess)
        if self._fresh.size() + self._orphans.size() > 4 * self._held.size() + 1024:  # mostly stale
            self._rebuild_leaves()

    def access(self, hash_ids):
        """Match then insert, as a serving engine does on admission; returns the hit blocks."""
        cdef list ids = hash_ids if type(hash_ids) is list else list(hash_ids)
        hit = self._match(ids)
        self.insert(ids, hit)
        return hit

    cdef void _evict(self, int64_t excess):
        """Drop the `excess` least recently touched blocks, leaves first (see prefix_cache.py)."""
        cdef pair[int64_t, uint64_t] leaf
        cdef unordered_map[uint64_t, Node].iterator it
        cdef Node* up
        cdef uint64_t parent
        cdef bint has_parent
        self.evicted_blocks += excess
        while excess:
            if not self._orphans.empty() and (self._fresh.empty() or
                                              self._orphans.top().first < self._fresh.front().first):
                leaf = self._orphans.top()
                self._orphans.pop()
            else:
                leaf = self._fresh.front()
                self._fresh.pop_front()
            it = self._held.find(leaf.second)
            if it == self._held.end() or deref(it).second.stamp != leaf.first or deref(it).second.children:
                continue  # touched again since, or has grown children: not this leaf's turn
            parent, has_parent = deref(it).second.parent, deref(it).second.has_parent
            self._held.erase(it)
            excess -= 1
            if has_parent:
                up = &self._held[parent]  # a pointer: deref(iterator).second would be a copy
                up.children -= 1
                if not up.children:
                    self._orphans.push(pair[int64_t, uint64_t](up.stamp, parent))

    cdef void _rebuild_leaves(self):
        cdef vector[pair[int64_t, uint64_t]] leaves
        for kv in self._held:
            if not kv.second.children:
                leaves.push_back(pair[int64_t, uint64_t](kv.second.stamp, kv.first))
        sort(leaves.begin(), leaves.end())
        self._fresh.clear()
        for leaf in leaves:
            self._fresh.push_back(leaf)
        while not self._orphans.empty():
            self._orphans.pop()
