"""Gandiva-style greedy packing: share GPUs by memory, no prediction, no preemption.

After Xiao et al., "Gandiva: Introspective Cluster Scheduling for Deep
Learning", OSDI'18, reduced to its packing part: jobs are taken in arrival
order and each goes to the GPU with the most free memory that can hold it
(so new jobs spread over empty GPUs first and pack onto shared ones when the
cluster fills), up to ``max_tenants`` jobs per GPU. A job's memory is its
sampled peak when known, else its requested fraction, else
``default_fraction`` of a GPU; no sampling phase is run. Jobs that do not fit
are skipped, with no anti-starvation, so large jobs can wait without bound.
Multi-GPU jobs are gang-placed on one node where possible.

``max_tenants`` 4 and ``default_fraction`` 0.5 are our choice: Gandiva packs
a few jobs per GPU, and half a GPU lets two unknown jobs share one.

The memo keeps the waiting jobs in arrival order, one queue per size (GPU
count and what sets the fraction), so a round visits only the heads of the
queues that could still fit: once one job of a size finds no room, no later
job of that size can in the same round.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Sequence

from .base import Action, ClusterSnapshot, JobView, Policy, Start
from .freemap import FreeMap
from .memo import Memo, WaitQueue
from .placement import EPS, fraction_for, to_fragments
from .queueing import WAITING


class GandivaMemo(Memo):
    """Waiting jobs by (GPU count, requested fraction, sampled peak), in arrival order, and
    a FreeMap of the GPUs, brought up to date each round from the GPUs that changed (a
    rebuild costs every GPU of the cluster). A round plans on it directly and marks the
    GPUs it takes as changed, so the next round reads them back from their holders
    (whether or not the caller carried the starts out): planning on a copy cost a copy
    of each search group a start touched, thousands of GPUs long."""

    def reset(self) -> None:
        self.waiting = WaitQueue()
        self.free: tuple | None = None      # (key, GPU tuple, FreeMap as the holders hold it)
        self.unplanned: set[str] = set()    # GPUs changed since ``free`` was brought up to date

    def free_map(self, cluster: ClusterSnapshot, max_tenants: int) -> FreeMap:
        """The FreeMap to plan this round on, as the holders hold the GPUs (the GPUs a
        plan takes go in ``unplanned``)."""
        key = (cluster.down_nodes, cluster.reserve_mb, max_tenants)
        dirty, self.unplanned = self.unplanned, set()
        cache = self.free
        if cache is not None and cache[1] is cluster.gpus and cache[0] == key:
            cache[2].follow(dirty, self.holdings.use)
        else:
            cache = self.free = (key, cluster.gpus,
                                 FreeMap(cluster, use=self.holdings.use, max_tenants=max_tenants))
        return cache[2]

    def changed(self, jid: str, old: JobView | None, new: JobView | None) -> None:
        if new is None or new.state not in WAITING:
            self.waiting.remove(jid)
            return
        peak = new.sample.peak_memory_mb if new.sample is not None else None
        self.waiting.put(jid, (new.num_gpus, new.requested_fraction, peak),
                         (new.submit_time, jid))


@dataclass
class Gandiva(Policy):
    """Greedy memory packing onto the least loaded GPU, in arrival order."""

    name: ClassVar[str] = "gandiva"
    reads_progress: ClassVar[bool] = False   # it reads waiting jobs and where jobs run
    # most jobs sharing one GPU
    max_tenants: int = 4
    # fraction of a GPU assumed for a job with no sample and no request
    default_fraction: float = 0.5
    # safety margin over sampled peak memory
    headroom: float = 0.1

    def __post_init__(self) -> None:
        if self.max_tenants < 1:
            raise ValueError(f"gandiva max_tenants must be >= 1, got {self.max_tenants}")
        if not 0 < self.default_fraction <= 1:
            raise ValueError(f"gandiva default_fraction must be in (0, 1], "
                             f"got {self.default_fraction}")

    def new_memo(self) -> GandivaMemo:
        """An empty memo (see ``policies.memo``)."""
        return GandivaMemo()

    def decide(self, now: float, cluster: ClusterSnapshot, jobs: Sequence[JobView],
               memo: GandivaMemo | None = None) -> list[Action]:
        """Start every waiting job that fits, each on the least loaded GPU(s)."""
        memo = self.new_memo() if memo is None else memo
        # kept until the FreeMap takes them: a round that plans nothing must not lose them
        memo.unplanned |= memo.sync(jobs)
        if not memo.waiting:
            return []
        free = memo.free_map(cluster, self.max_tenants)
        reserve = cluster.reserve_mb
        actions: list[Action] = []
        top = free.max_free()
        if top <= 0.0:
            return []   # no GPU has room for anyone
        rep = next(iter(free.gpus.values())) if len(free.sizes) == 1 else None
        views = memo.tracker.views
        walk = memo.waiting.merged()
        for _, key in walk:
            if top <= 0.0:
                break
            job = views[key[-1]]

            def need(g, job=job):
                return fraction_for(job, g, self.headroom, reserve, self.default_fraction)

            if rep is not None and need(rep) > top + EPS:
                walk.drop()   # bigger than any free room, and so is the rest of its queue
                continue
            if job.num_gpus == 1:
                one = free.worst_fit(need)
                placed = None if one is None else [one]
            else:
                placed = free.gang_place(job.num_gpus, need)
            if placed is None:
                walk.drop()   # the same size finds no room either
                continue
            walk.advance()
            free.take(placed)
            memo.unplanned.update(gid for gid, _ in placed)
            top = free.max_free()
            actions.append(Start(job.id, to_fragments(placed)))
        return actions
