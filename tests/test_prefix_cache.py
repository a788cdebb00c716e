"""The prefix cache against the plain linear-scan LRU it replaced: same hits, same victims after every access."""

from collections import OrderedDict
import random

import pytest

from pddbench.cache import COMPILED, PrefixCache, PyPrefixCache
from pddbench.core.errors import InputError
from pddbench.workload.trace import load_trace


class ReferenceLRU:
    """The previous implementation: linear match, move_to_end per block, pop least recent."""

    def __init__(self, capacity):
        self.capacity, self.blocks, self.evicted = capacity, OrderedDict(), 0

    def access(self, ids):
        hit = 0
        for h in ids:
            if h not in self.blocks:
                break
            hit += 1
        if self.capacity == 0:
            return hit
        for h in reversed(ids):
            self.blocks[h] = None
            self.blocks.move_to_end(h)
        while self.capacity is not None and len(self.blocks) > self.capacity:
            self.blocks.popitem(last=False)
            self.evicted += 1
        return hit


def chained_requests(rng, n):
    """Requests that branch off a shared tree of prefixes (ids are chained by construction)."""
    children: dict = {}
    next_id = [1]
    out = []
    for _ in range(n):
        path, node = [], None
        for _ in range(rng.randint(1, 12)):
            kids = children.setdefault(node, [])
            if kids and rng.random() < 0.7:
                node = rng.choice(kids)
            else:
                node = next_id[0]
                next_id[0] += 1
                kids.append(node)
            path.append(node)
        out.append(path)
    return out


# the compiled cache where the install built it (it is what runs), and the Python one it mirrors
IMPLEMENTATIONS = [PyPrefixCache] + ([PrefixCache] if COMPILED else [])


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=lambda c: c.__module__.rsplit(".", 1)[-1])
@pytest.mark.parametrize("capacity", [None, 0, 1, 3, 7, 20, 40, 300])
def test_same_hits_and_victims_as_the_ordered_dict_lru(capacity, impl):
    rng = random.Random(capacity or 0)
    fast, ref = impl(capacity), ReferenceLRU(capacity)
    for ids in chained_requests(rng, 3000):
        assert fast.access(ids) == ref.access(ids)
        assert set(fast.held_blocks()) == set(ref.blocks)  # after every access: so the same victims
    assert fast.evicted_blocks == ref.evicted
    if capacity:
        assert ref.evicted > 0  # the case exercised eviction


def test_a_trace_whose_ids_are_not_chained_is_refused_with_its_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 1024, "output_length": 5, "hash_ids": [1, 2]}\n'
                    '{"timestamp": 1, "input_length": 1024, "output_length": 5, "hash_ids": [3, 2]}\n')
    with pytest.raises(InputError) as err:
        load_trace(path)
    text = str(err.value)
    assert ":2:" in text and "hash_ids" in text and "request 1" in text
