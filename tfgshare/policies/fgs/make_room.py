"""fgs phase 4, make room for a promoted job: move small tenants off, or reserve GPUs.

A promoted job that does not fit is given the GPUs cheapest to clear: each
GPU's cost is when its tenants (soonest-ready first) could all be moved, and
how many; the gang's GPUs are picked on one node if it can. If they can be
cleared now, the tenants are migrated elsewhere or suspended and the job
starts; if they free within ``reserve_horizon_s``, they are reserved (closed
to other jobs this round). The memo's indexes (``room_index``) answer the
same as pricing every GPU, faster.

Imports: ``policies`` below fgs, ``fgs.records``, ``fgs.order``, ``fgs.fit``
and ``fgs.room_index``.
"""

from __future__ import annotations

import math
from collections import Counter

from ..base import Action, ClusterSnapshot, JobState, JobView, Migrate, Start, Suspend
from ..interference import room_for
from ..placement import EPS, MIN_FRACTION, exclusive_fraction, reserve_fraction, to_fragments
from ..queueing import arrival_key
from .fit import SLACK, RoundState, util_of
from .order import BANDS, search_band
from .records import (ClearClock, ClearCost, ClearJob, ClearLayout, ClearStep, ClearSteps,
                      GpuCost, MinRunTimer, RoomLayout)
from .room_index import (ClearIndex, RoomIndex, clear_cost_from, finish_in, frac_on,
                         node_score, retimed)

__all__ = ["MakeRoom"]


