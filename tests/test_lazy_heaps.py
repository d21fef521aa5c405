"""Lazy heaps (the simulator's events, fgs's and tiresias's timed entries) drop the entries
that can never fire again, and pop the rest in order."""

import heapq
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from tfgshare.policies.stale import SLACK, drop_stale


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 4000), st.integers(0, 300), st.floats(0, 1), st.integers(0, 2**32))
def test_a_swept_heap_pops_its_current_entries_in_the_same_order(n, bound, stale_share, seed):
    rnd = random.Random(seed)   # (hypothesis's own randoms run out of data at this size)
    heap, plain, current = [], [], 0
    for seq in range(n):
        item = (rnd.uniform(0, 100), seq, rnd.random() >= stale_share)
        current += item[2]
        heapq.heappush(heap, item)
        heapq.heappush(plain, item)
        drop_stale(heap, bound, lambda e: e[2])
    assert len(heap) <= max(2 * bound + SLACK, current)   # stale entries do not pile up
    swept = [heapq.heappop(heap) for _ in range(len(heap))]
    kept = [e for e in (heapq.heappop(plain) for _ in range(len(plain))) if e[2]]
    assert [e for e in swept if e[2]] == kept
