"""SJF with whole, exclusive GPUs: shortest predicted job first, no preemption.

The second "traditional" baseline. A job's length is its predicted remaining
time (for a job that has not run yet, its whole run): the caller's
``predicted_remaining_s`` when given, else remaining steps x sampled step time.
A job with neither is first sampled on an exclusive GPU (``sample_only``) so
that SJF gets the same lightweight prediction as fgs; sampling runs go before
sampled jobs because they are a few dozen steps. With ``sample_on_admission``
off, unpredicted jobs go last in arrival order. Jobs that do not fit are
skipped (no head-of-line blocking), so large jobs can starve: that is the
known weakness of SJF that fgs's aging addresses.

The memo keeps the waiting jobs in that order, one queue per GPU count, so a
round looks only at the heads of the queues whose jobs still fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Sequence

from .base import Action, ClusterSnapshot, JobState, JobView, Policy
from .exclusive import IdleMap, start_exclusive
from .memo import Memo, WaitQueue
from .placement import up_gpus
from .prediction import remaining_s
from .queueing import WAITING


class SjfMemo(Memo):
    """Waiting jobs by GPU count, each queue ordered by (not sampling, length, submit, id)."""

    def __init__(self, sample: bool) -> None:
        self.sample = sample
        super().__init__()

    def reset(self) -> None:
        self.waiting = WaitQueue()

    def changed(self, jid: str, old: JobView | None, new: JobView | None) -> None:
        if new is None or new.state not in WAITING:
            self.waiting.remove(jid)
            return
        left = remaining_s(new)
        if left is None and self.sample and new.state is JobState.QUEUED:
            key = (0, 0.0, new.submit_time, jid)
        else:
            key = (1, math.inf if left is None else left, new.submit_time, jid)
        self.waiting.put(jid, new.num_gpus, key)


@dataclass
class Sjf(Policy):
    """Shortest predicted job first on exclusive GPUs, sampling new jobs first."""

    name: ClassVar[str] = "sjf"
    reads_progress: ClassVar[bool] = False   # it reads waiting jobs and where jobs run
    # sample a job with no prediction on an exclusive GPU before ordering it
    sample_on_admission: bool = True

    def new_memo(self) -> SjfMemo:
        """An empty memo (see ``policies.memo``)."""
        return SjfMemo(self.sample_on_admission)

    def decide(self, now: float, cluster: ClusterSnapshot, jobs: Sequence[JobView],
               memo: SjfMemo | None = None) -> list[Action]:
        """Sample new jobs, then start the shortest predicted jobs that fit."""
        memo = self.new_memo() if memo is None else memo
        memo.sync(jobs)
        waiting = memo.waiting
        if not waiting:
            return []
        up, views = len(up_gpus(cluster)), memo.tracker.views
        idle_now = len(memo.idle_ranks(cluster))
        if idle_now < min(waiting.buckets):
            return []   # not even the smallest waiting job fits
        idle = IdleMap(cluster, memo=memo)
        actions: list[Action] = []
        walk = waiting.merged()
        for k, key in walk:
            if k > up or k > idle.idle:
                walk.drop()   # no job of this size fits any more this round
                continue
            walk.advance()
            start = start_exclusive(idle, views[key[-1]], sample_only=key[0] == 0)
            if start is not None:
                actions.append(start)
            if idle.idle == 0:
                break
        return actions