class MakeRoom:
    """Making room for a promoted job, on one round's state."""

    def __init__(self, state: RoundState) -> None:
        self.round = state
        # gang size -> ready_in of every holder asked about (holders and now are fixed
        # in a round)
        self._ready: dict[int, dict[str, float]] = {}

    def readiness(self, size: int):
        """``ready_in`` of a job holding a GPU as if not acted on this round, as a function.

        Only read for holders not acted on, so each answer is kept for the
        round; worked out only for the holders asked about.
        """
        seen = self._ready.get(size)
        if seen is None:
            seen = self._ready[size] = {}

        def ready(h: JobView) -> float:
            t = seen.get(h.id)
            if t is None:
                acted, self.round.acted = self.round.acted, set()
                try:
                    t = seen[h.id] = self.ready_in(h, size)
                finally:
                    self.round.acted = acted
            return t
        return ready

    def ready_in(self, holder: JobView, size: int) -> float:
        """Seconds until this tenant's room could be had: 0 if it may move now, inf if
        it may not be moved and is not predicted to finish within ``reserve_horizon_s``."""
        if holder.id not in self.round.acted:
            may = self.round.may_move(holder, size)
            if may.now:
                return 0.0
            if may.ever:
                return self.round.pol.min_run(holder) - (self.round.now - holder.last_start)
        if holder.state is not JobState.RUNNING:
            return 1.0   # sampling or suspending: gone soon, but not movable
        return finish_in(holder, self.round.pol.reserve_horizon_s)

    def clear_cost(self, gid: str, f: float, util: float, ready) -> ClearCost | None:
        """What it costs to fit one more job on ``gid``: when, and which tenants to move.

        Tenants go soonest-ready first, larger first on ties. None if even an
        empty GPU would not do.
        """
        free = self.round.free.free(gid)
        use = self.round.free.use.get(gid)
        if use is None:   # idle
            return ClearCost(0.0, 0, ()) if free >= f - EPS else None
        tenants = use.tenants
        pol = self.round.pol
        cap = pol.max_cotenants
        if free >= f - EPS and tenants < cap and (   # calm(gid, util), inline
                tenants <= 0 or util <= room_for(tenants, use.util, pol.slowdown_cap,
                                                 pol.interference_overhead) + EPS):
            return ClearCost(0.0, 0, ())
        acted = self.round.acted
        hs = self.round.holders.get(gid, ())
        if acted:
            hs = [h for h in hs if h.id not in acted]
        if not hs:
            return None
        r = reserve_fraction(self.round.free.gpus[gid], self.round.reserve)
        if len(hs) == 1 and tenants == 1:   # the common case: one tenant to move
            h = hs[0]
            if free + frac_on(h, gid) + r >= f - EPS:
                return ClearCost(ready(h), 1, hs)
            return None
        hs = sorted(hs, key=lambda h: (ready(h), -frac_on(h, gid), h.id))
        gone: list[JobView] = []
        wait = 0.0
        for h in hs:
            gone.append(h)
            wait = max(wait, ready(h))
            free += frac_on(h, gid) + r
            tenants -= 1
            if free >= f - EPS and tenants < cap and self.round.calm(gid, util, gone):
                return ClearCost(wait, len(gone), hs[:len(gone)])
        return None

    def make_room(self, job: JobView, sample_only: bool = False) -> None:
        """Move small jobs off the GPUs that free soonest, or reserve those GPUs
        (``sample_only``: for the job's sampling phase)."""
        need, util = self.round.need(job, sample_only), util_of(job)
        if (self.round.pol.shortcuts and not self.round.actions and not self.round.acted
                and not self.round.free.closed):
            # out of reach last time: the bound (O(changed GPUs)) first, then the pick
            memo = self.round.memo
            if memo.out_of_reach_job == job.id and self.out_of_reach(job, need):
                return
            chosen = self.cheapest_from_index(job.num_gpus, need, util)
            memo.out_of_reach_job = job.id if (chosen is None or max(c.wait_s for c in chosen)
                                  > self.round.pol.reserve_horizon_s) else None
        else:
            if self.out_of_reach(job, need):
                return
            chosen = self.cheapest(job.num_gpus, need, util)
        if chosen is None:
            return
        victims = {v.id: v for c in chosen for v in c.tenants}
        wait = max(c.wait_s for c in chosen)
        if wait > 0 or len(victims) > self.round.moves_left:
            if wait <= self.round.pol.reserve_horizon_s:
                self.round.free.close(c.gpu for c in chosen)
            return
        for v in victims.values():
            self.round.release(v)
        placed = [(c.gpu, need(self.round.free.gpus[c.gpu])) for c in chosen]
        self.round.take(job.id, util, placed)
        moves = [self.relocate(v) for v in sorted(victims.values(), key=arrival_key)]
        self.round.actions.extend(moves)
        self.round.actions.append(Start(job.id, to_fragments(placed), sample_only))
        self.round.acted.add(job.id)
        self.round.failed.clear()

    def cheapest(self, k: int, need, util: float) -> list[GpuCost] | None:
        """The ``k`` GPUs cheapest to clear for a job of this need and
        utilisation; None: not ``k`` to be had.

        Every open GPU is priced; for a 1-GPU job the scan stops at the first
        GPU in cluster order that one move, now, clears.
        """
        ready = self.readiness(k)
        costs = []
        closed, order = self.round.free.closed, self.round.free.order
        fractions: dict[int, float] = {}   # memory size -> the job's fraction
        for gid, gpu in self.round.free.gpus.items():
            if gid in closed:
                continue
            f = fractions.get(gpu.memory_mb)
            if f is None:
                f = fractions[gpu.memory_mb] = need(gpu)
            c = self.clear_cost(gid, f, util, ready)
            if c is not None:
                costs.append(GpuCost(c.wait_s, c.moves, order[gid], gid, c.tenants))
                if k == 1 and c.wait_s == 0 and c.moves <= 1:
                    break   # one move, now: nothing cheaper for a 1-GPU job
        return _pick_gpus(costs, k, self.round.free.gpus, self.round.free.cluster)

    def cheapest_from_index(self, k: int, need, util: float) -> list[GpuCost] | None:
        """``cheapest`` from the clear costs kept in the memo (``ClearIndex``).

        Only for a round that has not acted yet (the round's free room and
        tenants are then the memo's). Each GPU's steps (``clear_steps``) are
        kept per gang size and its cost per job size; both are worked out
        again only for the GPUs whose tenants changed since they were last
        read, or that have a tenant still inside its minimum run (whose wait
        falls with time: their steps are brought to now from their clocks);
        the others hold as they were. A 1-GPU job, new or not, is priced on
        every GPU at once from the steps as arrays (``step_table``).
        """
        cluster, pol, gpus = self.round.cluster, self.round.pol, self.round.free.gpus
        layout = ClearLayout(pol.room_key(), pol.max_cotenants, pol.slowdown_cap,
                             pol.interference_overhead, cluster.reserve_mb, cluster.down_nodes)
        memo = self.round.memo
        index = memo.indexes.get("clear")
        if (index is None or index.layout != layout or index.gpus is not cluster.gpus
                or self.round.now < index.now):
            index = memo.indexes["clear"] = ClearIndex(layout, cluster.gpus, gpus,
                                                        self.round.free.order)
        index.now = self.round.now
        by_mem = {mem: need(g) for mem, g in index.reps.items()}
        if k == 1:
            gang_steps, redo_steps = index.start_steps(k)
        else:
            gang_steps, redo_steps, redo, new = index.start(
                k, ClearJob(k, tuple(sorted(by_mem.items())), util))
        steps, clocks = gang_steps.steps, gang_steps.clocks
        cap = pol.max_cotenants
        if k == 1:   # every GPU's first fitting step at once, from the steps as arrays
            # A timed GPU's steps change with time only in the waits of its tenants
            # inside their minimum run, which stay above 0 until one of them is past
            # it: the steps that wait 0 (its tenants movable now, in their fixed order)
            # are as they were. So a GPU that one move clears now is found with only the
            # GPUs past a minimum run brought to now; the rest are brought to now, and
            # the table read again, only when none is cleared now.
            table, order = gang_steps.table, index.order
            retimed_now = self.steps_now(gang_steps, redo_steps, k, expired_only=True)
            for gid in redo_steps | retimed_now:
                if gid in gpus:   # else on a down node (not in this layout's up GPUs)
                    table.put(order[gid], steps[gid])
            row = table.clears_now(by_mem, util, cap)
            if row is None:
                again: set[str] = set()   # GPUs whose tenants' order changed meanwhile
                retimed_now = self.steps_now(gang_steps, again, k)
                for gid in again | retimed_now:
                    if gid in gpus:
                        table.put(order[gid], steps[gid])
                row = table.cheapest(by_mem, util, cap)
            if row is None:
                return None
            g = cluster.gpus[row]
            c = clear_cost_from(steps[g.id], by_mem[g.memory_mb], util, cap)
            return [GpuCost(c.wait_s, c.moves, row, g.id, c.tenants)]
        self.steps_now(gang_steps, redo_steps, k)
        if not new and clocks:
            redo = redo | clocks.keys()
        index.current.timed = set(clocks)
        if new:   # every up GPU, sorted at once
            index.fill(((gid, clear_cost_from(steps[gid], by_mem[g.memory_mb], util, cap))
                        for gid, g in gpus.items()), clocks)
        for gid in () if new else redo:
            g = gpus.get(gid)
            if g is not None:   # else on a down node (not in this layout's up GPUs)
                index.put(gid, clear_cost_from(steps[gid], by_mem[g.memory_mb], util, cap),
                          gid in clocks)
        return index.pick(k, cluster)

    def steps_now(self, gang_steps, redo_steps: set[str], k: int,
                  expired_only: bool = False) -> set[str]:
        """Bring the kept steps (gang size ``k``) to now: those of the ``redo_steps``
        GPUs worked out again (more are added when their tenants' order changed), the
        timed GPUs' brought to now from their clocks (``expired_only``: only those
        with a tenant past its minimum run by now); returns the GPUs retimed."""
        steps, clocks, now = gang_steps.steps, gang_steps.clocks, self.round.now
        retimed_now = set()
        timed = [g for g in clocks if g not in redo_steps]
        if expired_only:   # ``retimed``'s test of a timer past its minimum run
            timed = [g for g in timed if any(now - t.last_start >= t.min_run
                                             for t in clocks[g].timers)]
        for gid in timed:
            got = retimed(gid, steps[gid], clocks[gid], now)
            if got is None:   # the tenants' order changed: worked out again
                redo_steps.add(gid)
            else:
                new_steps, clock = got
                steps[gid] = new_steps
                retimed_now.add(gid)
                if clock is None:
                    del clocks[gid]
                else:
                    clocks[gid] = clock
        if redo_steps:
            ready = self.readiness(k)
            for gid in redo_steps:
                got = steps[gid] = self.clear_steps(gid, ready)
                clock = self.clock(got, k, ready)
                if clock is None:
                    clocks.pop(gid, None)
                else:
                    clocks[gid] = clock
        return retimed_now

    def clock(self, steps: ClearSteps, k: int, ready) -> ClearClock | None:
        """What ``retimed`` needs to bring a GPU's ``clear_steps`` (gang size ``k``) to a
        later time, or None if no tenant is inside its minimum run."""
        moves = steps.moves
        if not moves:
            return None
        hs = moves[0].tenants
        timers = []
        for i, h in enumerate(hs):
            may = self.round.may_move(h, k)
            if may.ever and not may.now:   # inside its minimum run: its wait falls with time
                timers.append(MinRunTimer(i, h.last_start, self.round.pol.min_run(h)))
        if not timers:
            return None
        return ClearClock(tuple(ready(h) for h in hs), tuple(timers))

    def clear_steps(self, gid: str, ready) -> ClearSteps:
        """What ``clear_cost`` reads of ``gid``, whatever the job's fraction and utilisation.

        Its free room, tenants and utilisation room now, and the same after
        each tenant moved in ``clear_cost``'s order; the sums are made as
        ``clear_cost`` makes them, so the answers are the same to the bit.
        """
        free = self.round.free.free(gid)
        use = self.round.free.use.get(gid)
        if use is None:   # idle
            return ClearSteps(free, 0, None, ())
        tenants = use.tenants
        pol = self.round.pol
        cap, overhead = pol.slowdown_cap, pol.interference_overhead
        room = math.inf if tenants <= 0 else room_for(tenants, use.util, cap, overhead)
        acted = self.round.acted
        hs = self.round.holders.get(gid, ())
        if acted:
            hs = [h for h in hs if h.id not in acted]
        if not hs:
            return ClearSteps(free, tenants, room, ())
        r = reserve_fraction(self.round.free.gpus[gid], self.round.reserve)
        if len(hs) == 1 and tenants == 1:   # the common case: one tenant to move
            h = hs[0]
            return ClearSteps(free, tenants, room, (ClearStep(free + frac_on(h, gid) + r, 0,
                                                              math.inf, ready(h), 1, hs),))
        # clear_cost's order (the ids differ, so the views are never compared)
        keyed = sorted([(ready(h), -frac_on(h, gid), h.id, h) for h in hs])
        hs = [h for *_, h in keyed]
        out = []
        wait, left, total = 0.0, tenants, use.util
        for i, (t, neg_f, _, h) in enumerate(keyed):
            wait = max(wait, t)
            free += -neg_f + r   # -(-f) is f to the bit
            left -= 1
            total -= util_of(h)
            n = use.tenants - (i + 1)
            out.append(ClearStep(free, left,
                                 math.inf if n <= 0 else room_for(n, total, cap, overhead),
                                 wait, i + 1, hs))
        return ClearSteps(self.round.free.free(gid), tenants, room, tuple(out))

    def out_of_reach(self, job: JobView, need) -> bool:
        """Whether no ``num_gpus`` GPUs could be had within ``reserve_horizon_s`` (make_room does nothing).

        Clearing a GPU waits for the tenants it moves, soonest-ready first, so
        it is within the horizon only if its free room plus the room of its
        tenants ready within the horizon fits the job. The GPUs picked cost at
        least the ``num_gpus``-th cheapest; if fewer GPUs than that pass, the
        picked ones are beyond the horizon (or none are picked) and nothing is
        done. The round has only placed jobs before this (``max_reservations``
        is counted down before), so the memo's per-GPU room (``RoomIndex``,
        O(changed GPUs + log n)) bounds the round's.
        """
        k = job.num_gpus
        if self.round.rep is None or not self.round.pol.shortcuts:
            return False
        f = need(self.round.rep)
        if f < MIN_FRACTION or self.round.moves_left != self.round.pol.max_moves:
            return False
        # GPUs it fits on now: room, and calm (counted by band, a little generously)
        lo = util_of(job) - EPS - SLACK
        fitting = self.round.free.count_fitting(f - SLACK,
                                          None if lo <= 0 else min(BANDS, int(lo * BANDS)))
        if fitting >= k:
            return False
        memo, cluster = self.round.memo, self.round.cluster
        key = RoomLayout(self.round.pol.room_key(), cluster.gpus, cluster.reserve_mb)
        index = memo.indexes.get("room")
        if index is None or index.key != key or self.round.now < index.now:
            index = memo.indexes["room"] = RoomIndex(self.round.pol, key, cluster)
        reachable = index.reachable(k, self.round.now, memo.holdings.by_gpu(), memo.holdings.use,
                          f - EPS - SLACK, util_of(job) - EPS - SLACK)
        if fitting + len(reachable) < k:
            return True
        # A gang's GPUs come from one node when some node has k candidates. Before
        # any action this round, every up GPU is one (emptied, it fits the job), so
        # that is so when a node has k up GPUs: then a node with fewer than k GPUs
        # within reach cannot be picked within the horizon.
        up = self.round.free.gpus
        if (k == 1 or self.round.actions or self.round.free.closed
                or exclusive_fraction(self.round.rep, self.round.reserve) < f - EPS + SLACK
                or index.biggest_node(up, cluster.down_nodes) < k):
            return False
        per_node = Counter(map(index.node_of.__getitem__, reachable))
        down = cluster.down_nodes
        return fitting + max((n for node, n in per_node.items() if node not in down),
                             default=0) < k

    def relocate(self, job: JobView) -> Action:
        """Migrate a released job to room elsewhere, or suspend it if there is none."""
        self.round.acted.add(job.id)
        self.round.moves_left -= 1
        util = util_of(job)
        own = {f.gpu for f in job.fragments}
        frac = job.fragments[0].fraction
        fm = self.round.free
        if job.num_gpus == 1 and (fm.chooser is None or not fm.chooser.active):
            # calm is false in the bands below the one under the job's search band:
            # their utilisation room is short of the job's by more than EPS
            one = fm.best_fit(frac, own, lambda gid: self.round.calm(gid, util),
                              skip_below=search_band(util) - 1)
            placed = None if one is None else [one]
        else:
            placed = fm.gang_place(job.num_gpus, frac,
                                   lambda gid: gid not in own and self.round.calm(gid, util))
        if placed is None:
            return Suspend(job.id)
        self.round.take(job.id, util, placed)
        return Migrate(job.id, to_fragments(placed))


def _pick_gpus(costs: list[GpuCost], k: int, gpus,
               cluster: ClusterSnapshot) -> list[GpuCost] | None:
    """The ``k`` GPUs cheapest to clear: one node if it can, else across the nodes a gang may span."""
    if len(costs) < k:
        return None
    costs.sort(key=GpuCost.rank)
    if k == 1:
        return costs[:1]
    by_node: dict[str, list[GpuCost]] = {}
    for c in costs:
        by_node.setdefault(gpus[c.gpu].node, []).append(c)
    best_score, best_pick = None, None
    for node, cs in by_node.items():
        if len(cs) >= k:
            pick = cs[:k]
            score = node_score(pick)
            if best_score is None or score < best_score:
                best_score, best_pick = score, pick
    if best_pick:
        return best_pick
    if cluster.gang_nodes is not None:
        costs = [c for c in costs if cluster.spans_onto(gpus[c.gpu].node)]
    return costs[:k] if len(costs) >= k else None
