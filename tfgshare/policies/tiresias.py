"""Tiresias's discretised 2D-LAS (``dlas-gpu``), as its authors' simulator runs it.

From Gu et al., "Tiresias: A GPU Cluster Manager for Distributed Deep
Learning", NSDI'19, and the authors' simulator (``SymbioticLab/Tiresias``,
``run_sim.py --schedule=dlas-gpu``). A job's priority is its attained service
in GPU-seconds (GPUs x time held), discretised into queues by ``thresholds``:
the authors' code uses three queues split at 3,250 and 7,200 GPU-seconds.

The queues are ordered lists, kept the way their code keeps them:

* a new job joins the back of queue 0;
* a running job whose attained service reaches its queue's threshold is
  demoted to the back of the next queue (behind that queue's waiting jobs);
* at every decision the queues are walked in order, and each job, in list
  order, runs if enough GPUs are still free (counting GPUs only; a smaller job
  may pass a larger one that does not fit); a running job that does not fit
  is preempted;
* after each decision, in every queue the running jobs move ahead of the
  waiting ones (each group keeping its order), so a preempted job heads its
  queue's waiting jobs and a started one follows the jobs already running.

``dlas-gpu`` has no starvation promotion (``promote_knob`` 0). With a knob
``k > 0`` (their ``dlas-gpu-k``; registry name ``tiresias-promote`` is k = 4,
the old default here), a waiting job of a lower queue whose pending time since
it last ran after a promotion reaches ``k`` x its run time since that
promotion goes back to the end of queue 0, its attained service counted from
zero again. ``min_run_s`` (0 in their code) protects a job that just started.

Attained service is read fresh at every decision (``attained_now``), and
``wake_at`` tells the caller when the next demotion or promotion is due so it
can ask again then (the authors' simulator schedules that "job jump" as
``(threshold - run seconds) / GPUs`` from each event, which for a multi-GPU job
is later than the crossing; ``authors_wake=False`` wakes at the crossing).

Unlike the other policies' memos, this one is more than a cache: the order of
the queues depends on history (who was demoted or preempted when), so the
caller must pass the same memo to every call. It records what it observed in
the views (starts, preemptions, crossings), never what it planned, so a
decision repeated on the same views gives the same actions. A fresh memo puts
each job in the queue of its attained service, in arrival order.

This module owns the policy: how the queues move. The walk that decides lives in
``tiresias_walk``; the memo that holds the queues (``TiresiasMemo``, each job's
``Place``) in ``tiresias_memo``, re-exported here. May import the policy interface and
its helpers (``base``, ``placement``, ``prediction``, ``queueing``, ``stale``,
``tiresias_memo``, ``tiresias_walk``), ``sortedcontainers`` and the standard library only.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import ClassVar, Iterable, Sequence

from sortedcontainers import SortedList

from .base import Action, ClusterSnapshot, JobState, JobView, Policy
from .placement import up_gpus
from .prediction import attained_now, total_wait_s
from .queueing import HOLDING, WAITING
from .stale import drop_stale
# the queues it keeps between decisions (its memo) sit beside it
from .tiresias_memo import (RUN, TAIL, WAIT, Place, RunPart, RunPrefix, TiresiasMemo,
                             WaitPart)
from .tiresias_walk import walk

EPS = 1e-6


@dataclass
class Tiresias(Policy):
    """Discretised 2D-LAS on exclusive GPUs, preemptive, queues kept as ordered lists."""

    name: ClassVar[str] = "tiresias"
    reads_progress: ClassVar[bool] = False   # attained service: prediction.attained_now
    tick_s: ClassVar[float | None] = None   # no periodic call needed: see wake_at
    # dlas-gpu keeps its walk incrementally (False: walk every job, as a check)
    incremental: ClassVar[bool] = True
    # attained-service (GPU-seconds) boundaries between queues; len + 1 queues
    thresholds: tuple[float, ...] = (3250.0, 7200.0)
    # promote a waiting lower-queue job when pending >= knob x run time (0: off)
    promote_knob: float = 0.0
    # no preemption within this many seconds of a job's last start or resume
    min_run_s: float = 0.0
    # be woken at the authors' "job jump" time (see the module doc); False: at the crossing
    authors_wake: bool = True

    def __post_init__(self) -> None:
        self.thresholds = tuple(float(t) for t in self.thresholds)
        if any(b <= a for a, b in zip(self.thresholds, self.thresholds[1:])) or \
                any(t <= 0 for t in self.thresholds):
            raise ValueError(f"tiresias thresholds must be positive and increasing, "
                             f"got {self.thresholds}")
        if self.promote_knob < 0 or self.min_run_s < 0:
            raise ValueError("tiresias promote_knob and min_run_s must be >= 0")

    # ---- queue bookkeeping ---------------------------------------------------

    def new_memo(self) -> TiresiasMemo:
        """An empty memo: the queues (see the module doc)."""
        return TiresiasMemo()

    @staticmethod
    def queue_of(memo: TiresiasMemo, job_id: str) -> int | None:
        """The queue (0 = highest priority) the job was in at the last decision."""
        p = memo.places.get(job_id)
        return None if p is None else p.queue

    def _sync(self, now: float, jobs: Sequence[JobView], memo: TiresiasMemo) -> list[JobView]:
        """Bring every job's place up to date with what the views show now."""
        places = memo.places
        fresh: list[JobView] = []
        moved: list[tuple[tuple, JobView, Place]] = []
        holding: list[JobView] = []
        waiting: list[JobView] = []
        for j in jobs:
            s = j.state
            if s in HOLDING:
                holding.append(j)
            elif s in WAITING:
                waiting.append(j)
            self._observe(now, j, places.get(j.id), fresh, moved)
        if len(places) > len(jobs) - len(fresh):
            live = {j.id for j in jobs}
            for jid in [k for k in places if k not in live]:
                del places[jid]
        self._settle(now, memo, fresh, moved)
        # demotions (and promotions), in arrival order as their runnable list
        last = len(self.thresholds)
        candidates = holding + waiting if self.promote_knob else holding
        for j in sorted(candidates, key=lambda j: (j.submit_time, j.id)):
            p = places[j.id]
            service = attained_now(j, now) - p.base_service
            if j.state in HOLDING:
                if p.queue < last and service >= self.thresholds[p.queue] - EPS:
                    self._demote(now, p, service, memo)
            elif p.queue > 0 and service > 0 and p.base_wait is not None:
                pending = total_wait_s(j, now) - p.base_wait
                if pending >= self.promote_knob * service / j.num_gpus:
                    p.queue, p.part, p.key = 0, WAIT, memo.tail()
                    p.base_service += service
                    p.base_wait = None
        return candidates

    @staticmethod
    def _observe(now: float, j: JobView, p: Place | None, fresh: list[JobView],
                 moved: list[tuple[tuple, JobView, Place]]) -> None:
        """Note a job new to the queues, or one that started or stopped since the last
        decision (with its place then: the order it is settled in)."""
        if p is None:
            fresh.append(j)
        elif p.part != (RUN if j.state is JobState.RUNNING else WAIT) and not (
                p.part == TAIL and p.since == now and j.state is JobState.RUNNING):
            # (a job demoted at this very time has not been walked yet)
            moved.append(((p.queue, p.part, p.key), j, p))

    def _settle(self, now: float, memo: TiresiasMemo, fresh: list[JobView],
                moved: list[tuple[tuple, JobView, Place]]) -> None:
        """Move the jobs ``_observe`` noted to their new places."""
        places = memo.places
        # what happened since the last decision, in that decision's walk order
        moved.sort(key=lambda t: t[0])
        preempted = [(j, p) for _, j, p in moved if j.state is not JobState.RUNNING]
        start = memo.front - len(preempted)
        for i, (j, p) in enumerate(preempted):
            if p.part == RUN:            # preempted: heads its queue's waiting jobs
                p.key = start + i
            p.part = WAIT                # a demoted job that lost its GPUs stays at the back
        memo.front = start
        for _, j, p in moved:
            if j.state is JobState.RUNNING:
                p.part, p.key = RUN, memo.tail()
                if p.base_wait is None:
                    p.base_wait = total_wait_s(j, now)
        # new jobs join the back of queue 0 (a job first seen with service
        # already, e.g. after a coordinator restart, the queue of that service)
        fresh.sort(key=lambda j: (j.submit_time, j.id))
        for j in fresh:
            runs = j.state is JobState.RUNNING
            q = self._level(attained_now(j, now))
            places[j.id] = Place(q, RUN if runs else WAIT, memo.tail(),
                                  base_wait=total_wait_s(j, now) if runs else None)

    def _demote(self, now: float, p: Place, service: float, memo: TiresiasMemo) -> None:
        """A holding job reached its queue's threshold: to the back of a lower queue."""
        p.queue = max(p.queue + 1, self._level(service))
        p.part, p.key, p.since = TAIL, memo.tail(), now

    def _level(self, service: float) -> int:
        q = 0
        for t in self.thresholds:
            if service < t:
                break
            q += 1
        return q

    # ---- the decision ----------------------------------------------------------

    def decide(self, now: float, cluster: ClusterSnapshot, jobs: Sequence[JobView],
               memo: TiresiasMemo | None = None) -> list[Action]:
        """Walk the queues in order; run what fits, preempt running jobs that do not."""
        memo = self.new_memo() if memo is None else memo
        memo.sync(jobs)
        if self.incremental and not (self.promote_knob or self.min_run_s):
            return self._fast_decide(now, cluster, memo)
        memo.pending.clear()   # (the incremental indexes are kept by dlas-gpu only)
        candidates = self._sync(now, jobs, memo)
        places = memo.places
        free = len(up_gpus(cluster))
        entries = []
        movable = 0                         # running jobs the walk may preempt
        any_waiting = False
        for j in jobs:
            s = j.state
            if s is JobState.RUNNING:
                if self.min_run_s and j.last_start is not None and \
                        now - j.last_start < self.min_run_s:
                    free -= j.num_gpus      # protected: keeps its GPUs
                    continue
                movable += 1
            elif s in HOLDING:
                free -= j.num_gpus          # sampling or suspending: not ours to move
                continue
            elif s in WAITING:
                any_waiting = True
            else:
                continue
            p = places[j.id]
            entries.append((p.queue, p.part, p.key, j))   # (queue, part, key) is unique
        memo.wake = self._next_jump(now, candidates, memo)
        if not any_waiting:
            return []
        entries.sort()
        running = JobState.RUNNING
        return walk(cluster, memo, ((i, e[3]) for i, e in enumerate(entries)), free,
                    movable, lambda i: (e[3] for e in entries[i + 1:] if e[3].state is running))

    # ---- the incremental walk (dlas-gpu: no promotion, no min_run_s) -----------

    def _fast_sync(self, now: float, memo: TiresiasMemo) -> None:
        """``_sync`` for the changed jobs only, then the indexes brought up to date."""
        places, views = memo.places, memo.tracker.views
        if memo.restarted:   # every view came as a change: forget places of jobs gone
            memo.restarted = False
            for jid in [k for k in places if k not in views]:
                del places[jid]
        touched = memo.pending
        memo.pending = set()
        fresh: list[JobView] = []
        moved: list[tuple[tuple, JobView, Place]] = []
        for jid in touched:
            j = views.get(jid)
            if j is None:
                places.pop(jid, None)
                continue
            self._observe(now, j, places.get(jid), fresh, moved)
        self._settle(now, memo, fresh, moved)
        for jid in touched:   # (their crossings too, before the demotions below)
            self._index(now, jid, memo)
        # a TAIL job moves to its part at the next decision: look at it then
        memo.pending.update(jid for jid in touched
                            if jid in places and places[jid].part == TAIL)
        touched = set()
        # demotions: the holding jobs whose crossing is due, in arrival order
        last = len(self.thresholds)
        heap, due, later = memo.crossings, [], []
        while heap and heap[0][0] <= now:
            item = heapq.heappop(heap)
            j = item[3]
            if views.get(j.id) is not j or j.state not in HOLDING:
                continue
            p = places[j.id]
            if p.queue != item[4] or (due and due[-1] is j):
                continue   # pushed for an earlier queue, or again for this one
            if p.queue < last and attained_now(j, now) - p.base_service >= \
                    self.thresholds[p.queue] - EPS:
                due.append(j)
            elif p.queue < last:
                later.append(item)   # early by rounding: look again next time
        for item in later:
            heapq.heappush(heap, item)
        drop_stale(heap, len(views), lambda it: views.get(it[2]) is it[3])   # views replaced
        for j in sorted({j.id: j for j in due}.values(), key=lambda j: (j.submit_time, j.id)):
            p = places[j.id]
            self._demote(now, p, attained_now(j, now) - p.base_service, memo)
            touched.add(j.id)
        for jid in touched:
            self._index(now, jid, memo)
        memo.pending.update(touched)

    def _index(self, now: float, jid: str, memo: TiresiasMemo) -> None:
        """Put one job's walk entry, crossing and wake-up moment in the memo's indexes."""
        old = memo.entry.pop(jid, None)
        if old is not None:
            memo.order.remove(old)
            memo.running.discard(old)
            counted = memo.in_run_part.pop(jid, None)
            if counted is not None:
                part = memo.run_part[counted[0]]
                part[0] -= counted[1] if counted[2] else 0
                part[1] -= counted[2]
                part[2] -= 1
                if counted[2]:   # (only running jobs are in its prefix)
                    memo.run_prefix[counted[0]].drop(jid)
            waits = memo.wait_of.pop(jid, None)
            if waits is not None:
                lists = memo.waits[waits[0]]
                lists[waits[1]].remove(old)
                if not lists[waits[1]]:
                    del lists[waits[1]]
        jump = memo.jump_of.pop(jid, None)
        if jump is not None:
            memo.jumps[jump[0]].remove(jump[1])
        j = memo.tracker.views.get(jid)
        p = memo.places.get(jid)
        if j is None or p is None:
            return
        s = j.state
        if s is JobState.RUNNING or s in WAITING:
            e = (p.queue, p.part, p.key, jid)
            memo.entry[jid] = e
            memo.order.add(e)
            runs = s is JobState.RUNNING
            if runs:
                memo.running.add(e)
            # (each index made on first use: ``setdefault`` alone builds its default every call)
            if p.part == RUN:
                part = memo.run_part.get(p.queue) or memo.run_part.setdefault(p.queue, [0, 0, 0])
                part[0] += j.num_gpus if runs else 0
                part[1] += runs
                part[2] += 1
                memo.in_run_part[jid] = (p.queue, j.num_gpus, runs)
                if runs:
                    (memo.run_prefix.get(p.queue) or memo.run_prefix.setdefault(
                        p.queue, RunPrefix())).add(jid, e, j.num_gpus)
            elif p.part == WAIT and not runs:
                lists = memo.waits.get(p.queue) or memo.waits.setdefault(p.queue, {})
                (lists.get(j.num_gpus) or lists.setdefault(j.num_gpus, SortedList())).add(e)
                memo.wait_of[jid] = (p.queue, j.num_gpus)
        if s not in HOLDING or p.queue >= len(self.thresholds):
            return
        thr, g = self.thresholds[p.queue], j.num_gpus
        a, at = j.attained_service_s - p.base_service, j.attained_at
        if at is None:   # service does not grow in the view: due now or never
            t = -math.inf if a >= thr - EPS else math.inf
        else:
            t = at + (thr - EPS - a) / g
            t -= 1e-6 * (1.0 + abs(t))   # early, never late
        if t < math.inf:
            memo.pushed += 1
            heapq.heappush(memo.crossings, (t, memo.pushed, jid, j, p.queue))
        if s is JobState.RUNNING:
            # the wake-up is now + max(0, (c - now) / g) with c as below (authors'),
            # or c itself: either way later for a larger c among jobs of g GPUs
            if at is None:
                c = math.inf
            elif self.authors_wake:
                c = thr - a / g + at
            else:
                c = at + (thr - a) / g
            key = (c, jid)
            (memo.jumps.get(g) or memo.jumps.setdefault(g, SortedList())).add(key)
            memo.jump_of[jid] = (g, key)

    def _fast_next_jump(self, now: float, memo: TiresiasMemo) -> float | None:
        """``_next_jump`` from the wake-up moments, computed exactly for the nearest few."""
        views, places = memo.tracker.views, memo.places
        best = None
        tol = 1e-6
        for g, moments in memo.jumps.items():
            found_c = None
            for c, jid in moments.irange((now - tol * (1.0 + abs(now)), "")):
                if found_c is not None and c > found_c + tol * (1.0 + abs(found_c)):
                    break
                t = self._jump_time(now, views[jid], places[jid])
                if t is not None and t > now:
                    if found_c is None:
                        found_c = c
                    if best is None or t < best:
                        best = t
        return best

    def _jump_time(self, now: float, j: JobView, p: Place) -> float | None:
        """When this running job crosses its threshold, as ``_next_jump`` computes it."""
        service = attained_now(j, now) - p.base_service
        if self.authors_wake:
            g = j.num_gpus
            return now + max(0.0, (self.thresholds[p.queue] - service / g) / g)
        return now + (self.thresholds[p.queue] - service) / j.num_gpus

    def _fast_decide(self, now: float, cluster: ClusterSnapshot,
                     memo: TiresiasMemo) -> list[Action]:
        self._fast_sync(now, memo)
        memo.wake = self._fast_next_jump(now, memo)
        if not memo.n_waiting:
            return []
        views = memo.tracker.views
        return walk(cluster, memo, self._fast_order(memo),
                    len(up_gpus(cluster)) - memo.held_other, memo.n_running,
                    lambda e: (views[r[3]] for r in
                               memo.running.irange(e, inclusive=(False, True))))

    def _fast_order(self, memo: TiresiasMemo) -> Iterable[tuple[object, object]]:
        """The walk's (entry, item) pairs in ``memo.order``'s order, a queue's RUN part
        (running jobs only) given as one ``RunPart`` placed at its end, its WAIT part as
        one ``WaitPart``."""
        views, order = memo.tracker.views, memo.order
        for q in range(order[-1][0] + 1 if order else 0):   # every queue with a job
            gpus, running, entries = memo.run_part.get(q, (0, 0, 0))
            if running and running == entries:
                yield (q, RUN, math.inf), RunPart(gpus, running, lambda f, q=q: memo.run_rest(q, f))
            elif entries:
                yield from memo.run_rest(q, None)[2]
            if memo.waits.get(q):
                yield (q, WAIT), WaitPart(memo.waits[q], views)
            for e in order.irange((q, TAIL), (q + 1,), inclusive=(True, False)):
                yield e, views[e[3]]

    def _next_jump(self, now: float, jobs: Sequence[JobView],
                   memo: TiresiasMemo) -> float | None:
        """When the next running job crosses its threshold (or a waiting one is promoted)."""
        last = len(self.thresholds)
        best = None
        for j in jobs:
            p = memo.places.get(j.id)
            if p is None:
                continue
            if j.state is JobState.RUNNING:
                if p.queue >= last:
                    continue
                t = self._jump_time(now, j, p)
            elif self.promote_knob and j.state in WAITING and p.queue > 0 \
                    and p.base_wait is not None:
                service = attained_now(j, now) - p.base_service
                if service <= 0:
                    continue
                t = now + self.promote_knob * service / j.num_gpus - (
                    total_wait_s(j, now) - p.base_wait)
            else:
                continue
            if t > now and (best is None or t < best):
                best = t
        return best

    def wake_at(self, now: float, memo: TiresiasMemo) -> float | None:
        """The time of the next demotion or promotion seen at the last decision."""
        return memo.wake


@dataclass
class TiresiasPromote(Tiresias):
    """Tiresias with starvation promotion at knob 4 (their ``dlas-gpu-4``)."""

    name: ClassVar[str] = "tiresias-promote"
    promote_knob: float = 4.0
