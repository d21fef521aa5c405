"""What a policy carries from one decision to the next, owned by its caller.

A policy object holds only its configuration. Whatever it keeps between
``decide`` calls to be fast (its waiting jobs in key order, the GPUs' summed
use, cached sizes) lives in a :class:`Memo` that the caller makes with
``policy.new_memo()`` and passes to every ``decide``. A memo is a cache and
nothing more: a fresh memo gives the same decisions as a reused one.

:class:`WaitQueue` keeps waiting jobs ordered by a policy's key, split into
buckets (by GPU count, by size) so that a round visits only the heads of the
buckets that could still fit instead of every waiting job.
"""

from __future__ import annotations

import heapq
from typing import Hashable, Iterator, Sequence

from sortedcontainers import SortedList

from .base import ClusterSnapshot, JobView
from .jobset import Holdings, Tracker
from .placement import by_room, room_rank


class Memo:
    """Follows the caller's jobs: the tenants of every GPU, and hooks for a policy's queues.

    ``sync(jobs)`` at the start of ``decide`` brings it up to date from the
    jobs that changed since the last call (all of them for a fresh memo or a
    plain list). Subclasses keep their own ordered queues in ``reset`` and
    ``changed``.
    """

    def __init__(self) -> None:
        self.tracker = Tracker()
        self.holdings = Holdings()
        self._idle: SortedList | None = None   # by_room ranks of the idle up GPUs ...
        self._idle_for: object = None          # ... of this cluster layout
        self._dirty: set[str] = set()          # GPUs changed since _idle was brought up to date
        self.reset()

    def sync(self, jobs: Sequence[JobView]) -> set[str]:
        """Catch up with ``jobs``; returns the GPUs whose tenants changed."""
        fresh, changes = self.tracker.sync(jobs)
        if fresh:
            self.holdings = Holdings()
            self._idle = None
            self.reset()
        dirty: set[str] = set()
        update, changed = self.holdings.update, self.changed
        for jid, old, new, seq in changes:
            update(jid, old, new, seq, dirty)
            changed(jid, old, new)
        self.holdings.resum(dirty)
        if self._idle is not None:
            self._dirty |= dirty
        return dirty

    def idle_ranks(self, cluster: ClusterSnapshot) -> SortedList:
        """The idle up GPUs as their places in ``placement.by_room`` order (do not modify)."""
        order = by_room(cluster)
        use = self.holdings.use
        if self._idle is None or self._idle_for is not order:
            self._idle = SortedList(i for i, g in enumerate(order) if g.id not in use)
            self._idle_for = order
        elif self._dirty:
            rank, idle = room_rank(cluster), self._idle
            for gid in self._dirty:
                i = rank.get(gid)
                if i is not None:
                    if gid in use:
                        idle.discard(i)
                    elif i not in idle:
                        idle.add(i)
        self._dirty = set()
        return self._idle

    def reset(self) -> None:
        """Forget every job (the next changes are all the jobs)."""

    def changed(self, jid: str, old: JobView | None, new: JobView | None) -> None:
        """A job's view changed from ``old`` to ``new`` (None: absent)."""


class WaitQueue:
    """Waiting jobs in buckets, each ordered by a sort key ending in the job id."""

    def __init__(self) -> None:
        self.buckets: dict[Hashable, SortedList] = {}
        self.where: dict[str, tuple[Hashable, tuple]] = {}

    def __len__(self) -> int:
        return len(self.where)

    def put(self, jid: str, bucket: Hashable, key: tuple) -> None:
        """Add the job or move it to this bucket and key (``key`` ends with ``jid``)."""
        self.remove(jid)
        b = self.buckets.get(bucket)
        if b is None:
            b = self.buckets[bucket] = SortedList()
        b.add(key)
        self.where[jid] = (bucket, key)

    def remove(self, jid: str) -> None:
        """Take the job out (no-op if absent)."""
        at = self.where.pop(jid, None)
        if at is not None:
            b = self.buckets[at[0]]
            b.remove(at[1])
            if not b:
                del self.buckets[at[0]]

    def merged(self) -> "Merge":
        """A walk over every bucket at once in key order (see :class:`Merge`)."""
        return Merge(self.buckets)


class Merge:
    """Walks a WaitQueue's buckets in key order; a bucket can be dropped for the rest.

    Each ``next()`` gives (bucket, key); the caller then either ``advance``s
    past it (the job was taken or skipped) or ``drop``s its whole bucket (no
    job in it can fit any more this round).
    """

    def __init__(self, buckets: dict[Hashable, SortedList]) -> None:
        self._buckets = buckets
        self._heap = [(b[0], 0, name) for name, b in buckets.items()]
        heapq.heapify(self._heap)

    def __iter__(self) -> Iterator[tuple[Hashable, tuple]]:
        heap = self._heap
        while heap:   # the caller advances or drops before asking for the next
            yield heap[0][2], heap[0][0]

    def advance(self) -> None:
        """Move past the current head."""
        key, i, name = self._heap[0]
        b = self._buckets[name]
        if i + 1 < len(b):
            heapq.heapreplace(self._heap, (b[i + 1], i + 1, name))
        else:
            heapq.heappop(self._heap)

    def drop(self) -> None:
        """Skip the rest of the current head's bucket."""
        heapq.heappop(self._heap)
