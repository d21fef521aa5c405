"""fgs phase 5, consolidate: migrate single-GPU tenants to clear fragments for a job.

When the first job that does not fit would fit in the total free capacity,
tenants of the GPUs nearest to fitting it (at most ``CONSOLIDATE_TRIES`` more
than the gang needs) are tentatively migrated into other GPUs' free room,
smallest first; the moves are kept only if the whole gang then fits. On GPUs of
one memory size the nearest are read from the map's used GPUs kept by free room
(``FreeMap.most_free_used``) only as far as the tries go, not sorted anew.

Shortcuts skip work whose answer is known (``Fgs.shortcuts``; the
full search decides the same, ``tests/test_policies_memo.py``): the memo's
``MovableIndex`` keeps, per GPU, from when one of its single-GPU tenants may
move, so GPUs none of whose tenants may move yet are not scanned; a try
that would not make room even with every movable tenant gone is not made;
and no try is made once too few are left to clear the GPUs a gang still misses.

Imports: ``policies`` below fgs, ``fgs.order`` and ``fgs.fit``.
"""

from __future__ import annotations

import heapq
import itertools
import math

from ..base import JobView, Migrate, Start
from ..interference import room_for
from ..placement import EPS, GpuUse, free_fraction, to_fragments
from .fit import SLACK, RoundState, util_of
from .order import BANDS, search_band

__all__ = ["CONSOLIDATE_TRIES", "Consolidate", "MovableIndex"]

CONSOLIDATE_TRIES = 8   # nearly fitting GPUs a consolidation tries to clear


