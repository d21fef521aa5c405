"""fgs's policy: its settings, and ``decide``, which runs the phases of a decision in order.

``Fgs`` holds the paper's settings (see the package docstring for what each
phase does), when a waiting job is promoted and a running one may be moved
(``starving``, ``may_be_moved``, ``min_run``), what each memo index reads of a
tenant (``tenant_keys``), the memo's FreeMap kept up to date from the changed
GPUs (``_free_map``), and ``decide``: one round's state (``fit.RoundState``)
and three walks (``order``) placing jobs on it (``best_fit.BestFit``): the
promoted jobs, making room for them (``make_room.MakeRoom``), then the jobs
to sample, then the others shortest remaining first, consolidating for the
first that does not fit (``consolidate.Consolidate``); ``_OnFail`` holds what
a walk does with a job that did not fit. The phases share nothing but the
round's state.

Imports: ``policies`` below fgs and every module of fgs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Sequence

from sortedcontainers import SortedList

from tfgshare import sampling

from .. import movecost
from ..base import Action, ClusterSnapshot, JobState, JobView, Policy
from ..freemap import FreeMap
from ..interference import room_for
from ..placement import GpuUse, one_size
from ..prediction import remaining_s, total_wait_s
from .best_fit import BestFit
from .consolidate import Consolidate
from .fit import RoundState, room_band, sampling_fraction, util_of
from .make_room import MakeRoom
from .memo import FgsMemo
from .order import BANDS, SizedWalk, SmallestLeft
from .records import (FreeMapKey, HolderKey, IdleWalk, MemoFreeMap, MoveKey, PromotionSettings,
                      QueueConfig, RoomSettings, WalkInputs)
from .room_index import finish_in

__all__ = ["Fgs", "FgsMemo", "util_of"]


@dataclass
class Fgs(Policy):
    """Sampling, shortest-remaining-first with aging, best-fit fragments, suspend/migrate."""

    name: ClassVar[str] = "fgs"
    # no periodic call needed: a caller wakes it at its own timed events (``wake_at``),
    # as the live coordinator's one-second tick would find them
    tick_s: ClassVar[float | None] = None
    # skip work whose answer bounds kept in the memo already give: making room
    # from each GPU's clear cost kept across rounds (room_index.ClearIndex) or,
    # once the round has acted, not at all when it would do nothing
    # (room_index.RoomIndex), consolidation tries on GPUs
    # with no movable tenant (consolidate), size buckets of waiting jobs
    # bigger than any free room (order.SizedWalk), and a shortest-first walk
    # that did nothing while nothing it reads has changed (``decide``'s idle walk);
    # off only to test that
    shortcuts: ClassVar[bool] = True
    # steps measured by the sampling phase after its warm-up; read by the
    # simulator. The live runner's (tfgshare.sampling), so both sides measure alike.
    sample_steps: int = sampling.SAMPLE_STEPS
    # Where a job that requests no fraction runs its sampling phase. A sampling
    # fragment must hold the job's true peak (unknown until sampled: a fragment
    # too small fails at start-up) and its neighbours slow the measured step
    # time (a prediction off by their slowdown). The fragment is
    # sample_memory_mb, which leaves little room beside it. With
    # sample_on_idle the job samples on an idle GPU if one is free, else on the
    # least-loaded GPU (most utilisation room, then tightest fit) with room for
    # the fragment; without it, on the tightest GPU with room (best fit). Off by
    # default: on a 10k-job Philly replay it cut the mean prediction error only
    # from 27 % to 21 %, and it spends idle GPUs that wide (gang) jobs wait for
    # (a promoted cluster-wide job waited past the bound in tests/test_sim_properties).
    sample_on_idle: bool = False
    # sampling fragment in MB when no GPU is idle (clipped to the GPU less its
    # reserve). 11,800 MB holds the largest of the paper's four models in our
    # profiles (vgg_16 at batch 64, about 11,500 MB) and still fits a 12 GB
    # GPU (12,288 MB less a 300 MB reserve = 11,988 MB); a fraction (0.5 was
    # 6 GB on Philly's 12 GB GPUs) failed thousands of starts. None: use
    # sample_fraction instead.
    sample_memory_mb: float | None = 11800.0
    # sampling fragment as a fraction of the GPU, only when sample_memory_mb is None
    sample_fraction: float = 0.5
    # safety margin over the sampled peak memory (allocator rounding, later
    # peaks the first steps did not reach)
    headroom: float = 0.10
    # promote a waiting job once it has waited more than this times its
    # predicted remaining time (bounds its slowdown near 1 + ratio)
    max_wait_ratio: float = 2.0
    # ... or more than this many seconds in all (bounds the wait of large
    # jobs). A day: Philly's long jobs run for days, and on an overloaded 64-GPU
    # replay a 4 h bound promoted most jobs, costing 15-20 % mean JCT
    max_wait_s: float = 24 * 3600.0
    # ... but never before this many seconds of waiting, so short jobs stay in
    # shortest-first order instead of being promoted after seconds. With
    # move_share, only until the job's move cost is measured; then its minimum
    # run (``promote_floor``)
    promote_floor_s: float = 600.0
    # most jobs sharing one GPU
    max_cotenants: int = 4
    # do not add a tenant if any tenant's predicted slowdown would pass this
    slowdown_cap: float = 1.5
    # per-extra-tenant overhead used by the slowdown model
    interference_overhead: float = 0.05
    # no suspend or migration within this many seconds of a start or resume:
    # a move costs a checkpoint and a restore (tens of seconds), so 5 min keeps
    # that cost near 10 % of a run segment at worst. With move_share, only until
    # the job's move cost is measured (``min_run``)
    min_run_s: float = 300.0
    # a job's minimum run is its measured move cost (JobView.move_cost_s) over
    # this share, so a move costs it at most this share of the run before it;
    # None: min_run_s and promote_floor_s for every job
    move_share: float | None = movecost.MOVE_SHARE
    # migrate tenants to consolidate fragments for a job that does not fit
    defrag: bool = True
    # most suspends and migrations issued in one decision
    max_moves: int = 8
    # hold GPUs idle for a promoted job only if they can be cleared within this
    # many seconds; a farther reservation would idle capacity for long, and the
    # job still goes first whenever room frees (half an hour: a few times
    # min_run_s, short against the hours-long jobs that get promoted)
    reserve_horizon_s: float = 1800.0
    # how many promoted jobs (the longest waiting) go first and make room or
    # hold a reservation in one decision: one keeps each decision cheap (a
    # scan of all GPUs) and, under overload, keeps the others in shortest-first
    # order instead of degrading to FIFO; each promoted job gets its turn
    max_reservations: int = 1
    # choose between the places that fit by FGD's fragmentation measure (Weng et al.,
    # ATC '23; policies.frag_choice) against the requests of the jobs sampled so far,
    # the tightest place on a tie; off: the tightest place that fits
    frag_measure: bool = False

    def __post_init__(self) -> None:
        checks = [
            (self.sample_steps >= 1, "sample_steps must be >= 1"),
            (0 < self.sample_fraction <= 1, "sample_fraction must be in (0, 1]"),
            (self.sample_memory_mb is None or self.sample_memory_mb > 0,
             "sample_memory_mb must be > 0 or None"),
            (self.headroom >= 0, "headroom must be >= 0"),
            (self.max_wait_ratio > 0, "max_wait_ratio must be > 0"),
            (self.max_wait_s > 0, "max_wait_s must be > 0"),
            (self.promote_floor_s >= 0, "promote_floor_s must be >= 0"),
            (self.max_cotenants >= 1, "max_cotenants must be >= 1"),
            (self.slowdown_cap >= 1, "slowdown_cap must be >= 1"),
            (self.interference_overhead >= 0, "interference_overhead must be >= 0"),
            (self.min_run_s >= 0, "min_run_s must be >= 0"),
            (self.move_share is None or self.move_share > 0, "move_share must be > 0 or None"),
            (self.max_moves >= 0, "max_moves must be >= 0"),
            (self.max_reservations >= 0, "max_reservations must be >= 0"),
            (self.reserve_horizon_s >= 0, "reserve_horizon_s must be >= 0"),
        ]
        bad = [msg for ok, msg in checks if not ok]
        if bad:
            raise ValueError("fgs: " + "; ".join(bad))

    def min_run(self, job: JobView) -> float:
        """Seconds the job runs after a start before it may be moved (from its move cost)."""
        if self.move_share is None:
            return self.min_run_s
        return movecost.min_run_s(job.move_cost_s, self.min_run_s, self.move_share)

    def promote_floor(self, job: JobView) -> float:
        """Seconds the job waits before it may be promoted (from its move cost)."""
        if self.move_share is None:
            return self.promote_floor_s
        return movecost.promote_floor_s(job.move_cost_s, self.promote_floor_s, self.move_share)

    def room_key(self) -> RoomSettings:
        """The settings a tenant's readiness for a promoted job depends on (``make_room``)."""
        return RoomSettings(self.reserve_horizon_s, self.min_run_s, self.move_share,
                            self.promote_floor_s, self.max_wait_s, self.max_wait_ratio)

    def starving(self, job: JobView, now: float) -> bool:
        """Whether a waiting job has waited past its bound and is promoted."""
        return self._overdue(total_wait_s(job, now), remaining_s(job), self.promote_floor(job))

    def promotion_wait_s(self, job: JobView, left_s: float) -> float:
        """The total wait after which ``job`` is promoted, were its predicted
        remaining time ``left_s`` (what ``promoted`` checks)."""
        return max(self.promote_floor(job), min(self.max_wait_s, self.max_wait_ratio * left_s))

    def may_be_moved(self, job: JobView) -> bool:
        """Whether a job holding GPUs may ever be moved for another: it is running and
        did not wait past its own bound (a promoted job is never moved for others)."""
        return job.state is JobState.RUNNING and not self._overdue(
            job.waited_s, remaining_s(job), self.promote_floor(job))

    def _overdue(self, waited: float, left: float | None, floor: float) -> bool:
        """Whether a job that waited ``waited`` s, ``left`` s from its end, is past its bound."""
        if waited <= floor:
            return False
        if waited > self.max_wait_s:
            return True
        return left is not None and waited > self.max_wait_ratio * left

    def _free_map(self, cluster: ClusterSnapshot, memo: "FgsMemo") -> FreeMap:
        """A FreeMap of the cluster as the memo's holders hold it, to plan this round on.

        Kept in the memo and updated from the GPUs whose tenants changed (their
        sums are exact, see ``jobset.Holdings``), so a round costs O(changed
        holders) instead of a rebuild over every GPU in use; a fresh memo builds
        the same map. The changed GPUs are the memo's ``unplanned``: every GPU
        whose tenants changed since the map was last updated, also in rounds
        that returned before planning (nothing waited, or the round failed).
        """
        key = FreeMapKey(cluster.down_nodes, cluster.reserve_mb, self.max_cotenants,
                         self.slowdown_cap, self.interference_overhead)
        use = memo.holdings.use
        cache = memo.free_map
        dirty = memo.unplanned
        memo.unplanned = set()   # taken now: updated below, or the map is rebuilt from ``use``
        hit = cache is not None and cache.gpus is cluster.gpus and cache.key == key
        if dirty or not hit:
            memo.walk_version += 1   # the map may differ: an idle walk kept is void
        if hit:
            base = cache.free_map
            base.follow(dirty, use)
            base.total_free()   # worked out once per change, kept by the copies
            base.chooser = memo.fragmentation_chooser() if self.frag_measure else None
            return base.copy()
        cap, overhead = self.slowdown_cap, self.interference_overhead

        def band(u: GpuUse) -> int:
            return room_band(room_for(u.tenants, u.util, cap, overhead))

        base = FreeMap(cluster, use=use, max_tenants=self.max_cotenants, band=band,
                       empty_band=BANDS, rank_used=True)
        memo.free_map = MemoFreeMap(key, cluster.gpus, base)
        base.total_free()
        base.chooser = memo.fragmentation_chooser() if self.frag_measure else None
        return base.copy()

    def new_memo(self) -> "FgsMemo":
        """An empty memo (see ``policies.memo``)."""
        return FgsMemo()

    def wake_at(self, now: float, memo: "FgsMemo") -> float | None:
        """When a decision may next change with the clock alone (None: not before some
        other event): a waiting job passes its bound and is promoted, or, while jobs
        wait, a running job passes its minimum run and may be moved for them."""
        times = [memo.next_promotion(now)]
        if memo.to_sample or memo.shortest_first:
            times.append(memo.next_movable(now))
        return min((t for t in times if t is not None), default=None)

    def decide(self, now: float, cluster: ClusterSnapshot, jobs: Sequence[JobView],
               memo: "FgsMemo | None" = None) -> list[Action]:
        """Promoted jobs, then sampling, then shortest remaining first; make room as needed."""
        memo = self.new_memo() if memo is None else memo
        memo.use_keys(self.tenant_keys, self.room_key())
        # kept until the FreeMap takes them: a round that plans nothing must not lose them
        memo.unplanned |= memo.sync(jobs)
        rep = one_size(cluster)
        # the floor is per job (its move cost): the settings behind it are in the key too
        config = QueueConfig(
            PromotionSettings(self.max_wait_ratio, self.max_wait_s, self.promote_floor,
                              self.promote_floor_s, self.min_run_s, self.move_share),
            rep, self.headroom, cluster.reserve_mb,
            None if rep is None else sampling_fraction(self, rep))
        if memo.config != config or now < memo.now:
            memo.rebuild(config)
        memo.promote_until(now)
        if not (memo.to_sample or memo.shortest_first):
            return []
        state = RoundState(self, now, cluster, jobs, self._free_map(cluster, memo), memo)
        best_fit = BestFit(state)
        # only the longest waiting promoted jobs jump the queue and make room;
        # the others keep their shortest-first place until their turn comes
        first = [k.job_id for k in memo.promoted.islice(0, self.max_reservations)]
        on_fail = _OnFail(state, self.max_reservations, self.defrag)
        self._walk_promoted(best_fit, memo, first, on_fail)
        self._walk_to_sample(best_fit, memo, set(first))
        self._walk_shortest_first(now, best_fit, memo, first, on_fail)
        return state.actions

    def _walk_promoted(self, best_fit: BestFit, memo: FgsMemo, first: list[str],
                       on_fail: "_OnFail") -> None:
        """The first walk: the promoted jobs ``first``, each placed or room made for it (a job
        not sampled yet: for its sampling phase)."""
        waiting = memo.waiting
        promoted = [(waiting[jid].view, waiting[jid].size) for jid in first
                    if not waiting[jid].to_sample]
        promoted_sample = [(waiting[jid].view, waiting[jid].size) for jid in first
                           if waiting[jid].to_sample]
        best_fit.fill(promoted,
                      SmallestLeft(SortedList((sz.fraction, j.id) for j, sz in promoted),
                                   SortedList((sz.util, j.id) for j, sz in promoted), set()),
                      on_fail=on_fail.make_room)
        if promoted_sample:
            best_fit.fill(promoted_sample,
                          SmallestLeft(SortedList((sz.fraction, j.id)
                                                  for j, sz in promoted_sample), None, set()),
                          sample_only=True, on_fail=on_fail.make_room_to_sample)

    def _walk_to_sample(self, best_fit: BestFit, memo: FgsMemo, skip: set[str]) -> None:
        """The second walk: the jobs still to sample, by arrival, each on a sampling fragment."""
        waiting = memo.waiting
        to_sample = ((waiting[k.job_id].view, waiting[k.job_id].size) for k in memo.to_sample
                     if k.job_id not in skip)
        best_fit.fill(to_sample, SmallestLeft(memo.to_sample_by_fraction, None, set(skip)),
                      sample_only=True)

    def _walk_shortest_first(self, now: float, best_fit: BestFit, memo: FgsMemo, first: list[str],
                             on_fail: "_OnFail") -> None:
        """The third walk: the other waiting jobs, shortest predicted remaining time first, each
        on best-fit fragments; consolidation for the first that does not fit."""
        skip = set(first)
        if self.shortcuts:   # the same order, by size bucket (fill passes over big ones whole)
            walk = SizedWalk(memo, skip)
        else:
            waiting = memo.waiting
            walk = ((waiting[k.job_id].view, waiting[k.job_id].size)
                    for k in memo.shortest_first if k.job_id not in skip)
        # A walk of the shortest-first queue that placed nothing and whose
        # consolidation failed does so again while nothing it reads has changed:
        # the round's map (no action yet, the same reservations), the queue, the
        # promoted jobs it leaves out, what consolidation reads of each tenant
        # (``memo.walk_version``) and which tenants are past their minimum run (none
        # passes it before ``memo.next_expiry``). The walk reads no clock but that.
        # The policy is in the key for the settings the memo's config leaves out
        # (``defrag``, ``max_moves``, ...).
        inputs = None
        state = best_fit.round
        if self.shortcuts and not state.actions:
            inputs = WalkInputs(memo.walk_version, frozenset(state.free.closed), tuple(first),
                                self)
            idle = memo.idle_walk
            if idle is not None and idle.key == inputs and now < idle.until:
                return
        best_fit.fill(walk, SmallestLeft(memo.by_fraction, memo.by_util, set(skip)),
                      on_fail=on_fail.consolidate)
        memo.idle_walk = (IdleWalk(inputs, memo.next_expiry(now))
                          if inputs and not state.actions else None)

    def tenant_keys(self, job: JobView) -> dict[str, MoveKey | HolderKey | float | None]:
        """What each reader kept in the memo reads of a job holding GPUs, by name
        (``FgsMemo.keys``): a change of a name's key makes its GPUs stale there.

        "tenant" (consolidation, ``MovableIndex``; None for a job it never moves):
        fragments, last start, utilisation, whether it may move and its minimum run.
        "reach" (``RoomIndex``) and "clear" (``ClearIndex``): fragments, gang size,
        state, utilisation, whether it may move, last start, minimum run, and for a
        running job whose end ``ready_in`` reads (one that may not move, or a gang
        that may be moved only for a wider one), whether it ends within
        ``reserve_horizon_s`` ("reach") or when ("clear": ``finish_in``).
        "run" (the memo's minimum-run ends, ``FgsMemo.next_expiry``): the minimum run
        of a running job that may be moved, gangs too (None: it may not).
        """
        running = job.state is JobState.RUNNING
        may = self.may_be_moved(job)
        run = self.min_run(job) if may else None
        util = util_of(job)
        fin = (finish_in(job, self.reserve_horizon_s)
               if running and (not may or job.num_gpus > 1) else None)
        frags, k, last = job.fragments, job.num_gpus, job.last_start
        return {"tenant": (MoveKey(frags, last, util, may, run)
                           if running and k == 1 else None),
                "reach": HolderKey(frags, k, running, util, may, last, run,
                                   fin is not None and fin != math.inf),
                "clear": HolderKey(frags, k, running, util, may, last, run, fin),
                "run": run}


class _OnFail:
    """What a walk does with a job that did not fit (its ``on_fail``); each hook says
    whether it may still change the cluster for later jobs of the walk."""

    def __init__(self, state: RoundState, reservations: int, defrag: bool) -> None:
        self.up = state.up
        self.room = MakeRoom(state)
        self.consolidation = Consolidate(state)
        self.reservations = reservations   # promoted jobs left to make room for
        self.defrag = defrag               # consolidation not tried yet

    def make_room(self, job: JobView, sample_only: bool = False) -> bool:
        """A promoted job: make room for it while reservations are left."""
        if self.reservations > 0 and job.num_gpus <= self.up:
            self.reservations -= 1
            self.room.make_room(job, sample_only)
        return self.reservations > 0

    def make_room_to_sample(self, job: JobView) -> bool:
        """A promoted job not sampled yet: make room for its sampling phase."""
        return self.make_room(job, True)

    def consolidate(self, job: JobView) -> bool:
        """The first shortest-first job that did not fit: consolidate for it, once."""
        if self.defrag and job.num_gpus <= self.up:
            self.defrag = False
            self.consolidation.consolidate(job)
        return self.defrag
