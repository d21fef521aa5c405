"""fgs phase 1, queue order: the orders its waiting jobs are walked in.

A round walks, in turn, the promoted jobs (longest waiting first), the jobs
still to sample (by arrival) and the others shortest predicted remaining time
first (the memo's queues, ``memo.FgsMemo``). This module owns how a walk is
told it may stop: ``SmallestLeft`` knows the smallest job not reached yet, so a
walk stops once nothing left could fit; and ``SizedWalk`` walks the
shortest-first queue merged from its size buckets (``size_bucket``), so a
walk passes over every job of a bucket bigger than any free room at once
instead of one by one.

Imports: ``policies`` below fgs and ``fgs.records``; the memo only for its type.
"""

from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING

from sortedcontainers import SortedList

from .records import JobSize, ShortestKey, SizeBucket

if TYPE_CHECKING:
    from .memo import FgsMemo

__all__ = ["BANDS", "SIZE_STEPS", "SizedWalk", "SmallestLeft", "bucket_floor", "search_band",
           "size_bucket"]

BANDS = 20       # steps of utilisation room by which GPUs are indexed for search
SIZE_STEPS = 32  # a size bucket holds the jobs whose fraction is in [i, i + 1) / SIZE_STEPS


def search_band(u: float) -> int:
    """The lowest utilisation-room band a search for a tenant of utilisation ``u`` reads."""
    return BANDS if u >= 1.0 else int(max(0.0, u) * BANDS)


def size_bucket(f: float, u: float, k: int) -> SizeBucket:
    """The bucket of a ``k``-GPU job of fraction ``f`` and utilisation ``u``.

    The band is the one a round searches for the job (``search_band``).
    """
    step = 1 << 30 if f == math.inf else int(f * SIZE_STEPS)
    return SizeBucket(step, search_band(u), k)


def bucket_floor(name: SizeBucket) -> float:
    """A lower bound on the fraction of every job in this size bucket (a little low, never high)."""
    return name.fraction_step / SIZE_STEPS - 1e-9


class SmallestLeft:
    """The smallest fraction and utilisation among a walk's jobs not passed yet.

    The walk calls ``passed(id)`` for each job it reaches; the answer is worked
    out again only when one of the two smallest jobs was passed.
    """

    def __init__(self, by_fraction: SortedList, by_util: SortedList | None,
                 gone: set[str]):
        self.by_fraction, self.by_util, self.gone = by_fraction, by_util, gone
        self.i = self.j = 0
        self._known: JobSize | None = None
        self._ids: tuple[str | None, str | None] = (None, None)

    def passed(self, jid: str) -> None:
        """The walk reached this job."""
        self.gone.add(jid)
        if jid in self._ids:
            self._known = None

    def smallest(self) -> JobSize:
        """The smallest fraction and the smallest utilisation (each of some job) left."""
        if self._known is not None:
            return self._known
        fs, us, gone = self.by_fraction, self.by_util, self.gone   # (value, id) pairs
        while self.i < len(fs) and fs[self.i][1] in gone:
            self.i += 1
        f, fid = fs[self.i] if self.i < len(fs) else (math.inf, None)
        if us is None:   # sampling: no utilisation check
            self._known = JobSize(f, -1.0 if fid is not None else math.inf)
            self._ids = (fid, None)
            return self._known
        while self.j < len(us) and us[self.j][1] in gone:
            self.j += 1
        u, uid = us[self.j] if self.j < len(us) else (math.inf, None)
        self._known, self._ids = JobSize(f, u), (fid, uid)
        return self._known


class SizedWalk:
    """The shortest-first queue in its order, merged from its size buckets.

    Yields (view, size) as iterating ``shortest_first`` does (jobs in ``skip`` left
    out). While a job is the current one, ``floor`` is a lower bound on the
    fraction of every job in its bucket (a little low, never high; all of them
    have its band and gang size), and ``drop()`` passes over the rest of that
    bucket. Until the first drop it walks ``shortest_first`` itself, so a round that
    stops early (a full cluster) costs O(1), not one step per bucket.
    """

    def __init__(self, memo: "FgsMemo", skip: set[str]):
        self.memo, self.skip = memo, skip
        self.floor = -math.inf
        self._dropped = False
        self._hopeless = None

    def drop(self, hopeless=None) -> None:
        """Pass over the rest of the current job's bucket.

        ``hopeless(name)``: whether every job of that bucket would be passed
        over as this one was, from now to the end of the walk (the free room
        only shrinks in it); such buckets are left out of the merge at once.
        """
        self._dropped = True
        if hopeless is not None:
            self._hopeless = hopeless

    def __iter__(self):
        """(view, size) of each job, in shortest-first order (merged by bucket once dropped)."""
        waiting, skip = self.memo.waiting, self.skip
        for key in self.memo.shortest_first:
            jid = key.job_id
            if jid in skip:
                continue
            had = waiting[jid]
            name = size_bucket(had.size.fraction, had.size.util, had.view.num_gpus)
            self._dropped = False
            self.floor = bucket_floor(name)
            yield had.view, had.size
            if self._dropped:
                yield from self._merged(key, name)
                return

    def _merged(self, after: ShortestKey, dropped: SizeBucket):
        """The rest of the walk past ``after``, bucket by bucket, ``dropped`` left out."""
        waiting, skip = self.memo.waiting, self.skip
        hopeless = self._hopeless
        heap = []
        for name, bucket in self.memo.sized.items():
            if name != dropped and (hopeless is None or not hopeless(name)):
                it = bucket.irange(minimum=after, inclusive=(False, True))
                first = next(it, None)
                if first is not None:
                    heap.append((first, name, it))
        heapq.heapify(heap)   # keys end with the job id: no two compare equal
        while heap:
            key, name, it = heap[0]
            jid = key.job_id
            if jid not in skip:
                self._dropped = False
                self.floor = bucket_floor(name)
                had = waiting[jid]
                yield had.view, had.size
                if self._dropped:
                    heapq.heappop(heap)
                    continue
            nxt = next(it, None)
            if nxt is None:
                heapq.heappop(heap)
            else:
                heapq.heapreplace(heap, (nxt, name, it))
