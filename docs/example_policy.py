"""Fewest steps first, two jobs to a GPU: the worked example of docs/policies.md.

Waiting jobs start in order of fewest remaining steps (ties: arrival, then id),
each on ``num_gpus`` fragments of ``share`` of a GPU (more if the job's measured
memory needs it), at most ``max_tenants`` jobs per GPU. A job that does not fit
is passed over, not waited for. No preemption, no sampling, no timed events.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Sequence

from sortedcontainers import SortedList

from tfgshare.policies.base import Action, ClusterSnapshot, JobView, Policy, Start
from tfgshare.policies.freemap import FreeMap
from tfgshare.policies.memo import Memo
from tfgshare.policies.placement import fraction_for, to_fragments
from tfgshare.policies.queueing import WAITING


class FewestStepsMemo(Memo):
    """The waiting jobs as (steps left, submit time, id), kept sorted between rounds."""

    def reset(self) -> None:
        self.queue, self.keys = SortedList(), {}

    def changed(self, jid: str, old: JobView | None, new: JobView | None) -> None:
        if jid in self.keys:
            self.queue.remove(self.keys.pop(jid))
        if new is not None and new.state in WAITING:
            self.keys[jid] = (new.total_steps - new.steps_done, new.submit_time, jid)
            self.queue.add(self.keys[jid])


@dataclass
class FewestSteps(Policy):
    name: ClassVar[str] = "fewest-steps"
    tick_s: ClassVar[float | None] = None   # decisions change only at arrivals and ends
    share: float = 0.45                     # fraction of a GPU given to a job
    max_tenants: int = 2                    # jobs per GPU at most

    def new_memo(self) -> FewestStepsMemo:
        return FewestStepsMemo()

    def decide(self, now: float, cluster: ClusterSnapshot, jobs: Sequence[JobView],
               memo: FewestStepsMemo | None = None) -> list[Action]:
        memo = self.new_memo() if memo is None else memo
        memo.sync(jobs)                      # catch up with the jobs that changed
        free = FreeMap(cluster, use=memo.holdings.use, max_tenants=self.max_tenants)
        actions: list[Action] = []
        for _, _, jid in memo.queue:         # fewest steps left first
            job = memo.tracker.views[jid]
            need = lambda gpu, job=job: fraction_for(job, gpu, reserve_mb=cluster.reserve_mb,
                                                     default=self.share)
            got = free.gang_place(job.num_gpus, need)
            if got is not None:              # else pass it over: smaller jobs may fit
                free.take(got)
                actions.append(Start(jid, to_fragments(got)))
        return actions
