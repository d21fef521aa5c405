"""fgs consolidation: migrate single-GPU tenants to clear fragments for a job.

When the first job that does not fit would fit in the total free capacity,
tenants of the GPUs nearest to fitting it (at most ``CONSOLIDATE_TRIES`` more
than the gang needs) are tentatively migrated into other GPUs' free room,
smallest first; the moves are kept only if the whole gang then fits.
"""

from __future__ import annotations

import itertools

from .base import JobView, Migrate, Start
from .fgs_round import BANDS, util_of
from .placement import EPS, to_fragments

CONSOLIDATE_TRIES = 8   # nearly fitting GPUs a consolidation tries to clear


class ConsolidateMixin:
    """The consolidation part of an fgs round (mixed into the round in ``fgs``)."""

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

