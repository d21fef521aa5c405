"""FIFO with whole, exclusive GPUs: what Philly ran, the "traditional" baseline.

Jobs start strictly in arrival order, each on ``num_gpus`` whole GPUs (one
tenant per GPU, the fraction is the GPU less the context reserve), gang-placed
on one node where possible. No preemption, no prediction. Head-of-line
blocking is kept on purpose: if the oldest waiting job does not fit, nothing
behind it starts (Philly's scheduler, Jeon et al., "Analysis of Large-Scale
Multi-Tenant GPU Clusters for DNN Training Workloads", ATC'19). A job asking
for more GPUs than the cluster has up is skipped rather than blocking forever.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Sequence

from .base import Action, ClusterSnapshot, JobView
from .exclusive import IdleMap, start_exclusive
from .queueing import any_waiting, waiting_jobs


@dataclass
class Fifo:
    """First in, first out on exclusive GPUs, with head-of-line blocking."""

    name: ClassVar[str] = "fifo"
    tick_s: ClassVar[float | None] = None   # its decision changes only on arrivals and ends

    def decide(self, now: float, cluster: ClusterSnapshot,
               jobs: Sequence[JobView]) -> list[Action]:
        """Start waiting jobs in arrival order until the oldest one does not fit."""
        if not any_waiting(jobs):
            return []
        idle = IdleMap(cluster, jobs)
        if idle.idle == 0:
            return []
        queue = waiting_jobs(jobs)
        up = len(idle.gpus)
        actions: list[Action] = []
        for job in queue:
            if job.num_gpus > up:
                continue
            start = start_exclusive(idle, job)
            if start is None:
                break
            actions.append(start)
        return actions
