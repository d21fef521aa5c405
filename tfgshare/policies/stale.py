"""Lazy heaps: entries left behind when what they were pushed for changed, swept out.

A heap of timed entries (the simulator's events and progress reports, fgs's
minimum-run ends and promotions, tiresias's threshold crossings) is not updated
when a job changes: its new entry is pushed and the old one stays, out of date,
to be passed when it comes up. Under churn (fgs reschedules a job's end at each
co-tenant change) the stale ones came to 14-22 times the current ones, and a heap
that deep costs every push and pop. ``drop_stale`` sweeps them out once they
outnumber the current ones, in place (callers may keep aliases of the list);
what is left pops in the same order, each entry's key being unique.

May import the standard library only.
"""

from __future__ import annotations

import heapq
from typing import Any, Callable

SLACK = 64   # entries beyond twice the most that can be current before a sweep


def drop_stale(heap: list, current: int, keep: Callable[[Any], bool]) -> None:
    """Keep in ``heap`` only the entries ``keep`` accepts, once it holds more than twice
    ``current`` (the most entries that can be current) plus ``SLACK``."""
    if len(heap) > 2 * current + SLACK:
        heap[:] = [e for e in heap if keep(e)]
        heapq.heapify(heap)
