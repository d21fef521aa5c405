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

import math
from dataclasses import dataclass
from typing import ClassVar, Sequence

from .base import Action, ClusterSnapshot, JobState, JobView
from .exclusive import start_exclusive, whole_gpu
from .placement import FreeMap
from .prediction import remaining_s
from .queueing import arrival_key, waiting_jobs


@dataclass
class Sjf:
    """Shortest predicted job first on exclusive GPUs, sampling new jobs first."""

    name: ClassVar[str] = "sjf"
    # sample a job with no prediction on an exclusive GPU before ordering it
    sample_on_admission: bool = True

    def decide(self, now: float, cluster: ClusterSnapshot,
               jobs: Sequence[JobView]) -> list[Action]:
        """Sample new jobs, then start the shortest predicted jobs that fit."""
        queue = waiting_jobs(jobs)
        if not queue:
            return []
        free = FreeMap(cluster, jobs, max_tenants=1)
        need = whole_gpu(cluster)
        up = len(free.gpus)
        to_sample, ordered = [], []
        for job in queue:
            if job.num_gpus > up:
                continue
            left = remaining_s(job)
            if left is None and self.sample_on_admission and job.state is JobState.QUEUED:
                to_sample.append(job)
            else:
                ordered.append((math.inf if left is None else left, arrival_key(job), job))
        ordered.sort(key=lambda t: (t[0], t[1]))
        actions: list[Action] = []
        plan = [(j, True) for j in to_sample] + [(t[2], False) for t in ordered]
        for job, sample_only in plan:
            if free.count_fitting(need) == 0:
                break
            start = start_exclusive(free, job, need, sample_only)
            if start is not None:
                actions.append(start)
        return actions
