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
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import ClassVar, Sequence

from .base import Action, ClusterSnapshot, JobState, JobView
from .exclusive import IdleMap, start_exclusive
from .prediction import remaining_s
from .queueing import WAITING, any_waiting


@dataclass
class Sjf:
    """Shortest predicted job first on exclusive GPUs, sampling new jobs first."""

    name: ClassVar[str] = "sjf"
    # sample a job with no prediction on an exclusive GPU before ordering it
    sample_on_admission: bool = True

    def decide(self, now: float, cluster: ClusterSnapshot,
               jobs: Sequence[JobView]) -> list[Action]:
        """Sample new jobs, then start the shortest predicted jobs that fit."""
        if not any_waiting(jobs):
            return []
        idle = IdleMap(cluster, jobs)
        if idle.idle == 0:
            return []
        up = len(idle.gpus)
        sample = self.sample_on_admission
        heap = []   # (0 = sampling run first, predicted length, submit, id, job)
        for job in jobs:
            if job.state not in WAITING or job.num_gpus > up:
                continue
            left = remaining_s(job)
            if left is None and sample and job.state is JobState.QUEUED:
                heap.append((0, 0.0, job.submit_time, job.id, job))
            else:
                heap.append((1, math.inf if left is None else left,
                             job.submit_time, job.id, job))
        heapq.heapify(heap)
        actions: list[Action] = []
        while heap and idle.idle > 0:
            first, _, _, _, job = heapq.heappop(heap)
            start = start_exclusive(idle, job, sample_only=first == 0)
            if start is not None:
                actions.append(start)
        return actions