class Consolidate:
    """Consolidation for the first shortest-first job that did not fit, on one round's state."""

    def __init__(self, state: RoundState) -> None:
        self.round = state
        # fractions and utilisations no GPU had room for, on the map as this call left it
        self._nowhere: dict[tuple[float, float], None] = {}

    def consolidate(self, job: JobView) -> None:
        """Clear fragments for ``job`` by migrating single-GPU tenants into others' free room."""
        need, util = self.round.need(job), util_of(job)
        k = job.num_gpus
        fm = self.round.free
        first = next(iter(fm.gpus.values()))
        if fm.total_free() < k * need(first) - EPS:
            return
        # GPUs that could take the job now (fewer than k, or it would have been placed)
        chosen: list[str] = []
        band = search_band(util)
        while len(chosen) < k - 1:
            got = fm.best_fit(need, chosen, lambda g: self.round.calm(g, util), band)
            if got is None:
                break
            gid, _ = got   # (GPU, fraction)
            chosen.append(gid)
        # used GPUs that a move of small tenants could clear, nearest to fitting first;
        # which tenants may move is asked only of the GPUs tried (it costs more than the sort)
        # (only GPUs that a running single-GPU job held as the round began: no other has
        # a tenant consolidation may move)
        closed, order, gpus, free, use = fm.closed, fm.order, fm.gpus, fm.free, fm.use
        candidates = self.round.memo.single_gpu_holders
        if self.round.pol.shortcuts:   # only GPUs where some tenant may move by now
            candidates = MovableIndex.of(self.round).movable_by(self.round.now)
        if len(fm.sizes) == 1:   # most free room first, then cluster order (fgs's maps rank)
            f = need(first)
            order_of = self._by_room_short(fm.most_free_used(), f, candidates, set(closed),
                                           chosen)
        else:
            fractions: dict[int, float] = {}   # memory size -> the job's fraction
            keyed = []
            for gid in candidates:
                gpu = gpus.get(gid)
                if gpu is None or gid not in use or gid in closed or gid in chosen:
                    continue
                f = fractions.get(gpu.memory_mb)
                if f is None:
                    f = fractions[gpu.memory_mb] = need(gpu)
                keyed.append((f - free(gid), order[gid], gid))
            heapq.heapify(keyed)   # in sorted order, but only as far as the tries go
            order_of = (heapq.heappop(keyed)[2] for _ in range(len(keyed)))
        holders = self.round.holders
        may = self._may_consolidate
        one = f if len(fm.sizes) == 1 else None   # the job's fraction on every GPU

        def cands():
            # each candidate with its tenants that may move (acted and the round's
            # movability stay as they are until the tries are over)
            for gid in order_of:   # (room short, order)
                hs = [h for h in holders.get(gid, ()) if may(h)]
                if hs:
                    yield gid, hs

        plan: list[tuple[JobView, list[tuple[str, float]]]] = []
        saved: dict[str, GpuUse | None] = {}   # each GPU's use before this call changed it
        self._nowhere = {}
        tries = CONSOLIDATE_TRIES + k
        for gid, hs in itertools.islice(cands(), tries):
            if len(chosen) == k:
                break
            if self.round.pol.shortcuts and len(chosen) + tries < k:
                break   # too few tries left to clear the GPUs still missing: it fails
            tries -= 1
            room_f = need(self.round.free.gpus[gid]) if one is None else one
            got = self._clear_by_migration(gid, room_f, util, chosen, hs)
            if got is None:
                continue
            step, before = got
            if len(plan) + len(step) <= self.round.moves_left:
                chosen.append(gid)
                plan.extend(step)
                for g, u in before.items():
                    saved.setdefault(g, u)
                if step:
                    self._nowhere = {}   # the map changed: destinations found before may differ
            else:
                self._restore(before)
        placed = [(gid, need(self.round.free.gpus[gid])) for gid in chosen]
        fits = len(chosen) == k and all(self.round.room(g, f, util) for g, f in placed)
        if not fits:
            self._restore(saved)
            return
        for v, dest in plan:
            self.round.acted.add(v.id)
            self.round.moves_left -= 1
            self.round.actions.append(Migrate(v.id, to_fragments(dest)))
        self.round.take(job.id, util, placed)
        self.round.actions.append(Start(job.id, to_fragments(placed)))
        self.round.acted.add(job.id)
        self.round.failed.clear()

    @staticmethod
    def _by_room_short(ranked, f: float, candidates, closed: set[str], chosen: list[str]):
        """The candidate GPUs by (``f`` - free room, cluster order), from the used GPUs by
        (most free room, cluster order) (``FreeMap.most_free_used``): the same order as
        sorting every candidate, read only as far as the tries go (GPUs of equal
        ``f - free`` but different free room are put back in cluster order)."""
        run: list[tuple[int, str]] = []   # (order, GPU) of one room short
        short = None
        for free, order, gid in ranked:
            if gid not in candidates or gid in closed or gid in chosen:
                continue
            room_short = f - free
            if room_short != short:
                run.sort()
                yield from (g for _, g in run)
                run, short = [], room_short
            run.append((order, gid))
        run.sort()
        yield from (g for _, g in run)

    def _clear_by_migration(self, gid: str, f: float, util: float, keep: list[str],
                            movable: list[JobView] | None = None):
        """Tentatively move tenants of ``gid`` (smallest first) elsewhere until ``f`` fits.

        ``movable``: the tenants of ``gid`` that may move, in the holders' order
        (worked out here if not given). Returns the moves and each changed GPU's
        use before them, or None (then the map is as it was, to the bit).
        """
        hs = movable if movable is not None else [
            h for h in self.round.holders.get(gid, ()) if self._may_consolidate(h)]
        if len(hs) > 1:
            hs = sorted(hs, key=_smallest_first)
        step: list[tuple[JobView, list[tuple[str, float]]]] = []
        before: dict[str, GpuUse | None] = {}
        if self.round.pol.shortcuts:
            # the first move's answer kept from an earlier try (cheapest first): the
            # loop below would find no room and return at its first tenant
            if (hs and self._nowhere and self._nowhere_known(hs[0].fragments[0].fraction,
                                                             util_of(hs[0]))
                    and (self.round.free.free(gid) < f - EPS or not self.round.room(gid, f, util))):
                return None
            if self._bound_to_fail(gid, f, util, hs):
                return None   # with all of them gone it would not fit: nothing to try
        avoid = set(keep) | {gid}
        use = self.round.free.use
        for h in hs:
            if self.round.room(gid, f, util):
                break
            hu = util_of(h)
            frac = h.fragments[0].fraction
            band = min(BANDS, int(hu * BANDS))
            if not step:
                if self._nowhere_for(frac, hu, band, keep):
                    return None   # the map is as the call found it: nothing to undo
            elif self._nowhere_known(frac, hu):
                # the moves so far only took room from other GPUs: still nowhere
                self._restore(before)
                return None
            for x in h.fragments:
                before.setdefault(x.gpu, use.get(x.gpu))
            self.round.release(h)
            dest = self.round.free.best_fit(frac, avoid, lambda g, hu=hu: self.round.calm(g, hu),
                                      min_band=band)
            if dest is None:
                self._restore(before)
                return None
            dest_gpu, _ = dest
            before.setdefault(dest_gpu, use.get(dest_gpu))
            self.round.take(h.id, hu, [dest])
            step.append((h, [dest]))
        if self.round.room(gid, f, util):
            return step, before
        self._restore(before)
        return None

    def _bound_to_fail(self, gid: str, f: float, util: float, hs: list[JobView]) -> bool:
        """Whether ``gid`` would not have room for ``f`` even with all of ``hs`` moved away.

        Moving a tenant only adds room, takes a tenant off and lowers the summed
        utilisation, so a try that fails this way fails at every step;
        ``SLACK`` covers the rounding of the try's own sums.
        """
        use = self.round.free.use.get(gid)
        if use is None:
            return False
        n = use.tenants - len(hs)
        if n >= self.round.pol.max_cotenants:
            return True
        if n <= 0:
            room = free_fraction(self.round.free.gpus[gid], None, self.round.reserve)
            return room < f - EPS - SLACK
        used = use.used - sum(h.fragments[0].fraction for h in hs)
        room = free_fraction(self.round.free.gpus[gid], GpuUse(used, n, 0.0), self.round.reserve)
        if room < f - EPS - SLACK:
            return True
        total = use.util - sum(util_of(h) for h in hs) - SLACK
        return util > room_for(n, total, self.round.pol.slowdown_cap,
                               self.round.pol.interference_overhead) + EPS

    def _nowhere_for(self, frac: float, hu: float, band: int, keep: list[str]) -> bool:
        """Whether no GPU but ``keep`` has room for a tenant of this fraction and utilisation.

        Asked of a try's first move, on the map as the call left it: the move's
        own search (that GPU's tenant taken off, that GPU excluded) finds a
        subset of these, so "nowhere" answers it. Kept while the map stays as
        it is (``_nowhere``), and also answers any tenant as big and as busy.
        """
        if self._nowhere_known(frac, hu):
            return True
        calm = self.round.calm
        if self.round.free.best_fit(frac, keep, lambda g: calm(g, hu), min_band=band) is not None:
            return False
        if len(self._nowhere) < 8:
            self._nowhere[(frac, hu)] = None
        return True

    def _nowhere_known(self, frac: float, hu: float) -> bool:
        """Whether a "nowhere" answer kept for this call covers this tenant.

        Valid on the map as the call left it and on any map that only has less
        room, fewer places or busier GPUs outside the GPU being cleared (a try's
        moves so far), since a GPU only loses candidacy that way.
        """
        for f0, u0 in self._nowhere:
            if frac >= f0 and hu >= u0:
                return True
        return False

    def _may_consolidate(self, h: JobView) -> bool:
        """Whether consolidation may move this tenant now (a single-GPU one, movable)."""
        return h.num_gpus == 1 and self.round.movable(h, 1)

    def _restore(self, before: dict) -> None:
        """Put these GPUs' uses back as they were (exactly: no sums undone in floats)."""
        for g, u in before.items():
            self.round.free.set_use(g, u)


