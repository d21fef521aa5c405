"""Tiresias-style discretised 2D-LAS on exclusive GPUs, with preemption.

From Gu et al., "Tiresias: A GPU Cluster Manager for Distributed Deep
Learning", NSDI'19. A job's priority is its attained service in GPU-seconds
(GPUs x time run, ``attained_service_s``), discretised into K queues by the
thresholds: queue 0 holds jobs below the first threshold, and so on. Lower
queues go first; within a queue, arrival order (FIFO). No prediction is used.
A running job is preempted (suspended) when a waiting job of a strictly
better queue needs its GPUs; jobs of the same queue never preempt each other,
which keeps the within-queue FIFO order without thrashing. Starvation: as in
the paper, a job that has waited ``promote_knob`` times longer than it has
run is promoted to queue 0 while it waits.

Defaults are our choice for the Philly trace: two queues (the paper finds two
or three queues enough) split at one GPU-hour, where Philly's job length
distribution separates the many short debugging and tuning jobs from long
training; ``promote_knob`` 4, so a job is not held back for more than a few
times its own run time; ``min_run_s`` of 60 s so a job that just started or
resumed is not suspended before it makes progress past its restore cost.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import ClassVar, Sequence

from .base import Action, ClusterSnapshot, JobState, JobView, Suspend
from .exclusive import IdleMap, start_exclusive
from .memo import Memo
from .placement import up_gpus
from .prediction import current_wait_s, run_s
from .queueing import HOLDING, WAITING


@dataclass
class Tiresias:
    """Discretised two-dimensional least-attained-service, preemptive, exclusive GPUs."""

    name: ClassVar[str] = "tiresias"
    # attained-service (GPU-seconds) boundaries between queues; K = len + 1 queues
    thresholds: tuple[float, ...] = (3600.0,)
    # promote a waiting job to queue 0 when its current wait > knob x its run time (0: off)
    promote_knob: float = 4.0
    # no preemption within this many seconds of a job's last start or resume
    min_run_s: float = 60.0

    def __post_init__(self) -> None:
        self.thresholds = tuple(float(t) for t in self.thresholds)
        if any(b <= a for a, b in zip(self.thresholds, self.thresholds[1:])) or \
                any(t <= 0 for t in self.thresholds):
            raise ValueError(f"tiresias thresholds must be positive and increasing, "
                             f"got {self.thresholds}")
        if self.promote_knob < 0 or self.min_run_s < 0:
            raise ValueError("tiresias promote_knob and min_run_s must be >= 0")

    def queue_of(self, job: JobView, now: float) -> int:
        """The job's queue index now (0 = highest priority)."""
        q = bisect_right(self.thresholds, job.attained_service_s)
        if (q and self.promote_knob > 0 and job.state in WAITING
                and current_wait_s(job, now) > self.promote_knob * run_s(job)):
            return 0
        return q

    def new_memo(self) -> Memo:
        """An empty memo (see ``policies.memo``).

        Hook: this policy does not keep its queues in the memo yet; a subclass
        of ``Memo`` with a ``WaitQueue`` keyed (queue, submit, id) is where they go.
        """
        return Memo()

    def decide(self, now: float, cluster: ClusterSnapshot, jobs: Sequence[JobView],
               memo: Memo | None = None) -> list[Action]:
        """Give GPUs to the best queues, preempting running jobs of worse queues."""
        up = len(up_gpus(cluster))
        waiting = []   # (queue, 1, submit, id, job)
        running = []   # running jobs that may be preempted now
        pinned = 0     # GPUs of jobs that must not be preempted now
        best_waiting = None
        most_served = -1.0
        smallest = up + 1
        wanted = 0     # GPUs the waiting jobs ask for in all
        for j in jobs:
            s = j.state
            if s in WAITING:
                if j.num_gpus <= up:
                    q = self.queue_of(j, now)
                    waiting.append((q, 1, j.submit_time, j.id, j))
                    if best_waiting is None or q < best_waiting:
                        best_waiting = q
                    if j.num_gpus < smallest:
                        smallest = j.num_gpus
                    wanted += j.num_gpus
            elif s is JobState.RUNNING and (
                    j.last_start is None or now - j.last_start >= self.min_run_s):
                running.append(j)
                if j.attained_service_s > most_served:
                    most_served = j.attained_service_s
            elif s in HOLDING:
                pinned += j.num_gpus
        if best_waiting is None:
            return []
        idle = IdleMap(cluster, jobs)
        # a running job is in a worse queue than the best waiting one iff it
        # has crossed that queue's upper threshold
        if (wanted <= idle.idle or best_waiting >= len(self.thresholds)
                or most_served < self.thresholds[best_waiting]):
            # everyone fits, or nobody may be preempted: fill idle GPUs in priority order
            if idle.idle < smallest:
                return []
            waiting.sort(key=lambda t: t[:4])
            starts = []
            for t in waiting:
                start = start_exclusive(idle, t[4]) if idle.idle >= t[4].num_gpus else None
                if start is not None:
                    starts.append(start)
                if idle.idle < smallest:
                    break
            return starts
        keyed = [(self.queue_of(j, now), 0, j.submit_time, j.id, j) for j in running]
        keyed += waiting
        keyed.sort(key=lambda t: t[:4])
        left = up - pinned
        chosen: list[JobView] = []
        victims: list[JobView] = []
        for t in keyed:
            j = t[4]
            if j.num_gpus <= left:
                left -= j.num_gpus
                if j.state in WAITING:
                    chosen.append(j)
            elif j.state is JobState.RUNNING:
                victims.append(j)
        if not chosen:
            return []
        for v in victims:
            idle.release(f.gpu for f in v.fragments)
        starts = [s for s in (start_exclusive(idle, j) for j in chosen) if s is not None]
        if not starts:
            return []   # nothing could be placed after all: preempt nobody
        return [Suspend(v.id) for v in victims] + starts
