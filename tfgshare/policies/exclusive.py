"""Whole-GPU placement for the exclusive policies (fifo, sjf, tiresias).

An exclusive job takes whole idle GPUs (the fraction is the GPU less the
context reserve). :class:`IdleMap` tracks which GPUs are idle more cheaply
than a FreeMap: it only counts tenants, and keeps the idle GPUs sorted in
best-fit order (``placement.by_room``), so a placement looks at idle GPUs only
(a memo keeps that order between rounds; a round's changes are kept beside it,
not in a copy of it, so a round costs what it changes, not the cluster's size).
Gangs follow the same rule as ``FreeMap.gang_place``: the first node to
collect ``k`` idle GPUs, then up to ``GANG_LOOKAHEAD`` more idle GPUs of the
same room looked at for a node with fewer idle GPUs; if no node can hold the
gang, the fewest nodes.
"""

from __future__ import annotations

import bisect
import heapq
from collections import Counter
from typing import Iterable, Mapping

from sortedcontainers import SortedList

from .base import ClusterSnapshot, Fragment, GPU, JobView, Start
from .memo import Memo
from .placement import (EPS, GANG_LOOKAHEAD, GpuUse, by_room, exclusive_fraction, room_rank,
                        up_gpus)
from .queueing import HOLDING


OWN_AFTER = 64   # GPUs taken (or freed) in one round before the map copies the shared list


class IdleMap:
    """Which up GPUs have no tenant, updated as a policy plans."""

    def __init__(self, cluster: ClusterSnapshot, jobs: Iterable[JobView] = (),
                 memo: Memo | None = None):
        """From the jobs holding GPUs, or from a memo's tenants and idle GPUs if given."""
        self.reserve_mb = cluster.reserve_mb
        self.cluster = cluster
        self.gpus = up_gpus(cluster)
        self._order = by_room(cluster)
        self._rank = room_rank(cluster)
        if memo is not None:
            self._use: Mapping[str, GpuUse] = memo.holdings.use
            self._count: Mapping[str, int] | None = None
            self._idle = memo.idle_ranks(cluster)   # shared: never changed here
            self._own = False
        else:
            self._count = Counter([f.gpu for j in jobs if j.fragments and j.state in HOLDING
                                   for f in j.fragments])
            self._idle = SortedList([i for i, g in enumerate(self._order)
                                     if g.id not in self._count])
            self._own = True
        self._added: dict[str, int] = {}   # tenants added (or, < 0, gone) while planning
        self._gone: set[int] = set()        # ranks of _idle taken while planning (shared _idle)
        self._extra: list[int] = []         # ranks freed while planning, sorted (shared _idle)
        self.idle = len(self._idle)

    def tenants(self, gpu_id: str) -> int:
        """How many jobs hold this GPU now, as planned so far."""
        if self._count is not None:
            return self._count.get(gpu_id, 0) + self._added.get(gpu_id, 0)
        u = self._use.get(gpu_id)
        return (u.tenants if u is not None else 0) + self._added.get(gpu_id, 0)

    def whole(self, gpu: GPU) -> float:
        """The fraction of a whole GPU: all of it less the context reserve."""
        return exclusive_fraction(gpu, self.reserve_mb)

    def place(self, k: int) -> list[GPU] | None:
        """``k`` idle GPUs, one node if possible, best fit first (None if too few)."""
        if k > self.idle:
            return None
        order, reserve = self._order, self.reserve_mb
        by_node: dict[str, list[GPU]] = {}
        block = None   # room (MB) at which some node first held the gang
        extra = 0
        for i in self._ranks():   # the idle GPUs in best-fit order
            g = order[i]
            if k == 1:
                return [g]
            room = g.memory_mb - reserve   # a sole tenant's memory
            if block is not None:
                extra += 1
                if room > block + EPS or extra > GANG_LOOKAHEAD:
                    break
            cands = by_node.setdefault(g.node, [])
            cands.append(g)
            if block is None and len(cands) == k:
                block = room
        whole = [c for c in by_node.values() if len(c) >= k]
        if whole:
            return min(whole, key=lambda c: len(c))[:k]
        if self.cluster.gang_nodes is not None:
            by_node = {n: c for n, c in by_node.items() if self.cluster.spans_onto(n)}
            if sum(map(len, by_node.values())) < k:
                return None
        chosen: list[GPU] = []
        nodes = sorted(by_node.values(), key=len, reverse=True)
        while len(chosen) < k:
            left = k - len(chosen)
            done = [c for c in nodes if len(c) >= left]
            pick = min(done, key=len) if done else nodes[0]
            nodes.remove(pick)
            chosen += pick[:left]
        return chosen

    def _ranks(self) -> Iterable[int]:
        """The idle GPUs' ranks in order: the shared list less those taken, plus those freed."""
        if not self._gone and not self._extra:
            return self._idle
        gone = self._gone
        return (i for i in heapq.merge(self._idle, self._extra) if i not in gone)

    def _mine(self) -> SortedList:
        """The idle ranks as this map's own list (copied from the shared one, with the
        round's changes, once they pass ``OWN_AFTER``: a walk skips each taken rank)."""
        if not self._own:
            idle = SortedList(self._ranks())
            self._idle, self._gone, self._extra, self._own = idle, set(), [], True
        return self._idle

    def take(self, gpus: Iterable[str]) -> None:
        """Record a tenant on each of these GPUs."""
        for gid in gpus:
            if self.tenants(gid) == 0 and gid in self.gpus:
                rank = self._rank[gid]
                if self._own:
                    self._idle.remove(rank)
                elif rank in self._extra:
                    self._extra.remove(rank)
                else:
                    self._gone.add(rank)
                    if len(self._gone) > OWN_AFTER:
                        self._mine()
                self.idle -= 1
            self._added[gid] = self._added.get(gid, 0) + 1

    def release(self, gpus: Iterable[str]) -> None:
        """Record that one tenant left each of these GPUs."""
        for gid in gpus:
            n = self.tenants(gid)
            if n <= 0:
                continue
            self._added[gid] = self._added.get(gid, 0) - 1
            if n == 1 and gid in self.gpus:
                rank = self._rank[gid]
                if self._own:
                    self._idle.add(rank)
                elif rank in self._gone:
                    self._gone.discard(rank)
                else:
                    bisect.insort(self._extra, rank)
                    if len(self._extra) > OWN_AFTER:
                        self._mine()
                self.idle += 1


def start_exclusive(idle: IdleMap, job: JobView, sample_only: bool = False) -> Start | None:
    """Place ``job`` on ``num_gpus`` idle GPUs (one node if possible) and record it."""
    gpus = idle.place(job.num_gpus)
    if gpus is None:
        return None
    idle.take(g.id for g in gpus)
    return Start(job.id, tuple(Fragment(g.id, idle.whole(g)) for g in gpus), sample_only)

