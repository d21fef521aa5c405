"""fgs: the paper's fine-grained GPU sharing scheduler.

After Chung, Tong and Chen, "A fine-grained GPU sharing and job scheduling for
deep learning jobs on the cloud", J. Supercomputing 81(2), 2025, as read in
docs (PAPER.md). Each decision, in order:

1. **Promoted jobs** (waited past a bound, see ``starving``): the
   ``max_reservations`` longest waiting go first (the others keep their
   shortest-first place until their turn). One that cannot be placed makes room: small running jobs (no more
   GPUs than it, past their ``min_run``) on the GPUs that free soonest are moved
   elsewhere (migrate) or suspended. If those jobs are still inside their
   ``min_run``, or bigger jobs must finish first, the GPUs are reserved
   (nothing else starts on them this round) if they free within
   ``reserve_horizon_s``.
2. **Sampling**: a new job (no sample, no prediction) runs its sampling phase
   (``sample_only``) on a best-fit ``sample_memory_mb`` fragment, or with
   ``sample_on_idle`` on an idle GPU, else the least-loaded one.
3. **Shortest predicted remaining time first** for the other waiting jobs, each
   on the smallest free fragment that fits (best fit) sized from its sampled
   peak memory plus ``headroom``, with at most ``max_cotenants`` jobs on a GPU
   and no tenant's predicted slowdown (the ``interference`` model) past
   ``slowdown_cap``. Multi-GPU jobs are gang-placed on one node if possible.
4. **Consolidation** (``defrag``): when the first job that does not fit would
   fit in the total free capacity, tenants of a nearly fitting GPU are
   migrated to other GPUs' free room to clear a fragment for it.

Running jobs are never preempted for a shorter job, only for promoted jobs
and consolidation, and never within their ``min_run`` of their last start:
their measured move cost over ``move_share`` (``policies.movecost``), or
``min_run_s`` before it is measured.
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass
from typing import Callable, ClassVar, Collection, Iterable, Sequence

from sortedcontainers import SortedList

from tfgshare import sampling

from . import movecost
from .base import (Action, ClusterSnapshot, JobState, JobView, Migrate, Start,
                   Suspend)
from .interference import room_for
from .memo import Memo
from .placement import (EPS, FreeMap, GpuUse, exclusive_fraction, fraction_for, one_size,
                        reserve_fraction, to_fragments)
from .prediction import remaining_s, total_wait_s
from .queueing import WAITING, arrival_key


class FgsMemo(Memo):
    """fgs's state between rounds: the tenants, a plan-ready FreeMap and the waiting queues.

    Waiting jobs are kept in the orders fgs walks them: jobs to sample by
    arrival, the others by predicted remaining time, the promoted ones by
    arrival; each job's promotion is a timed event at the moment its wait
    passes its bound. Sizes are kept sorted too, so a round can tell in
    O(log n) that none of the jobs left could fit anywhere.
    """

    def reset(self) -> None:
        self.free: tuple | None = None      # (key, GPU tuple, FreeMap as the holders hold it)
        self.unplanned: set[str] = set()    # GPUs changed since ``free`` was last brought up to date
        self.config: tuple | None = None    # the settings and GPU size the queues are for
        self.now = -math.inf                # the latest decision time seen
        self._clear()

    def _clear(self) -> None:
        self.info: dict[str, tuple] = {}    # id -> (view, kind, order key, size, wait)
        self.to_sample = SortedList()       # (submit, id)
        self.sample_fs = SortedList()       # (fraction, id) of those
        self.ordinary = SortedList()        # (remaining or inf, submit, id): all others
        self.fs = SortedList()              # (fraction, id) of those
        self.us = SortedList()              # (utilisation, id) of those
        self.promoted = SortedList()        # (submit, id): waited past their bound
        self.pending: list = []             # heap (about when promoted, id, view)
        self.near: dict[str, JobView] = {}  # due, but not past the bound yet to the bit

    def rebuild(self, config: tuple) -> None:
        """Refill the queues from every waiting view, for these settings."""
        self.config = config
        self._clear()
        for jid, v in self.tracker.views.items():
            self.changed(jid, None, v)

    def changed(self, jid: str, old: JobView | None, new: JobView | None) -> None:
        had = self.info.pop(jid, None)
        if had is not None:
            kind, key, size = had[1], had[2], had[3]
            if kind == 0:
                self.to_sample.remove(key)
                self.sample_fs.remove((size[0], jid))
            else:
                self.ordinary.remove(key)
                self.fs.remove((size[0], jid))
                self.us.remove((size[1], jid))
                self.promoted.discard((had[0].submit_time, jid))
                self.near.pop(jid, None)
        if new is None or new.state not in WAITING or self.config is None:
            return
        (ratio, cap_s, floor, *_), rep, headroom, reserve, sample_default = self.config
        if (new.state is JobState.QUEUED and new.sample is None
                and new.predicted_remaining_s is None):
            size = (math.inf if rep is None else
                    fraction_for(new, rep, headroom, reserve, sample_default), -1.0)
            key = (new.submit_time, jid)
            self.to_sample.add(key)
            self.sample_fs.add((size[0], jid))
            self.info[jid] = (new, 0, key, size, None)
            return
        left = remaining_s(new)
        u = new.sample.gpu_util if new.sample is not None else 1.0
        size = (math.inf if rep is None else fraction_for(new, rep, headroom, reserve), u)
        key = (math.inf if left is None else left, new.submit_time, jid)
        self.ordinary.add(key)
        self.fs.add((size[0], jid))
        self.us.add((u, jid))
        # it has waited a + max(0, now - b) (total_wait_s); promoted once past bound
        if new.last_wait_start is None and new.last_start is None:
            a, b = 0.0, new.submit_time
        else:
            a = new.waited_s
            b = new.last_wait_start if new.last_wait_start is not None else new.submit_time
        bound = max(floor(new), cap_s if left is None else min(cap_s, ratio * left))
        self.info[jid] = (new, 1, key, size, (a, b, bound))
        due = -math.inf if a > bound else b + (bound - a)
        due -= 1e-6 * (1.0 + abs(due)) if due != -math.inf else 0.0   # early, never late
        heapq.heappush(self.pending, (due, jid, new))

    def next_promotion(self, now: float) -> float | None:
        """About when the next waiting job is promoted (never late), or None."""
        if self.near:
            return now
        pending, info = self.pending, self.info
        while pending:
            due, jid, view = pending[0]
            had = info.get(jid)
            if had is not None and had[0] is view:
                return due
            heapq.heappop(pending)   # that view is gone
        return None

    def promote_until(self, now: float) -> None:
        """Move the jobs whose wait has passed their bound by ``now`` to ``promoted``."""
        pending, info = self.pending, self.info
        while pending and pending[0][0] <= now:
            _, jid, view = heapq.heappop(pending)
            had = info.get(jid)
            if had is not None and had[0] is view:
                self.near[jid] = view
        for jid in list(self.near):
            a, b, bound = info[jid][4]
            if a + (now - b if now > b else 0.0) > bound:
                del self.near[jid]
                self.promoted.add((info[jid][0].submit_time, jid))
        self.now = now


class _Rest:
    """The smallest fraction and utilisation among a walk's jobs not passed yet.

    The walk calls ``passed(id)`` for each job it reaches; the answer is worked
    out again only when one of the two smallest jobs was passed.
    """

    def __init__(self, fs: SortedList, us: SortedList | None, gone: set[str]):
        self.fs, self.us, self.gone = fs, us, gone
        self.i = self.j = 0
        self._known: tuple[float, float] | None = None
        self._ids: tuple[str | None, str | None] = (None, None)

    def passed(self, jid: str) -> None:
        self.gone.add(jid)
        if jid in self._ids:
            self._known = None

    def smallest(self) -> tuple[float, float]:
        if self._known is not None:
            return self._known
        fs, us, gone = self.fs, self.us, self.gone
        while self.i < len(fs) and fs[self.i][1] in gone:
            self.i += 1
        f, fid = fs[self.i] if self.i < len(fs) else (math.inf, None)
        if us is None:   # sampling: no utilisation check
            self._known, self._ids = (f, -1.0 if fid is not None else math.inf), (fid, None)
            return self._known
        while self.j < len(us) and us[self.j][1] in gone:
            self.j += 1
        u, uid = us[self.j] if self.j < len(us) else (math.inf, None)
        self._known, self._ids = (f, u), (fid, uid)
        return self._known


BANDS = 20   # steps of utilisation room by which GPUs are indexed for search
CONSOLIDATE_TRIES = 8   # nearly fitting GPUs a consolidation tries to clear


@dataclass
class Fgs:
    """Sampling, shortest-remaining-first with aging, best-fit fragments, suspend/migrate."""

    name: ClassVar[str] = "fgs"
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

    def starving(self, job: JobView, now: float) -> bool:
        """Whether a waiting job has waited past its bound and is promoted."""
        return self._overdue(total_wait_s(job, now), remaining_s(job), self.promote_floor(job))

    def _overdue(self, waited: float, left: float | None, floor: float) -> bool:
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
        key = (cluster.down_nodes, cluster.reserve_mb, self.max_cotenants,
               self.slowdown_cap, self.interference_overhead)
        use = memo.holdings.use
        cache = memo.free
        dirty = memo.unplanned
        memo.unplanned = set()   # taken now: updated below, or the map is rebuilt from ``use``
        if cache is not None and cache[1] is cluster.gpus and cache[0] == key:
            base = cache[2]
            for gid in dirty:
                if gid in base.gpus:
                    base.set_use(gid, use.get(gid))
                elif gid in use:   # on a down node: not planned on
                    base.use[gid] = use[gid]
                else:
                    base.use.pop(gid, None)
            base.total_free()   # worked out once per change, kept by the copies
            return base.copy()
        cap, overhead = self.slowdown_cap, self.interference_overhead

        def band(u: GpuUse) -> int:
            room = room_for(u.tenants, u.util, cap, overhead)
            return -1 if room < 0 else (BANDS if room >= 1.0 else int(room * BANDS))

        base = FreeMap(cluster, use=use, max_tenants=self.max_cotenants, band=band,
                       empty_band=BANDS)
        memo.free = (key, cluster.gpus, base)
        base.total_free()
        return base.copy()

    def new_memo(self) -> "FgsMemo":
        """An empty memo (see ``policies.memo``)."""
        return FgsMemo()

    def wake_at(self, now: float, memo: "FgsMemo") -> float | None:
        """When the next waiting job passes its bound and is promoted (None: no such job)."""
        return memo.next_promotion(now)

    def decide(self, now: float, cluster: ClusterSnapshot, jobs: Sequence[JobView],
               memo: "FgsMemo | None" = None) -> list[Action]:
        """Promoted jobs, then sampling, then shortest remaining first; make room as needed."""
        memo = self.new_memo() if memo is None else memo
        # kept until the FreeMap takes them: a round that plans nothing must not lose them
        memo.unplanned |= memo.sync(jobs)
        rep = one_size(cluster)
        # the floor is per job (its move cost): the settings behind it are in the key too
        config = ((self.max_wait_ratio, self.max_wait_s, self.promote_floor,
                   self.promote_floor_s, self.min_run_s, self.move_share), rep,
                  self.headroom, cluster.reserve_mb,
                  None if rep is None else _sample_default(self, rep))
        if memo.config != config or now < memo.now:
            memo.rebuild(config)
        memo.promote_until(now)
        if not (memo.to_sample or memo.ordinary):
            return []
        r = _Round(self, now, cluster, jobs, self._free_map(cluster, memo), memo)
        info = memo.info
        # only the longest waiting promoted jobs jump the queue and make room;
        # the others keep their shortest-first place until their turn comes
        first = [k[1] for k in memo.promoted.islice(0, self.max_reservations)]
        promoted = [(info[jid][0], info[jid][3]) for jid in first]
        to_sample = ((info[k[1]][0], info[k[1]][3]) for k in memo.to_sample)
        skip = set(first)
        ordinary = ((info[k[2]][0], info[k[2]][3]) for k in memo.ordinary if k[2] not in skip)
        reservations = self.max_reservations
        defrag = self.defrag

        def make_room(job: JobView) -> bool:
            nonlocal reservations
            if reservations > 0 and job.num_gpus <= r.up:
                reservations -= 1
                r.make_room(job)
            return reservations > 0

        def consolidate(job: JobView) -> bool:
            nonlocal defrag
            if defrag and job.num_gpus <= r.up:
                defrag = False
                r.consolidate(job)
            return defrag

        r.fill(promoted, _Rest(SortedList((sz[0], j.id) for j, sz in promoted),
                               SortedList((sz[1], j.id) for j, sz in promoted), set()),
               on_fail=make_room)
        r.fill(to_sample, _Rest(memo.sample_fs, None, set()), sample_only=True)
        r.fill(ordinary, _Rest(memo.fs, memo.us, set(skip)), on_fail=consolidate)
        return r.actions


class _Round:
    """The state of one ``decide`` call: free room, tenants, and actions so far."""

    def __init__(self, pol: Fgs, now: float, cluster: ClusterSnapshot,
                 jobs: Sequence[JobView], free: FreeMap | None = None,
                 memo: "FgsMemo | None" = None):
        self.pol = pol
        self.memo = memo if memo is not None else FgsMemo()
        self.now = now
        self.cluster = cluster
        self.reserve = cluster.reserve_mb
        self.jobs = jobs
        self._holders: dict[str, list[JobView]] | None = None
        self._fits_memo: tuple[tuple, bool] | None = None   # last fits_somewhere answer
        self.free = free if free is not None else FreeMap(
            cluster, jobs, max_tenants=pol.max_cotenants, band=self.band, empty_band=BANDS)
        self.up = len(self.free.gpus)
        self.moves_left = pol.max_moves
        # (gang size, sampling) -> (fraction, utilisation) that found no room
        # since the last placement; only kept when all GPUs are one size
        self.failed: dict[tuple[int, bool], list[tuple[float, float]]] = {}
        self.rep = next(iter(self.free.gpus.values())) if len(self.free.sizes) == 1 else None
        self.actions: list[Action] = []
        self.acted: set[str] = set()
        # per round, actions apart: (job id, gang size) -> may move now / ever;
        # gang size -> ready_in of every holder (holders and now are fixed in a round)
        self._movable: dict[tuple[str, int], tuple[bool, bool]] = {}
        self._ready: dict[int, dict[str, float]] = {}

    # ---- fitting ---------------------------------------------------------

    def need(self, job: JobView, sample_only: bool = False):
        """The job's fraction as a function of the GPU."""
        reserve, headroom = self.reserve, self.pol.headroom
        if sample_only:
            return lambda g: fraction_for(job, g, headroom, reserve, self.sample_default(g))
        return lambda g: fraction_for(job, g, headroom, reserve)

    def sample_default(self, gpu) -> float:
        """The sampling fragment on this GPU for a job that requests none (not idle)."""
        return _sample_default(self.pol, gpu)

    def place_sample(self, job: JobView) -> list[tuple[str, float]] | None:
        """Fragments for a sampling phase: alone on idle GPUs, else on the least loaded."""
        k = job.num_gpus
        if self.pol.sample_on_idle:
            reserve = self.reserve
            need = self.need(job, True)
            # only an idle GPU has the whole GPU less one reserve free
            got = self.free.gang_place(k, lambda g: exclusive_fraction(g, reserve))
            if got is not None:
                return [(gid, need(self.free.gpus[gid])) for gid, _ in got]
            f = need(self.rep) if self.rep is not None else 0.0
            for band in range(BANDS, -1, -1):   # most utilisation room first
                if self.free.max_free(band) + EPS < f:
                    continue
                got = self.free.gang_place(k, need, min_band=band)
                if got is not None:
                    return got
            return self.free.gang_place(k, need)
        return self.free.gang_place(k, self.need(job, True))

    @property
    def holders(self) -> dict[str, list[JobView]]:
        """GPU id -> the jobs holding it at the start of this round (built when first asked)."""
        if self._holders is None:   # the memo's, kept up to date from the changed jobs
            self._holders = self.memo.holdings.by_gpu()
        return self._holders

    def calm(self, gid: str, util: float, without: Collection[JobView] = ()) -> bool:
        """Whether one more tenant of this utilisation keeps every tenant under the cap.

        ``without``: tenants taken as gone.
        """
        use = self.free.use.get(gid)
        if use is None:
            return True
        n, total = use.tenants, use.util
        for h in without:
            n -= 1
            total -= util_of(h)
        if n <= 0:
            return True
        return util <= room_for(n, total, self.pol.slowdown_cap,
                                self.pol.interference_overhead) + EPS

    def room(self, gid: str, f: float, util: float) -> bool:
        """Whether ``gid`` could take one more tenant of fraction ``f`` and this utilisation."""
        return (self.free.free(gid) >= f - EPS and gid not in self.free.closed
                and self.free.tenants(gid) < self.pol.max_cotenants and self.calm(gid, util))

    def util_room(self, gid: str) -> float:
        """The largest utilisation one more tenant of ``gid`` may have (-1: none)."""
        use = self.free.use.get(gid)
        if use is None:
            return 1.0
        return room_for(use.tenants, use.util, self.pol.slowdown_cap,
                        self.pol.interference_overhead)

    def band(self, use: GpuUse) -> int:
        """A GPU's utilisation room in steps of 1/BANDS (-1: no room), from its tenants."""
        room = room_for(use.tenants, use.util, self.pol.slowdown_cap,
                        self.pol.interference_overhead)
        return -1 if room < 0 else (BANDS if room >= 1.0 else int(room * BANDS))

    def _take(self, job_id: str, util: float, placed: list[tuple[str, float]]) -> None:
        self.free.take(placed, util)

    def _release(self, job: JobView) -> None:
        self.free.release(job.fragments, util_of(job))

    def fits_somewhere(self, f: float, u: float) -> bool:
        """Whether some open GPU has room ``f`` for a tenant of utilisation ``u``."""
        if f == math.inf or f > self.free.max_free() + EPS:
            return False
        query = (self.free.version, f, u)
        if self._fits_memo is None or self._fits_memo[0] != query:
            found = self._search(1, f, None if u < 0 else u) is not None
            self._fits_memo = (query, found)
        return self._fits_memo[1]

    def _search(self, k: int, need, u: float | None):
        """Best-fit fragments for ``k`` GPUs of this need and utilisation (None: any)."""
        if u is None:
            return self.free.gang_place(k, need)
        u = max(0.0, u)
        return self.free.gang_place(k, need, lambda gid: u <= self.util_room(gid) + EPS,
                                    min_band=min(BANDS, int(u * BANDS)))

    def fill(self, jobs: Iterable[tuple[JobView, tuple[float, float]]], rest: _Rest,
             sample_only: bool = False,
             on_fail: Callable[[JobView], bool] | None = None) -> None:
        """Place (job, size) pairs in this order; stop once none of the rest could fit anywhere.

        ``rest`` knows the smallest size among the jobs not yet passed.
        ``on_fail(job)`` runs for a job that did not fit and says whether it
        may still change the cluster for later jobs (then the scan goes on).
        """
        if self.rep is None:   # GPU sizes differ: no cheap checks
            for job, _ in jobs:
                if not self.place(job, sample_only) and on_fail is not None:
                    on_fail(job)
            return
        free = self.free
        quiet = on_fail is None   # on_fail said False once: it does nothing more
        version, tops = -1, {}
        last = None   # (version, f, u) of the last break check that found room
        passed = rest.passed
        for job, size in jobs:
            passed(job.id)
            f, u = size
            if quiet:   # the cheap first check of place(), inline
                if free.version != version:
                    version, tops = free.version, {}
                band = None if sample_only else (BANDS if u >= 1.0 else int(max(0.0, u)
                                                                            * BANDS))
                top = tops.get(band)
                if top is None:
                    top = tops[band] = free.max_free(band)
                if f > top + EPS:
                    q = (version, *rest.smallest())
                    if q != last:
                        if not self.fits_somewhere(q[1], q[2]):
                            break
                        last = q
                    continue
            if self.place(job, sample_only, size):
                continue
            busy = on_fail(job) if not quiet else False
            if not busy:
                quiet = True
                if not self.fits_somewhere(*rest.smallest()):
                    break

    def size(self, job: JobView, sample_only: bool = False) -> tuple[float, float]:
        """(fraction on this cluster's GPU size or inf if sizes differ, utilisation to check)."""
        u = -1.0 if sample_only else (job.sample.gpu_util if job.sample is not None else 1.0)
        if self.rep is None:
            return (math.inf, u)
        default = self.sample_default(self.rep) if sample_only else None
        return (fraction_for(job, self.rep, self.pol.headroom, self.reserve, default), u)

    def place(self, job: JobView, sample_only: bool = False,
              size: tuple[float, float] | None = None) -> bool:
        """Start the job on best-fit fragments if it fits now (``size``: from ``size()``)."""
        f, u = size if size is not None else self.size(job, sample_only)
        if f != math.inf:   # one GPU size: cheap checks before a search
            band = None if sample_only else min(BANDS, int(max(0.0, u) * BANDS))
            if f > self.free.max_free(band) + EPS:
                return False
            # a job at least as big and as busy as one that just failed fails too
            for f0, u0 in self.failed.get((job.num_gpus, sample_only), ()):
                if f >= f0 and u >= u0:
                    return False
        if sample_only:
            placed = self.place_sample(job)
        else:
            placed = self._search(job.num_gpus, self.need(job), u)
        if placed is None:
            if f != math.inf:
                fails = self.failed.setdefault((job.num_gpus, sample_only), [])
                if len(fails) < 8:
                    fails.append((f, u))
            return False
        self.failed.clear()
        self._take(job.id, 1.0 if sample_only else u, placed)
        self.actions.append(Start(job.id, to_fragments(placed), sample_only))
        self.acted.add(job.id)
        return True

    # ---- making room for a promoted job -----------------------------------

    def movable(self, holder: JobView, size: int) -> bool:
        """Whether a running job may be moved now for a job of ``size`` GPUs."""
        return holder.id not in self.acted and self._may_move(holder, size)[0]

    def evictable(self, holder: JobView, size: int) -> bool:
        """Whether a running job may ever be moved for a job of ``size`` GPUs.

        Not one that already waited past its own bound (it was promoted once):
        otherwise promoted jobs would take turns suspending each other.
        """
        return holder.id not in self.acted and self._may_move(holder, size)[1]

    def _may_move(self, holder: JobView, size: int) -> tuple[bool, bool]:
        """(movable, evictable) as if the job were not acted on this round (kept per round)."""
        key = (holder.id, size)
        got = self._movable.get(key)
        if got is None:
            ever = (holder.state is JobState.RUNNING and holder.num_gpus <= size
                    and not self.pol._overdue(holder.waited_s, remaining_s(holder),
                                              self.pol.promote_floor(holder)))
            got = self._movable[key] = (ever and self.settled(holder), ever)
        return got

    def settled(self, job: JobView) -> bool:
        """Whether the job has run at least its ``min_run`` since its last start."""
        return job.last_start is None or self.now - job.last_start >= self.pol.min_run(job)

    def readiness(self, size: int) -> dict[str, float]:
        """``ready_in`` for every job holding a GPU, by job id, as if not acted on this round.

        Only read for holders not acted on, so it is kept for the round.
        """
        seen = self._ready.get(size)
        if seen is not None:
            return seen
        seen = self._ready[size] = {}
        acted, self.acted = self.acted, set()
        try:
            for hs in self.holders.values():
                for h in hs:
                    if h.id not in seen:
                        seen[h.id] = self.ready_in(h, size)
        finally:
            self.acted = acted
        return seen

    def ready_in(self, holder: JobView, size: int) -> float:
        """Seconds until this tenant's room could be had: 0 if it may move now."""
        if self.movable(holder, size):
            return 0.0
        if self.evictable(holder, size):
            return self.pol.min_run(holder) - (self.now - holder.last_start)
        if holder.state is not JobState.RUNNING:
            return 1.0   # sampling or suspending: gone soon, but not movable
        left = remaining_s(holder)
        return math.inf if left is None else max(left, EPS)

    def clear_cost(self, gid: str, f: float, util: float, ready: dict[str, float]):
        """(seconds until free, tenants to move, those tenants) to fit one more job on ``gid``.

        Tenants go soonest-ready first, larger first on ties. None if even an
        empty GPU would not do.
        """
        free = self.free.free(gid)
        use = self.free.use.get(gid)
        if use is None:   # idle
            return (0.0, 0, ()) if free >= f - EPS else None
        tenants = use.tenants
        pol = self.pol
        cap = pol.max_cotenants
        if free >= f - EPS and tenants < cap and (   # calm(gid, util), inline
                tenants <= 0 or util <= room_for(tenants, use.util, pol.slowdown_cap,
                                                 pol.interference_overhead) + EPS):
            return (0.0, 0, ())
        acted = self.acted
        hs = self.holders.get(gid, ())
        if acted:
            hs = [h for h in hs if h.id not in acted]
        if not hs:
            return None
        r = reserve_fraction(self.free.gpus[gid], self.reserve)
        if len(hs) == 1 and tenants == 1:   # the common case: one tenant to move
            h = hs[0]
            if free + _frac_on(h, gid) + r >= f - EPS:
                return (ready[h.id], 1, hs)
            return None
        hs = sorted(hs, key=lambda h: (ready[h.id], -_frac_on(h, gid), h.id))
        gone: list[JobView] = []
        wait = 0.0
        for h in hs:
            gone.append(h)
            wait = max(wait, ready[h.id])
            free += _frac_on(h, gid) + r
            tenants -= 1
            if free >= f - EPS and tenants < cap and self.calm(gid, util, gone):
                return (wait, len(gone), hs[:len(gone)])
        return None

    def make_room(self, job: JobView) -> None:
        """Move small jobs off the GPUs that free soonest, or reserve those GPUs."""
        need, util = self.need(job), util_of(job)
        ready = self.readiness(job.num_gpus)
        costs = []
        closed, order = self.free.closed, self.free.order
        fractions: dict[int, float] = {}   # memory size -> the job's fraction
        for gid, gpu in self.free.gpus.items():
            if gid in closed:
                continue
            f = fractions.get(gpu.memory_mb)
            if f is None:
                f = fractions[gpu.memory_mb] = need(gpu)
            c = self.clear_cost(gid, f, util, ready)
            if c is not None:
                costs.append((c[0], c[1], order[gid], gid, c[2]))
                if job.num_gpus == 1 and c[0] == 0 and c[1] <= 1:
                    break   # one move, now: nothing cheaper for a 1-GPU job
        chosen = _pick_gpus(costs, job.num_gpus, self.free.gpus)
        if chosen is None:
            return
        victims = {v.id: v for c in chosen for v in c[4]}
        wait = max(c[0] for c in chosen)
        if wait > 0 or len(victims) > self.moves_left:
            if wait <= self.pol.reserve_horizon_s:
                self.free.close(c[3] for c in chosen)
            return
        for v in victims.values():
            self._release(v)
        placed = [(c[3], need(self.free.gpus[c[3]])) for c in chosen]
        self._take(job.id, util, placed)
        moves = [self.relocate(v) for v in sorted(victims.values(), key=arrival_key)]
        self.actions.extend(moves)
        self.actions.append(Start(job.id, to_fragments(placed)))
        self.acted.add(job.id)
        self.failed.clear()

    def relocate(self, job: JobView) -> Action:
        """Migrate a released job to room elsewhere, or suspend it if there is none."""
        self.acted.add(job.id)
        self.moves_left -= 1
        util = util_of(job)
        own = {f.gpu for f in job.fragments}
        frac = job.fragments[0].fraction
        placed = self.free.gang_place(
            job.num_gpus, frac, lambda gid: gid not in own and self.calm(gid, util))
        if placed is None:
            return Suspend(job.id)
        self._take(job.id, util, placed)
        return Migrate(job.id, to_fragments(placed))

    # ---- consolidation ----------------------------------------------------

    def consolidate(self, job: JobView) -> None:
        """Clear fragments for ``job`` by migrating single-GPU tenants into others' free room."""
        need, util = self.need(job), util_of(job)
        k = job.num_gpus
        fm = self.free
        first = next(iter(fm.gpus.values()))
        if fm.total_free() < k * need(first) - EPS:
            return
        # GPUs that could take the job now (fewer than k, or it would have been placed)
        chosen: list[str] = []
        band = min(BANDS, int(max(0.0, util) * BANDS))
        while len(chosen) < k - 1:
            got = fm.best_fit(need, chosen, lambda g: self.calm(g, util), band)
            if got is None:
                break
            chosen.append(got[0])
        # used GPUs that a move of small tenants could clear, nearest to fitting first;
        # which tenants may move is asked only of the GPUs tried (it costs more than the sort)
        keyed = []
        fractions: dict[int, float] = {}   # memory size -> the job's fraction
        for gid in fm.use:
            gpu = fm.gpus.get(gid)
            if gpu is None or gid in fm.closed or gid in chosen:
                continue
            f = fractions.get(gpu.memory_mb)
            if f is None:
                f = fractions[gpu.memory_mb] = need(gpu)
            keyed.append((f - fm.free(gid), fm.order[gid], gid))
        keyed.sort()
        holders = self.holders
        cands = (c for c in keyed
                 if any(self._may_consolidate(h) for h in holders.get(c[2], ())))
        plan: list[tuple[JobView, list[tuple[str, float]]]] = []
        for _, _, gid in itertools.islice(cands, CONSOLIDATE_TRIES + k):
            if len(chosen) == k:
                break
            step = self._clear_by_migration(gid, need(self.free.gpus[gid]), util, chosen)
            if step is not None and len(plan) + len(step) <= self.moves_left:
                chosen.append(gid)
                plan.extend(step)
            elif step is not None:
                self._undo(step)
        placed = [(gid, need(self.free.gpus[gid])) for gid in chosen]
        fits = len(chosen) == k and all(self.room(g, f, util) for g, f in placed)
        if not fits:
            self._undo(plan)
            return
        for v, dest in plan:
            self.acted.add(v.id)
            self.moves_left -= 1
            self.actions.append(Migrate(v.id, to_fragments(dest)))
        self._take(job.id, util, placed)
        self.actions.append(Start(job.id, to_fragments(placed)))
        self.acted.add(job.id)
        self.failed.clear()

    def _clear_by_migration(self, gid: str, f: float, util: float, keep: list[str]):
        """Tentatively move tenants of ``gid`` (smallest first) elsewhere until ``f`` fits."""
        hs = sorted((h for h in self.holders.get(gid, ()) if self._may_consolidate(h)),
                    key=lambda h: (h.fragments[0].fraction, h.id))
        step: list[tuple[JobView, list[tuple[str, float]]]] = []
        avoid = set(keep) | {gid}
        for h in hs:
            if self.room(gid, f, util):
                break
            hu = util_of(h)
            self._release(h)
            dest = self.free.best_fit(h.fragments[0].fraction, avoid,
                                      lambda g, hu=hu: self.calm(g, hu),
                                      min_band=min(BANDS, int(hu * BANDS)))
            if dest is None:
                self._take(h.id, hu, [(x.gpu, x.fraction) for x in h.fragments])
                self._undo(step)
                return None
            self._take(h.id, hu, [dest])
            step.append((h, [dest]))
        if self.room(gid, f, util):
            return step
        self._undo(step)
        return None

    def _may_consolidate(self, h: JobView) -> bool:
        return h.num_gpus == 1 and self.movable(h, 1)

    def _undo(self, step) -> None:
        for h, dest in reversed(step):
            self.free.release(dest, util_of(h))
            self._take(h.id, util_of(h), [(x.gpu, x.fraction) for x in h.fragments])