def _smallest_first(h: JobView) -> tuple[float, str]:
    """Sort key: smallest fragment first, then by id."""
    return (h.fragments[0].fraction, h.id)


class MovableIndex:
    """Per GPU, from when one of its running single-GPU tenants may be moved (memo-kept).

    A tenant may move for consolidation once it has run its ``min_run`` since
    its last start (and is not a promoted job); that moment is kept a little
    early, never late, per GPU (the soonest of its tenants), and recomputed
    only for GPUs whose tenants changed (``stale``, filled by the memo). A GPU
    not yet due has no tenant consolidation may move this round.
    """

    reads = "tenant"   # a GPU's moment depends only on this key of its tenants (``FgsMemo.keys``)

    def __init__(self, key: tuple) -> None:
        self.key = key
        self.now = -math.inf
        self.stale: set[str] = set()     # GPUs whose tenants changed (the memo adds them)
        self.fresh = True                # nothing computed yet: every GPU is stale
        self.due: dict[str, float] = {}  # GPU -> from when a tenant may move (early)
        self.ready: set[str] = set()     # GPUs due by ``now``
        self.heap: list[tuple[float, str]] = []   # (moment, GPU) not due yet; some outdated

    @staticmethod
    def of(r) -> "MovableIndex":
        """The memo's index for this round's policy settings (made or rebuilt as needed)."""
        memo = r.memo
        key = r.pol.room_key()
        index = memo.indexes.get("movable")
        if index is None or index.key != key or r.now < index.now:
            index = memo.indexes["movable"] = MovableIndex(key)
        index.update(r.pol, memo.holdings.by_gpu())
        return index

    def update(self, pol, holders: dict[str, list[JobView]]) -> None:
        """Recompute the GPUs whose tenants changed."""
        gids = holders.keys() if self.fresh else self.stale
        self.fresh = False
        for gid in gids:
            self.ready.discard(gid)
            t = math.inf
            for h in holders.get(gid, ()):
                if h.num_gpus == 1 and pol.may_be_moved(h):
                    if h.last_start is None:
                        t = -math.inf
                        break
                    run = pol.min_run(h)
                    at = h.last_start + run
                    at -= SLACK * (1.0 + abs(h.last_start) + abs(run))
                    t = min(t, at)
            if t == math.inf:
                self.due.pop(gid, None)
                continue
            self.due[gid] = t
            if t <= self.now:
                self.ready.add(gid)
            else:
                heapq.heappush(self.heap, (t, gid))
        self.stale = set()
        if len(self.heap) > 2 * len(self.due) + 64:   # drop outdated entries
            self.heap = [(t, g) for g, t in self.due.items() if g not in self.ready]
            heapq.heapify(self.heap)

    def movable_by(self, now: float) -> set[str]:
        """The GPUs where some single-GPU tenant may have passed its minimum run by ``now``."""
        self.now = now
        heap, due, ready = self.heap, self.due, self.ready
        while heap and heap[0][0] <= now:   # (moment, GPU)
            t, gid = heapq.heappop(heap)
            if due.get(gid) == t:
                ready.add(gid)
        return ready
