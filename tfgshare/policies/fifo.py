"""FIFO with whole, exclusive GPUs: what Philly ran, the "traditional" baseline.

Jobs start strictly in arrival order, each on ``num_gpus`` whole GPUs (one
tenant per GPU, the fraction is the GPU less the context reserve), gang-placed
on one node where possible. No preemption, no prediction. Head-of-line
blocking is kept on purpose: if the oldest waiting job does not fit, nothing
behind it starts (Philly's scheduler, Jeon et al., "Analysis of Large-Scale
Multi-Tenant GPU Clusters for DNN Training Workloads", ATC'19). A job asking
for more GPUs than the cluster has up is skipped rather than blocking forever.

The memo keeps the waiting jobs in arrival order, so a round looks at the
head of the queue and the jobs it starts, never the whole queue.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Sequence

from sortedcontainers import SortedList

from .base import Action, ClusterSnapshot, JobView, Policy
from .exclusive import IdleMap, start_exclusive
from .memo import Memo
from .placement import up_gpus
from .queueing import WAITING


class FifoMemo(Memo):
    """The waiting jobs as (submit time, id), in order."""

    def reset(self) -> None:
        self.queue = SortedList()
        self.keys: dict[str, tuple[float, str]] = {}

    def changed(self, jid: str, old: JobView | None, new: JobView | None) -> None:
        key = self.keys.pop(jid, None)
        if key is not None:
            self.queue.remove(key)
        if new is not None and new.state in WAITING:
            key = self.keys[jid] = (new.submit_time, jid)
            self.queue.add(key)


@dataclass
class Fifo(Policy):
    """First in, first out on exclusive GPUs, with head-of-line blocking."""

    name: ClassVar[str] = "fifo"
    tick_s: ClassVar[float | None] = None   # its decision changes only on arrivals and ends
    reads_progress: ClassVar[bool] = False   # it reads waiting jobs and where jobs run

    def new_memo(self) -> FifoMemo:
        """An empty memo (see ``policies.memo``)."""
        return FifoMemo()

    def decide(self, now: float, cluster: ClusterSnapshot, jobs: Sequence[JobView],
               memo: FifoMemo | None = None) -> list[Action]:
        """Start waiting jobs in arrival order until the oldest one does not fit."""
        memo = self.new_memo() if memo is None else memo
        memo.sync(jobs)
        if not memo.queue:
            return []
        up, views = len(up_gpus(cluster)), memo.tracker.views
        idle_now = len(memo.idle_ranks(cluster))
        for key in memo.queue:   # the head: the oldest job the cluster could ever hold
            head = views[key[1]]
            if head.num_gpus <= up:
                if head.num_gpus > idle_now:
                    return []
                break
        idle = IdleMap(cluster, memo=memo)
        actions: list[Action] = []
        for key in memo.queue:
            job = views[key[1]]
            if job.num_gpus > up:
                continue
            start = start_exclusive(idle, job)
            if start is None:
                break
            actions.append(start)
        return actions
