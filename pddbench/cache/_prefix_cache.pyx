# distutils: language = c++
# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The prefix cache of prefix_cache.py compiled: the same algorithm, step for step, over C++
containers (an open-addressing hash map of block nodes, a deque and a heap of leaves), so the
same calls give the same hits and the same victims in the same order; tests/test_prefix_cache.py
holds both to a plain LRU. A simulation makes a million cache calls per 100,000 requests; in Python they were
about a third of its time (dict, deque and heap work per block).

Block ids are unsigned 64-bit (trace ids are int64 >= 0; the live router's are 8-byte hashes)."""

from libc.stdint cimport int64_t, uint64_t
from libcpp.deque cimport deque
from libcpp.pair cimport pair
from libcpp.vector cimport vector
from libcpp.algorithm cimport sort


cdef extern from *:
    """
    #include <cstddef>
    #include <cstdint>
    #include <functional>
    #include <queue>
    #include <utility>
    #include <vector>
    typedef std::pair<int64_t, uint64_t> Leaf;
    typedef std::priority_queue<Leaf, std::vector<Leaf>, std::greater<Leaf> > LeafHeap;

    struct Node {
        int64_t stamp;      // clock of the last insert that ended at the block, or -1
        uint64_t parent;
        int64_t children;   // held children
        int has_parent;
    };

    // Block id -> Node, open addressing with linear probing over a power-of-two table (Fibonacci
    // hashing, tombstones on erase). std::unordered_map allocated a node per block and took a
    // division per lookup: ~14 % of a simulation. Lookups answer what unordered_map answered; only
    // the order of iteration differs, which nothing depends on (leaves are sorted when rebuilt).
    class BlockMap {
        struct Slot { uint64_t key; Node node; unsigned char state; };  // 0 empty, 1 held, 2 erased
        std::vector<Slot> slots_;
        size_t held_ = 0, used_ = 0;  // used: held + erased (what probing walks over)
        int shift_ = 60;
        size_t home(uint64_t k) const { return (size_t)((k * 0x9E3779B97F4A7C15ULL) >> shift_); }
        size_t mask() const { return slots_.size() - 1; }
        void resize(size_t cap) {
            std::vector<Slot> old;
            old.swap(slots_);
            slots_.assign(cap, Slot{0, Node{0, 0, 0, 0}, 0});
            shift_ = 64;
            for (size_t c = cap; c > 1; c >>= 1) --shift_;
            held_ = used_ = 0;
            for (const Slot& s : old)
                if (s.state == 1) *place(s.key) = s.node;
        }
        Node* place(uint64_t k) {  // a new key (not held): its slot, counted as held
            size_t i = home(k);
            while (slots_[i].state == 1) i = (i + 1) & mask();
            if (slots_[i].state == 0) ++used_;
            slots_[i].key = k;
            slots_[i].state = 1;
            ++held_;
            slots_[i].node = Node{0, 0, 0, 0};
            return &slots_[i].node;
        }
    public:
        BlockMap() { resize(16); }
        size_t size() const { return held_; }
        size_t capacity() const { return slots_.size(); }
        bool held_at(size_t i) const { return slots_[i].state == 1; }
        uint64_t key_at(size_t i) const { return slots_[i].key; }
        Node* node_at(size_t i) { return &slots_[i].node; }
        Node* find(uint64_t k) {  // NULL when not held
            size_t i = home(k);
            for (;;) {
                const Slot& s = slots_[i];
                if (s.state == 0) return nullptr;
                if (s.state == 1 && s.key == k) return &slots_[i].node;
                i = (i + 1) & mask();
            }
        }
        bool count(uint64_t k) { return find(k) != nullptr; }
        Node* get(uint64_t k) {  // unordered_map's operator[]: a zeroed node when not held
            Node* n = find(k);
            if (n) return n;
            if ((used_ + 1) * 4 > slots_.size() * 3) {  // at most 3/4 walked over
                size_t cap = slots_.size();
                while ((held_ + 1) * 2 > cap) cap <<= 1;  // at least half free after
                resize(cap);
            }
            return place(k);
        }
        void erase(Node* n) {  // n from find(): its slot becomes a tombstone
            Slot* s = reinterpret_cast<Slot*>(reinterpret_cast<char*>(n) - offsetof(Slot, node));
            s->state = 2;
            --held_;
        }
    };
    """
    cdef cppclass LeafHeap:  # a min-heap of (stamp, block), as heapq orders the tuples
        void push(pair[int64_t, uint64_t]&)
        pair[int64_t, uint64_t]& top()
        void pop()
        size_t size()
        bint empty()

    cdef struct Node:
        int64_t stamp
        uint64_t parent
        int64_t children
        bint has_parent

    cdef cppclass BlockMap:
        size_t size()
        size_t capacity()
        bint held_at(size_t)
        uint64_t key_at(size_t)
        Node* node_at(size_t)
        Node* find(uint64_t)
        bint count(uint64_t)
        Node* get(uint64_t)
        void erase(Node*)


cdef class PrefixCache:
    cdef BlockMap _held
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
        return [self._held.key_at(i) for i in range(self._held.capacity()) if self._held.held_at(i)]

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
                self._held.get(<uint64_t>ids[i])[0] = node
            return
        if h0 < n:  # the tail past the match is all new (prefix-closure)
            node.stamp, node.children = -1, 1
            for i in range(h0, n):
                node.has_parent = i > 0
                node.parent = <uint64_t>ids[i - 1] if i > 0 else 0
                self._held.get(<uint64_t>ids[i])[0] = node
            self._held.get(<uint64_t>ids[n - 1]).children = 0
            if h0:
                self._held.get(<uint64_t>ids[h0 - 1]).children += 1
        cdef uint64_t last = <uint64_t>ids[n - 1]
        cdef Node* last_node = self._held.get(last)
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
        cdef Node* node
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
            node = self._held.find(leaf.second)
            if node == NULL or node.stamp != leaf.first or node.children:
                continue  # touched again since, or has grown children: not this leaf's turn
            parent, has_parent = node.parent, node.has_parent
            self._held.erase(node)
            excess -= 1
            if has_parent:
                up = self._held.get(parent)
                up.children -= 1
                if not up.children:
                    self._orphans.push(pair[int64_t, uint64_t](up.stamp, parent))

    cdef void _rebuild_leaves(self):
        cdef vector[pair[int64_t, uint64_t]] leaves
        cdef size_t i
        for i in range(self._held.capacity()):
            if self._held.held_at(i) and not self._held.node_at(i).children:
                leaves.push_back(pair[int64_t, uint64_t](self._held.node_at(i).stamp, self._held.key_at(i)))
        sort(leaves.begin(), leaves.end())
        self._fresh.clear()
        for leaf in leaves:
            self._fresh.push_back(leaf)
        while not self._orphans.empty():
            self._orphans.pop()
