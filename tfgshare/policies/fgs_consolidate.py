"""fgs consolidation: migrate single-GPU tenants to clear fragments for a job.

When the first job that does not fit would fit in the total free capacity,
tenants of the GPUs nearest to fitting it (at most ``CONSOLIDATE_TRIES`` more
than the gang needs) are tentatively migrated into other GPUs' free room,
smallest first; the moves are kept only if the whole gang then fits.
"""

from __future__ import annotations

import itertools
import math

from sortedcontainers import SortedList

from .base import JobState, JobView, Migrate, Start
from .fgs_round import BANDS, util_of
from .interference import room_for
from .placement import EPS, MIN_FRACTION, free_fraction, reserve_fraction, to_fragments
from .prediction import remaining_s

CONSOLIDATE_TRIES = 8   # nearly fitting GPUs a consolidation tries to clear
SLACK = 1e-9   # rounding a tentative move and its undo may leave in a GPU's sums


class ConsolidateMixin:
    """The consolidation part of an fgs round (mixed into the round in ``fgs``)."""

    def consolidate(self, job: JobView) -> None:
        """Clear fragments for ``job`` by migrating single-GPU tenants into others' free room."""
        need, util = self.need(job), util_of(job)
        k = job.num_gpus
        fm = self.free
        if self.beyond_clearing(job, need, util):
            return
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

    def beyond_clearing(self, job: JobView, need, util: float) -> bool:
        """Whether no GPU could be cleared for this need (consolidation would fail).

        A GPU is cleared by moving its single-GPU tenants off, smallest first,
        each into another GPU's free room. So a GPU can be cleared only if it
        has the room already (fewer than the gang needs do: the GPUs with room
        counted from the free map, calm or nearly), or its free room plus that of every such tenant
        that may ever move reaches the need and its smallest such tenant fits
        in the most free room any other GPU has, and the job is calm beside the
        tenants that cannot move. These are kept per GPU in the
        memo (``ClearIndex``), so this costs O(changed GPUs + log n) plus the
        GPUs that pass one of the two tests. Only asked while the round has
        moved nothing (a move frees room) and all GPUs are one size.
        """
        if self.rep is None or self.moves_left != self.pol.max_moves or not self.pol.shortcuts:
            return False
        f, k = need(self.rep), job.num_gpus
        fm = self.free
        lo = util - EPS - SLACK
        band = None if lo <= 0 else min(BANDS, int(lo * BANDS))
        if f < MIN_FRACTION or fm.count_fitting(f - SLACK, band) >= k:
            return False
        memo, cluster = self.memo, self.cluster
        key = (self.pol.room_key(), cluster.gpus, cluster.reserve_mb)
        index = memo.indexes.get("consolidate")
        if index is None or index.key != key:
            index = memo.indexes["consolidate"] = ClearIndex(self.pol, key, cluster)
        return not index.any_clearable(memo.holdings.by_gpu(), memo.holdings.use,
                                       f - EPS - SLACK, fm.max_free(0) + EPS + SLACK,
                                       util - EPS - SLACK)

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



class ClearIndex:
    """Per GPU with a single-GPU tenant that may ever move: the most room moving all
    such tenants could give, the smallest of them, and the utilisation room left
    beside the other tenants (interference model; it only grows as tenants go).

    Worked out again only for GPUs whose tenants changed.
    """

    def __init__(self, pol, key: tuple, cluster) -> None:
        self.pol, self.key = pol, key
        self.gpus = {g.id: g for g in cluster.gpus}
        self.reserve = cluster.reserve_mb
        self.at: dict[str, tuple[float, float, float]] = {}   # gid -> (room, smallest, util room)
        self.by_room = SortedList()       # (most room, gid)
        self.by_smallest = SortedList()   # (smallest tenant, gid)
        self.by_calm = SortedList()       # (util room, gid)
        self.stale: set[str] | None = None   # None: every GPU (the memo adds changed ones)

    def any_clearable(self, holders: dict[str, list[JobView]], use: dict,
                      room: float, dest: float, util: float) -> bool:
        """Whether some GPU's most room reaches ``room``, its smallest tenant is within
        ``dest`` and its utilisation room reaches ``util``."""
        self._update(holders, use)
        at = self.at
        i = self.by_room.bisect_left((room, ""))
        j = self.by_smallest.bisect_right((dest, chr(0x10FFFF)))
        c = self.by_calm.bisect_left((util, ""))
        sizes = (len(self.by_room) - i, j, len(self.by_calm) - c)
        if min(sizes) == 0:
            return False
        pick = sizes.index(min(sizes))
        gids = (self.by_room.islice(i) if pick == 0 else self.by_smallest.islice(0, j)
                if pick == 1 else self.by_calm.islice(c))
        return any(at[gid][0] >= room and at[gid][1] <= dest and at[gid][2] >= util
                   for _, gid in gids)

    def _update(self, holders: dict[str, list[JobView]], use: dict) -> None:
        stale = set(holders) if self.stale is None else self.stale
        self.stale = set()
        pol, at = self.pol, self.at
        for gid in stale:
            old = at.pop(gid, None)
            if old is not None:
                self.by_room.remove((old[0], gid))
                self.by_smallest.remove((old[1], gid))
                self.by_calm.remove((old[2], gid))
            g = self.gpus.get(gid)
            hs = holders.get(gid)
            if g is None or not hs:
                continue
            movable = [h for h in hs
                       if h.num_gpus == 1 and h.state is JobState.RUNNING
                       and not pol._overdue(h.waited_s, remaining_s(h), pol.promote_floor(h))]
            if not movable:
                continue
            r = reserve_fraction(g, self.reserve)
            u = use.get(gid)
            most = free_fraction(g, u, self.reserve) + sum(h.fragments[0].fraction + r
                                                          for h in movable)
            left = (u.tenants if u is not None else 0) - len(movable)
            if left <= 0:
                calm = math.inf
            elif left >= pol.max_cotenants:
                calm = -math.inf
            else:
                calm = room_for(left, (u.util if u is not None else 0.0)
                                - sum(util_of(h) for h in movable),
                                pol.slowdown_cap, pol.interference_overhead)
            smallest = min(h.fragments[0].fraction for h in movable)
            at[gid] = (most, smallest, calm)
            self.by_room.add((most, gid))
            self.by_smallest.add((smallest, gid))
            self.by_calm.add((calm, gid))
