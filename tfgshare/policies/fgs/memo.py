"""fgs's memo: what it keeps between rounds (``policies.memo``), kept up to date per change.

``FgsMemo`` owns the waiting queues in the orders a round walks them (jobs to
sample by arrival, the others by predicted remaining time, promoted jobs by
arrival), each waiting job's entry (``records.WaitingJob``) and its promotion
as a timed event at the moment its wait passes its bound; for the jobs holding
GPUs, what each index reads of them (``Fgs.tenant_keys``), the GPUs each
index must read again (``indexes``), the count of single-GPU holders per GPU,
and the minimum-run ends of the tenants that may be moved. All is updated
only for the jobs whose view changed (``changed``).

Imports: ``policies`` below fgs, ``fgs.records`` and ``fgs.order``.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter

from sortedcontainers import SortedList

from ..base import JobState, JobView
from ..frag_choice import LeastFragmenting, request_of, target_types
from ..memo import Memo
from ..placement import fraction_for
from ..prediction import remaining_s
from ..queueing import WAITING
from ..stale import drop_stale
from .order import size_bucket
from .records import (ArrivalKey, IdleWalk, JobSize, KeyedView, KeysBeforeAfter, MemoFreeMap,
                      MinRunEnd, Movability, PromotionDue, QueueConfig, ShortestKey, SizeBucket,
                      WaitClock, WaitingJob)

__all__ = ["FgsMemo"]

REFRESH = 0.05   # FGD's target workload is made again when the requests seen grow 5 %


class FgsMemo(Memo):
    """fgs's state between rounds: the tenants, a plan-ready FreeMap and the waiting queues.

    Waiting jobs are kept in the orders fgs walks them: jobs to sample by
    arrival, the others by predicted remaining time, the promoted ones (of
    either kind) by arrival; each job's promotion is a timed event at the
    moment its wait passes its bound. Sizes are kept sorted too, so a round can tell in
    O(log n) that none of the jobs left could fit anywhere.
    """

    # the policy's, set before each sync (kept through a reset): a job holding GPUs ->
    # what each reader reads of its view, by name (``Fgs.tenant_keys``): "tenant"
    # (consolidation and ``MovableIndex``; None for a tenant it never moves), "reach"
    # (``RoomIndex``), "clear" (``ClearIndex``), "run" (its minimum run if it may be
    # moved, for ``expiries``); None: readers read every change
    keys = None
    keys_for: object = None   # the settings ``keys`` reads under (``Fgs.room_key``)

    def use_keys(self, keys, settings: object) -> None:
        """Read tenants with this keyer, which reads these settings (kept while they hold)."""
        if settings != self.keys_for:
            self.keys, self.keys_for = keys, settings
            self._keyed = {}

    def _keyed_pair(self, jid: str, old: JobView | None,
                    new: JobView | None) -> KeysBeforeAfter:
        """The old view's keys and the new one's, each None for no view: a view's keys are
        worked out once and kept with the job's latest view for its next change."""
        was = self._keyed.pop(jid, None)
        keyer = self.keys
        old_keys = (None if old is None else was.keys if was is not None and was.view is old
                    else keyer(old))
        new_keys = None
        if new is not None:
            new_keys = keyer(new)
            self._keyed[jid] = KeyedView(new, new_keys)
        return KeysBeforeAfter(old_keys, new_keys)

    def reset(self) -> None:
        """Forget every job and every index (the next changes are all the jobs)."""
        self.free_map: MemoFreeMap | None = None   # the FreeMap as the holders hold it
        self.unplanned: set[str] = set()   # GPUs changed since ``free_map`` was brought up to date
        self.config: QueueConfig | None = None   # the settings and GPU size the queues are for
        self.now = -math.inf                # the latest decision time seen
        # per-GPU indexes of the tenants (room_index, consolidate), by name; each
        # has a ``stale`` set of the GPUs whose tenants' views changed since it was read,
        # and ``reads``: the name of its key in ``keys`` (only a change of that key
        # makes a GPU stale), or "view" (every change)
        self.indexes: dict[str, object] = {}
        self.out_of_reach_job: str | None = None   # the promoted job whose room was last so
        # what an idle walk reads (``Fgs.decide``): ``walk_version`` is bumped whenever the free
        # map, the shortest-first queue or a movable tenant (its "tenant" key) changes;
        # ``expiries`` a heap of the minimum-run ends of the tenants inside their minimum
        # run (every running job that may be moved, gangs too); ``idle_walk`` the last walk
        # that did nothing
        self.walk_version = 0
        self.idle_walk: IdleWalk | None = None
        self._keyed: dict[str, KeyedView] = {}   # id -> its latest view and keys
        # FGD's target workload (``Fgs.frag_measure``): every sampled job's request, once
        self.asked: Counter = Counter()     # (GPUs, fraction step) -> jobs seen asking
        self.asked_ids: set[str] = set()    # of the jobs still here (a gone job never returns)
        self.asked_total = 0                # jobs counted into ``asked``
        self.chooser = LeastFragmenting(())
        self.chosen_at = 0                  # how many requests its types were made from
        self._clear()

    def _clear(self) -> None:
        """Empty the waiting queues and what is kept of the tenants (``rebuild``)."""
        self.waiting: dict[str, WaitingJob] = {}   # id -> its entry, every waiting job
        self.to_sample = SortedList()       # ArrivalKey
        self.to_sample_by_fraction = SortedList()   # (fraction, id) of those
        self.shortest_first = SortedList()        # ShortestKey: all others
        self.by_fraction = SortedList()     # (fraction, id) of those
        self.by_util = SortedList()         # (utilisation, id) of those
        self.sized: dict[SizeBucket, SortedList] = {}   # size_bucket -> their keys
        self.promoted = SortedList()        # ArrivalKey: waited past their bound
        self.promotions_due: list[PromotionDue] = []   # heap
        self.at_bound: dict[str, JobView] = {}   # due, but not past the bound yet to the bit
        # heap of those, by when each passes its bound (``WaitClock.passes_at``; some gone)
        self.passing: list[PromotionDue] = []
        # GPU id -> how many running single-GPU jobs hold it (the only jobs consolidation moves)
        self.single_gpu_holders: dict[str, int] = {}
        # job id -> the round's movability, as far as the view decides it (not time)
        self.movability: dict[str, Movability] = {}
        self.expiries: list[MinRunEnd] = []
        self.pushed = 0
        self.walk_version += 1

    def see_request(self, jid: str, k: int, fraction: float) -> None:
        """Count a sampled job's request into the target workload (once per job)."""
        self.asked_ids.add(jid)
        self.asked_total += 1
        self.asked[request_of(k, fraction)] += 1

    def fragmentation_chooser(self) -> LeastFragmenting:
        """The chooser by FGD's measure against the requests seen, its types made again
        once they have grown by ``REFRESH`` since (so not on every new job)."""
        n = self.asked_total
        if n > self.chosen_at and n >= self.chosen_at * (1 + REFRESH):
            self.chooser.types = target_types(self.asked)
            self.chosen_at = n
            self.walk_version += 1   # placements may differ: an idle walk kept is void
        return self.chooser

    def rebuild(self, config: QueueConfig) -> None:
        """Refill the queues from every waiting view, for these settings."""
        self.config = config
        self._clear()
        for jid, v in self.tracker.views.items():
            self.changed(jid, None, v)

    def changed(self, jid: str, old: JobView | None, new: JobView | None) -> None:
        """Bring the queues, the tenants' keys and the indexes' stale GPUs up to date
        with one job's change of view (None: no view on that side)."""
        self.movability.pop(jid, None)
        holds = (old is not None and old.fragments) or (new is not None and new.fragments)
        pair = None
        if holds and self.keys is not None:
            pair = self._keyed_pair(jid, old, new)
        else:
            self._keyed.pop(jid, None)
        moved = self._tenant_changed(jid, new, pair) if holds else False
        holders = self.single_gpu_holders
        for v, d in () if (old is not None and new is not None and old.state is new.state
                           and old.fragments == new.fragments) else ((old, -1), (new, 1)):
            if v is not None and v.num_gpus == 1 and v.state is JobState.RUNNING:
                for f in v.fragments:
                    n = holders.get(f.gpu, 0) + d
                    if n:
                        holders[f.gpu] = n
                    else:
                        del holders[f.gpu]
        if holds and self.indexes:
            differs = {"tenant": moved}   # key name -> whether it changed (asked once)
            for index in self.indexes.values():
                name = index.reads
                d = differs.get(name)
                if d is None:
                    d = differs[name] = self._differs(name, pair)
                if d:
                    for v in (old, new):
                        if v is not None and v.fragments:
                            index.stale.update(f.gpu for f in v.fragments)
        had = self.waiting.pop(jid, None)
        if had is not None:
            key, size = had.queue_key, had.size
            if had.to_sample:
                self.to_sample.remove(key)
                self.to_sample_by_fraction.remove((size.fraction, jid))
            else:
                self.walk_version += 1
                self.shortest_first.remove(key)
                self.by_fraction.remove((size.fraction, jid))
                self.by_util.remove((size.util, jid))
                name = size_bucket(size.fraction, size.util, had.view.num_gpus)
                bucket = self.sized[name]
                bucket.remove(key)
                if not bucket:
                    del self.sized[name]
            self.promoted.discard(ArrivalKey(had.view.submit_time, jid))
            self.at_bound.pop(jid, None)
        config = self.config
        if new is None or new.state not in WAITING or config is None:
            if new is None:
                self.asked_ids.discard(jid)   # it ended: counted once, never seen again
            return
        promotion, rep = config.promotion, config.rep
        cap_s, floor = promotion.max_wait_s, promotion.promote_floor
        if (new.state is JobState.QUEUED and new.sample is None
                and new.predicted_remaining_s is None):
            size = JobSize(math.inf if rep is None else
                           fraction_for(new, rep, config.headroom, config.reserve_mb,
                                        config.sample_default), -1.0)
            key = ArrivalKey(new.submit_time, jid)
            self.to_sample.add(key)
            self.to_sample_by_fraction.add((size.fraction, jid))
            # promoted too (its bound: cap_s, no prediction): a job that cannot get a
            # sampling fragment (a wide one behind newcomers' sampling runs) gets room made
            self._promote_at(jid, new, True, key, size, max(floor(new), cap_s))
            return
        left = remaining_s(new)
        u = new.sample.gpu_util if new.sample is not None else 1.0
        size = JobSize(math.inf if rep is None else
                       fraction_for(new, rep, config.headroom, config.reserve_mb), u)
        key = ShortestKey(math.inf if left is None else left, new.submit_time, jid)
        if jid not in self.asked_ids and size.fraction != math.inf:
            self.see_request(jid, new.num_gpus, size.fraction)
        self.walk_version += 1
        self.shortest_first.add(key)
        self.by_fraction.add((size.fraction, jid))
        self.by_util.add((u, jid))
        name = size_bucket(size.fraction, size.util, new.num_gpus)
        bucket = self.sized.get(name)
        if bucket is None:
            bucket = self.sized[name] = SortedList()
        bucket.add(key)
        bound = max(floor(new), cap_s if left is None
                    else min(cap_s, promotion.max_wait_ratio * left))
        self._promote_at(jid, new, False, key, size, bound)

    @staticmethod
    def _differs(name: str, pair: KeysBeforeAfter | None) -> bool:
        """Whether the tenant's key ``name`` differs between its two views
        (``_keyed_pair``; None: no keys, every change counts; so does an unknown name)."""
        if pair is None:
            return True
        old, new = pair.before, pair.after
        if name not in (new if new is not None else old):
            return True
        return (None if old is None else old[name]) != (None if new is None else new[name])

    def _tenant_changed(self, jid: str, new: JobView | None,
                        pair: KeysBeforeAfter | None) -> bool:
        """Bump ``walk_version`` if what consolidation reads of this tenant changed (and say
        whether it did); keep its minimum run's end if it may be moved, gangs too
        (``pair``: ``_keyed_pair``)."""
        if pair is None:
            self.walk_version += 1
            return True
        was, now = (None if k is None else k["tenant"] for k in pair)
        if was != now:
            self.walk_version += 1
        run = None if pair.after is None else pair.after["run"]
        if run is not None and new.last_start is not None:
            last = new.last_start
            at = last + run - 1e-9 * (1.0 + abs(last) + abs(run))   # early, never late
            self.pushed += 1
            heapq.heappush(self.expiries, MinRunEnd(at, self.pushed, jid, new, last, run))
            views = self.tracker.views
            drop_stale(self.expiries, len(self.holdings.holders),
                       lambda e: views.get(e.job_id) is e.view)
        return was != now

    def next_expiry(self, now: float) -> float:
        """About when (never late) the next tenant that may be moved passes its
        minimum run, of those inside it at ``now`` (inf: none)."""
        heap, views = self.expiries, self.tracker.views
        while heap:
            end = heap[0]
            if views.get(end.job_id) is end.view and not now - end.last_start >= end.min_run:
                return end.at
            heapq.heappop(heap)   # gone, or past it: movable until its view changes
        return math.inf

    def next_movable(self, now: float) -> float | None:
        """When (never early) the next tenant inside its minimum run at ``now`` passes
        it and may be moved (``RoundState.may_move``), or None: none is inside it."""
        if self.next_expiry(now) == math.inf:
            return None
        end = self.expiries[0]
        last, run = end.last_start, end.min_run
        t = last + run
        while t - last < run:   # the first time at which ``now - last >= run`` holds
            t = math.nextafter(t, math.inf)
        return t

    def _promote_at(self, jid: str, new: JobView, to_sample: bool,
                    key: ArrivalKey | ShortestKey, size: JobSize, bound: float) -> None:
        """Keep a waiting job's entry with its wait, and its promotion as a timed event."""
        # it has waited a + max(0, now - b) (total_wait_s); promoted once past bound
        if new.last_wait_start is None and new.last_start is None:
            a, b = 0.0, new.submit_time
        else:
            a = new.waited_s
            b = new.last_wait_start if new.last_wait_start is not None else new.submit_time
        self.waiting[jid] = WaitingJob(new, to_sample, key, size, WaitClock(a, b, bound))
        due = -math.inf if a > bound else b + (bound - a)
        due -= 1e-6 * (1.0 + abs(due)) if due != -math.inf else 0.0   # early, never late
        heapq.heappush(self.promotions_due, PromotionDue(due, jid, new))
        waiting = self.waiting
        drop_stale(self.promotions_due, len(waiting),
                   lambda e: e.job_id in waiting and waiting[e.job_id].view is e.view)

    def next_promotion(self, now: float) -> float | None:
        """About when the next waiting job is promoted (never late), or None.

        A job already due but not past its bound to the bit (``at_bound``) passes
        it at ``b + (bound - a)``: that moment, not ``now`` (a caller that
        wakes a step after ``now`` would otherwise wake at every step until then).
        """
        passing, at_bound = self.passing, self.at_bound
        while passing and at_bound.get(passing[0].job_id) is not passing[0].view:
            heapq.heappop(passing)   # promoted, or that view is gone
        heap, waiting = self.promotions_due, self.waiting
        best = waiting[passing[0].job_id].wait.passes_at() if passing else None
        while heap:
            due = heap[0]
            had = waiting.get(due.job_id)
            if had is not None and had.view is due.view:
                return due.at if best is None else min(best, due.at)
            heapq.heappop(heap)   # that view is gone
        return best

    def promote_until(self, now: float) -> None:
        """Move the jobs whose wait has passed their bound by ``now`` to ``promoted``."""
        heap, waiting, at_bound, passing = (self.promotions_due, self.waiting, self.at_bound,
                                            self.passing)
        while heap and heap[0].at <= now:
            due = heapq.heappop(heap)
            had = waiting.get(due.job_id)
            if had is not None and had.view is due.view:
                at_bound[due.job_id] = due.view
                wait = had.wait   # past it whatever the clock if it waited past it already
                at = -math.inf if wait.waited_s > wait.bound else wait.passes_at()
                heapq.heappush(passing, PromotionDue(at, due.job_id, due.view))
        # only the jobs that pass their bound by about now (a margin over the rounding
        # between ``passes_at`` and the sum below) can be past it: the others stay
        near = now + 1e-9 * (1.0 + abs(now))
        kept = []
        while passing and passing[0].at <= near:
            entry = heapq.heappop(passing)
            jid = entry.job_id
            if at_bound.get(jid) is not entry.view:
                continue   # promoted, or that view is gone
            had = waiting[jid]
            wait = had.wait
            since = wait.since
            if wait.waited_s + (now - since if now > since else 0.0) > wait.bound:
                del at_bound[jid]
                self.promoted.add(ArrivalKey(had.view.submit_time, jid))
            else:
                kept.append(entry)
        for entry in kept:
            heapq.heappush(passing, entry)
        drop_stale(passing, len(at_bound), lambda e: at_bound.get(e.job_id) is e.view)
        self.now = now
