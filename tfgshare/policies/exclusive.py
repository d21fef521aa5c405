"""Whole-GPU placement for the exclusive policies (fifo, sjf, tiresias).

An exclusive job takes whole idle GPUs (the fraction is the GPU less the
context reserve). :class:`IdleMap` tracks which GPUs are idle more cheaply
than a FreeMap: it only counts tenants, and scans GPUs in best-fit order
(``placement.by_room``) skipping busy ones, so a placement costs about the
number of busy GPUs before the first idle one. Gangs follow the same rule as
``FreeMap.gang_place``: the first node to collect ``k`` idle GPUs, then up to
``GANG_LOOKAHEAD`` more idle GPUs of the same room looked at for a node with
fewer idle GPUs; if no node can hold the gang, the fewest nodes.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable

from .base import ClusterSnapshot, Fragment, GPU, JobView, Start
from .placement import EPS, GANG_LOOKAHEAD, by_room, exclusive_fraction, up_gpus
from .queueing import HOLDING


class IdleMap:
    """Which up GPUs have no tenant, updated as a policy plans."""

    def __init__(self, cluster: ClusterSnapshot, jobs: Iterable[JobView]):
        self.reserve_mb = cluster.reserve_mb
        self.one_node_gangs = cluster.one_node_gangs
        self.gpus = up_gpus(cluster)
        self._order = by_room(cluster)
        self.tenants: dict[str, int] = Counter(
            [f.gpu for j in jobs if j.fragments and j.state in HOLDING for f in j.fragments])
        self.idle = len(self.gpus) - len(self.tenants.keys() & self.gpus.keys())

    def whole(self, gpu: GPU) -> float:
        """The fraction of a whole GPU: all of it less the context reserve."""
        return exclusive_fraction(gpu, self.reserve_mb)

    def place(self, k: int) -> list[GPU] | None:
        """``k`` idle GPUs, one node if possible, best fit first (None if too few)."""
        if k > self.idle:
            return None
        busy = self.tenants
        by_node: dict[str, list[GPU]] = {}
        block = None   # room (MB) at which some node first held the gang
        extra = 0
        for g in self._order:
            if busy.get(g.id):
                continue
            room = self.whole(g) * g.memory_mb
            if block is not None:
                extra += 1
                if room > block + EPS or extra > GANG_LOOKAHEAD:
                    break
            cands = by_node.setdefault(g.node, [])
            cands.append(g)
            if block is None and len(cands) == k:
                if k == 1:
                    return cands
                block = room
        whole = [c for c in by_node.values() if len(c) >= k]
        if whole:
            return min(whole, key=lambda c: len(c))[:k]
        if self.one_node_gangs:
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

    def take(self, gpus: Iterable[str]) -> None:
        """Record a tenant on each of these GPUs."""
        for gid in gpus:
            n = self.tenants.get(gid, 0)
            if n == 0 and gid in self.gpus:
                self.idle -= 1
            self.tenants[gid] = n + 1

    def release(self, gpus: Iterable[str]) -> None:
        """Record that one tenant left each of these GPUs."""
        for gid in gpus:
            n = self.tenants.get(gid, 0) - 1
            if n <= 0:
                self.tenants.pop(gid, None)
                if gid in self.gpus:
                    self.idle += 1
            else:
                self.tenants[gid] = n


def start_exclusive(idle: IdleMap, job: JobView, sample_only: bool = False) -> Start | None:
    """Place ``job`` on ``num_gpus`` idle GPUs (one node if possible) and record it."""
    gpus = idle.place(job.num_gpus)
    if gpus is None:
        return None
    idle.take(g.id for g in gpus)
    return Start(job.id, tuple(Fragment(g.id, idle.whole(g)) for g in gpus), sample_only)

