from hypothesis import given, settings
from hypothesis import strategies as st

from pddbench.cache import PrefixCache
from pddbench.workload.hitrate import bucket_of, buckets, hit_tokens, histogram
from pddbench.workload.trace import Request


def reference_hits(requests, block, capacity):
    """Plain-list reference: LRU order as a list, most recent last; leaf-first within a request."""
    order: list[int] = []
    out = []
    for r in requests:
        n = 0
        for h in r.hash_ids:
            if h in order:
                n += 1
            else:
                break
        out.append(min(n * block, r.input_length))
        for h in reversed(r.hash_ids):
            if h in order:
                order.remove(h)
            order.append(h)
        if capacity is not None:
            while len(order) > capacity:
                order.pop(0)
    return out


@st.composite
def traces(draw):
    block = draw(st.sampled_from([4, 16, 512]))
    n = draw(st.integers(1, 25))
    reqs = []
    for _ in range(n):
        length = draw(st.integers(1, 8 * block))
        nb = -(-length // block)
        # Chained ids: a small alphabet so prefixes repeat; an id's prefix is made consistent by
        # deriving it from (parent, choice).
        ids, parent = [], 0
        for _ in range(nb):
            parent = parent * 3 + draw(st.integers(0, 2)) + 1
            ids.append(parent)
        reqs.append(Request(0, length, 1, ids))
    return block, reqs


@settings(max_examples=200, deadline=None)
@given(traces(), st.one_of(st.none(), st.integers(0, 20)))
def test_hit_tokens_match_reference(trace, capacity):
    block, reqs = trace
    assert hit_tokens(reqs, block, capacity).tolist() == reference_hits(reqs, block, capacity)


@given(st.integers(0, 10**6), st.integers(1, 10**6))
def test_bucket_exact_and_vectorised_agree(hit, inp):
    hit = min(hit, inp)
    import numpy as np

    b = bucket_of(hit, inp)
    assert buckets(np.array([hit]), np.array([inp]))[0] == b
    pct = 100 * hit / inp
    edges = (0, 90, 93, 95, 97, 98, 99, 100)
    assert edges[b] <= pct + 1e-9 and (pct < edges[b + 1] or b == 6)


def test_bucket_edges_are_inclusive_below():
    assert bucket_of(95, 100) == 3      # exactly 95% -> 95-97, never 93-95 by float error
    assert bucket_of(94999, 100000) == 2
    assert bucket_of(100, 100) == 6
    assert bucket_of(89, 100) == 0
    assert bucket_of(90, 100) == 1


def test_ideal_cache_counts_only_earlier_requests():
    reqs = [Request(0, 1024, 1, [1, 2]), Request(1, 1500, 1, [1, 2, 3]), Request(2, 100, 1, [1])]
    assert hit_tokens(reqs, 512).tolist() == [0, 1024, 100]  # capped at input length


def test_lru_evicts_leaves_before_their_prefix():
    c = PrefixCache(3)
    c.insert([1, 2, 3])
    c.insert([9])         # evicts the deepest block of the old request first
    assert c.match([1, 2, 3]) == 2 and 3 not in c and c.evicted_blocks == 1


def test_histogram_fractions():
    import numpy as np

    assert histogram(np.array([0, 0, 6, 3])) == [0.5, 0, 0, 0.25, 0, 0, 0.25]
    assert histogram(np.array([], dtype=int)) == [0.0] * 7
