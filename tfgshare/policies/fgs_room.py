"""fgs making room for a promoted job: move small tenants off, or reserve GPUs.

A promoted job that does not fit is given the GPUs cheapest to clear: each
GPU's cost is when its tenants (soonest-ready first) could all be moved, and
how many; the gang's GPUs are picked on one node if it can. If they can be
cleared now, the tenants are migrated elsewhere or suspended and the job
starts; if they free within ``reserve_horizon_s``, they are reserved (closed
to other jobs this round).
"""

from __future__ import annotations

import math

from .base import Action, JobState, JobView, Migrate, Start, Suspend
from .fgs_round import util_of
from .interference import room_for
from .placement import EPS, reserve_fraction, to_fragments
from .prediction import remaining_s
from .queueing import arrival_key


class RoomMixin:
    """The making-room part of an fgs round (mixed into the round in ``fgs``)."""

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
