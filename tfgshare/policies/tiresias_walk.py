"""Tiresias's walk: the queues in order, each job run if its GPUs are still free.

Owns ``walk``, the decision ``tfgshare.policies.tiresias.Tiresias`` takes once its
queues are up to date: a job, in walk order, runs if enough GPUs are still free
(counting GPUs only), a running job that does not fit is preempted. The order comes
as (position, item) pairs, an item a job's view, or a queue's running jobs as one
``RunPart``, or its waiting jobs as one ``WaitPart`` (``tiresias_memo``).

May import: the policy interface (``base``), ``exclusive`` placement and
``tiresias_memo``, and the standard library only.
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator

from .base import Action, ClusterSnapshot, JobState, JobView, Suspend
from .exclusive import IdleMap, start_exclusive
from .tiresias_memo import RunPart, TiresiasMemo, WaitPart


def walk(cluster: ClusterSnapshot, memo: TiresiasMemo,
         order: Iterable[tuple[object, JobView]], free: int, movable: int,
         running_after: Callable[[object], Iterable[JobView]]) -> list[Action]:
    """The walk: in queue order each job runs if its GPUs are still free, a running
    job that does not fit is preempted; the preemptions, then the starts.

    ``order`` gives (position, item) in walk order, the running jobs and
    the waiting ones; ``running_after(position)`` the running jobs after
    that position; ``free``: the up GPUs less those of holding jobs not in
    the walk; ``movable``: the running jobs in it.
    """
    chosen: list[JobView] = []
    victims: list[JobView] = []
    items = iter(order)
    part: Iterator | None = None   # the jobs of a RunPart that did not fit whole
    while True:
        at_j = next(part, None) if part is not None else None
        if at_j is None:
            part = None
            at_j = next(items, None)
            if at_j is None:
                break
        at, j = at_j
        if j.__class__ is WaitPart:   # its jobs that fit start, in order
            if free > 0:
                free, at = j.fitting(free, chosen)
            else:       # none fits: the checks after its first job
                at = j.first()
            if at is not None and free <= 0:   # the checks after a job, as below
                if movable > 0:
                    victims.extend(running_after(at))
                if free == 0 or movable > 0:
                    break
            continue
        if j.__class__ is RunPart:
            if j.gpus > free:   # those that fit leaving GPUs free pass whole, then one by one
                gpus, count, rest = j.rest(free)
                free, movable, part = free - gpus, movable - count, iter(rest)
                continue
            # all fit in turn, free reaching 0 at the last at the earliest
            free -= j.gpus
            movable -= j.count
            if free <= 0 and movable > 0:
                victims.extend(running_after(at))
                break
            continue
        runs = j.state is JobState.RUNNING
        if j.num_gpus <= free:
            free -= j.num_gpus
            if not runs:
                chosen.append(j)
        elif runs:
            victims.append(j)
        if runs:
            movable -= 1
        elif free == 0 and movable == 0:
            break                        # nothing left to start or to preempt
        if free <= 0 and movable > 0:
            # nothing more starts: every running job further on is preempted
            victims.extend(running_after(at))
            break
    if not chosen:
        return []
    idle = IdleMap(cluster, memo=memo)
    for v in victims:
        idle.release(f.gpu for f in v.fragments)
    starts = [s for s in (start_exclusive(idle, j) for j in chosen) if s is not None]
    return [Suspend(v.id) for v in victims] + starts