def _sample_default(pol: Fgs, gpu) -> float:
    """The sampling fragment on this GPU for a job that requests none (not idle)."""
    mb = pol.sample_memory_mb
    return pol.sample_fraction if mb is None else mb / gpu.memory_mb


def util_of(job: JobView) -> float:
    """A job's single-tenant GPU utilisation: sampled, else 1 (the safe guess)."""
    return job.sample.gpu_util if job.sample is not None else 1.0


def _frac_on(job: JobView, gid: str) -> float:
    for f in job.fragments:
        if f.gpu == gid:
            return f.fraction
    return 0.0


def _pick_gpus(costs, k: int, gpus) -> list | None:
    """The ``k`` GPUs cheapest to clear: one node if it can, else across nodes."""
    if len(costs) < k:
        return None
    costs.sort(key=lambda c: c[:4])
    if k == 1:
        return costs[:1]
    by_node: dict[str, list] = {}
    for c in costs:
        by_node.setdefault(gpus[c[3]].node, []).append(c)
    best = None
    for node, cs in by_node.items():
        if len(cs) >= k:
            pick = cs[:k]
            score = (max(c[0] for c in pick), sum(c[1] for c in pick), pick[0][2])
            if best is None or score < best[0]:
                best = (score, pick)
    if best:
        return best[1]
    return costs[:k]
