"""What fgs keeps in its memo between rounds to make room fast: per-GPU room and clear costs.

``RoomIndex`` bounds whether any ``num_gpus`` GPUs could be cleared within
the reservation horizon (``make_room.MakeRoom.out_of_reach``); ``ClearIndex``
keeps each GPU's clear steps (``MakeRoom.clear_steps``) per gang size and its
clear cost (``MakeRoom.clear_cost``) for the latest promoted gangs' sizes, so a
round re-prices only the GPUs whose tenants changed (a 1-GPU job is priced on
every GPU at once from its steps as arrays, ``step_table``). Both
give the answers of pricing every GPU; the memo adds changed GPUs to their
``stale`` sets.

Imports: ``policies`` below fgs, ``fgs.records``, ``fgs.fit`` and ``fgs.step_table``.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, insort
from dataclasses import dataclass, field

from sortedcontainers import SortedList

from ..base import ClusterSnapshot, JobState, JobView
from ..interference import room_for
from ..placement import EPS, free_fraction, reserve_fraction
from ..prediction import remaining_s
from .fit import util_of
from .step_table import StepTable
from .records import (ClearClock, ClearCost, ClearJob, ClearLayout, ClearRead, ClearStep,
                      ClearSteps, CostRank, GpuCost, NodeScore, Reach, ReachMoment, RoomLayout)

__all__ = ["ClearIndex", "GangClearSteps", "JobClearCosts", "RoomIndex", "clear_cost_from",
           "finish_in", "frac_on", "node_score", "retimed"]


@dataclass(slots=True)
class ReachForGang:
    """``RoomIndex``'s GPUs' reach for one gang size, and how to keep it current."""
    rooms: dict[str, Reach] = field(default_factory=dict)   # GPU -> its reach
    by_memory: SortedList = field(default_factory=SortedList)     # (reach memory, GPU)
    by_util_room: SortedList = field(default_factory=SortedList)  # (reach util room, GPU)
    moments: list[ReachMoment] = field(default_factory=list)      # heap
    stale: set[str] = field(default_factory=set)   # GPUs to work out again


class RoomIndex:
    """Per gang size asked: each GPU's free room plus that of its tenants ready within the horizon.

    Kept in the memo. A tenant's readiness (``ready_in``) is fixed by its view
    but for one that may be moved once past its minimum run, whose readiness
    falls one second per second: the moment it is ready within
    ``reserve_horizon_s`` is an absolute time, queued in a heap; a GPU's room
    is worked out again when one of its tenants passes that moment or its
    tenants change.
    """

    reads = "reach"   # a GPU's room depends only on this key of its tenants (``FgsMemo.keys``)

    def __init__(self, pol, key: RoomLayout | tuple, cluster) -> None:
        self.pol, self.key = pol, key
        self.gpus = {g.id: g for g in cluster.gpus}
        self.node_of = {g.id: g.node for g in cluster.gpus}
        self.reserve = cluster.reserve_mb
        self.now = -math.inf
        self.by_size: dict[int, ReachForGang] = {}   # gang size -> its GPUs' reach
        self.stale: set[str] = set()   # GPUs whose tenants changed (the memo adds them)
        self._nodes_down: frozenset | None = None   # the down nodes ``_biggest`` is for
        self._biggest = 0                           # the most up GPUs on a node

    def biggest_node(self, up: dict, down: frozenset) -> int:
        """The most up GPUs on one node."""
        if self._nodes_down is None or self._nodes_down != down:
            sizes: dict[str, int] = {}
            for g in up.values():
                sizes[g.node] = sizes.get(g.node, 0) + 1
            self._nodes_down, self._biggest = down, max(sizes.values(), default=0)
        return self._biggest

    def reachable(self, k: int, now: float, holders: dict[str, list[JobView]], use: dict,
             room: float, util: float) -> list[str]:
        """The GPUs that moving their tenants ready within the horizon (``k``-GPU job) clears
        for ``room`` and a tenant of utilisation ``util``.

        Per GPU: its free room plus that of those tenants, and the utilisation
        room left beside the others (interference model). Both only grow as
        more tenants go, so a GPU not cleared by all of them is not cleared
        within the horizon.
        """
        self.now = now
        if self.stale:
            for got in self.by_size.values():
                got.stale |= self.stale
            self.stale = set()
        got = self.by_size.get(k)
        if got is None:
            got = self.by_size[k] = ReachForGang(stale=set(holders))
        rooms, by_mem, by_calm = got.rooms, got.by_memory, got.by_util_room
        moments, stale = got.moments, got.stale
        while moments and moments[0].at <= now:
            moment = heapq.heappop(moments)
            if rooms.get(moment.gpu) == moment.reach:   # else worked out again since
                stale.add(moment.gpu)
        pol = self.pol
        for gid in stale:
            old = rooms.get(gid)
            g = self.gpus.get(gid)
            hs = holders.get(gid)
            if g is None or not hs:
                if old is not None:
                    del rooms[gid]
                    by_mem.remove((old.memory, gid))
                    by_calm.remove((old.util_room, gid))
                continue
            r = reserve_fraction(g, self.reserve)
            u = use.get(gid)
            mem = free_fraction(g, u, self.reserve)
            left, left_util = (u.tenants, u.util) if u is not None else (0, 0.0)
            later = []
            for h in hs:
                t = self.ready_from(h, k)
                if t <= now:
                    mem += frac_on(h, gid) + r
                    left -= 1
                    left_util -= util_of(h)
                elif t != math.inf:
                    later.append(t)
            if left <= 0:
                calm = math.inf
            elif left >= pol.max_cotenants:
                calm = -math.inf
            else:
                calm = room_for(left, left_util, pol.slowdown_cap, pol.interference_overhead)
            reach = Reach(mem, calm)
            if old != reach:   # else sorted as before (a tenant's view changed, not its room)
                if old is not None:
                    by_mem.remove((old.memory, gid))
                    by_calm.remove((old.util_room, gid))
                rooms[gid] = reach
                by_mem.add((mem, gid))
                by_calm.add((calm, gid))
            for t in later:
                heapq.heappush(moments, ReachMoment(t, gid, reach))
        stale.clear()
        i = by_mem.bisect_left((room, ""))
        j = by_calm.bisect_left((util, ""))
        if len(by_mem) - i <= len(by_calm) - j:
            return [gid for _, gid in by_mem.islice(i) if rooms[gid].util_room >= util]
        return [gid for _, gid in by_calm.islice(j) if rooms[gid].memory >= room]

    def ready_from(self, h: JobView, k: int) -> float:
        """From when ``ready_in(h, k)`` is within the horizon (early, never late); inf: never."""
        pol, horizon = self.pol, self.pol.reserve_horizon_s
        if h.num_gpus <= k and pol.may_be_moved(h):
            if h.last_start is None:
                return -math.inf
            t = h.last_start + pol.min_run(h) - horizon
            return t - 1e-6 * (1.0 + abs(t)) - 1e-6 * (1.0 + horizon)
        if h.state is not JobState.RUNNING:
            return -math.inf if 1.0 <= horizon else math.inf
        return -math.inf if finish_in(h, horizon) != math.inf else math.inf


class ClearIndex:
    """Each up GPU's clear steps and costs (``clear_cost``) for the latest promoted jobs (memo).

    A GPU's cost depends on its tenants' views, the promoted job's gang size,
    fractions and utilisation, and on time only through tenants inside their
    minimum run (their wait is ``min_run - (now - last_start)``); a tenant
    movable now stays movable while its view holds, and every other tenant's
    wait is fixed by its view. So a cost holds until what it reads of its GPU's
    tenants changes (their ``clear`` key, ``Fgs.tenant_keys``: a running job's
    end only while it is within the reservation horizon, since a wait beyond it
    is inf; the memo adds those GPUs to ``stale``), except on the GPUs with such a
    tenant (``timed``): their steps are brought to the read's time from their
    clocks (``retimed``, the same sums on the same numbers) and their costs
    priced again. A 1-GPU job's pick is read from the steps (``StepTable``);
    a gang's costs are kept for the ``KEEP`` job sizes read last (the
    promoted job first in line can change back and forth), each sorted as
    ``_pick_gpus`` sorts them, overall and per node (lists kept sorted by
    bisection), so a pick reads the cheapest instead of sorting every GPU;
    the timed GPUs' costs, new at every read, are kept apart and merged in
    at the pick.
    """

    KEEP = 4
    reads = "clear"   # a GPU's costs depend only on this key of its tenants (``FgsMemo.keys``)

    def __init__(self, layout: ClearLayout | tuple, gpus: tuple, up: dict,
                 order: dict) -> None:
        self.layout, self.gpus = layout, gpus   # what the costs are for
        self.up = up                            # up GPU id -> GPU, in cluster order
        self.order = order                      # GPU -> its place in the cluster (the scan's order)
        self.reps: dict[int, object] = {}       # memory size -> one up GPU of that size
        for g in up.values():
            self.reps.setdefault(g.memory_mb, g)
        self.now = -math.inf
        self.stale: set[str] = set()            # GPUs whose tenants changed (the memo adds them)
        # (gang size, fractions by size, utilisation) -> its costs, the latest read last
        self.by_job: dict[ClearJob, JobClearCosts] = {}
        self.steps: dict[int, GangClearSteps] = {}   # gang size -> each GPU's ``clear_steps``
        self.current: JobClearCosts | None = None
        self.current_steps: GangClearSteps | None = None

    def start_steps(self, k: int) -> tuple[GangClearSteps, set[str]]:
        """Begin a read of the steps for gang size ``k``: them, and the GPUs whose steps
        to work out again."""
        if self.stale:
            for got in (*self.by_job.values(), *self.steps.values()):
                got.stale |= self.stale
            self.stale = set()
        steps = self.steps.get(k)
        if steps is None:
            steps = self.steps[k] = GangClearSteps()
            if k == 1:   # a 1-GPU job's pick is read from every GPU's steps at once
                steps.table = StepTable(len(self.gpus), [g.memory_mb for g in self.gpus])
            return steps, set(self.up)
        redo_steps, steps.stale = steps.stale, set()
        return steps, redo_steps

    def start(self, k: int, job: ClearJob) -> ClearRead:
        """Begin a read for a job of this size (``k`` GPUs, more than one)."""
        steps, redo_steps = self.start_steps(k)
        by_job = self.by_job
        got = by_job.pop(job, None)
        new = got is None
        if new:
            got = JobClearCosts()
            redo = self.up.keys()
        else:
            redo = got.stale | got.timed
            got.stale = set()
        by_job[job] = got
        if len(by_job) > self.KEEP:
            del by_job[next(iter(by_job))]
        self.current, self.current_steps = got, steps
        return ClearRead(steps, redo_steps, redo, new)

    def fill(self, costs, timed) -> None:
        """Keep ``clear_cost``'s answers (GPU, cost or None) for new costs of every up GPU
        (those of the ``timed`` GPUs are kept out of the sorted lists)."""
        k, up, order = self.current, self.up, self.order
        nodes: dict[str, list[CostRank]] = {}
        for gid, c in costs:
            if c is not None:
                wait, moves, tenants = c
                new = k.costs[gid] = GpuCost(wait, moves, order[gid], gid, tenants)
                if gid in timed:
                    k.loose.add(gid)
                    continue
                nodes.setdefault(up[gid].node, []).append(new.rank())
        k.all = sorted(c for cs in nodes.values() for c in cs)
        k.by_node = {node: sorted(cs) for node, cs in nodes.items()}
        k.dirty = set(nodes)

    def put(self, gid: str, c: ClearCost | None, timed: bool) -> None:
        """Keep ``clear_cost``'s answer for this GPU (None: it cannot be cleared); a
        ``timed`` GPU's (priced again at every read) is kept out of the sorted lists."""
        k = self.current
        old = k.costs.pop(gid, None)
        new = None
        if c is not None:
            wait, moves, tenants = c
            new = GpuCost(wait, moves, self.order[gid], gid, tenants)
        node = self.up[gid].node
        if old is not None:
            if gid in k.loose:
                k.loose.remove(gid)
            elif (new is not None and not timed and old.wait_s == new.wait_s
                  and old.moves == new.moves):
                k.costs[gid] = new   # sorted as before: only its tenants' views are new
                return
            else:
                was = old.rank()
                _remove(k.all, was)
                _remove(k.by_node[node], was)
                k.dirty.add(node)
        if new is None:
            return
        k.costs[gid] = new
        if timed:
            k.loose.add(gid)
            return
        rank = new.rank()
        insort(k.all, rank)
        got = k.by_node.get(node)
        if got is None:
            got = k.by_node[node] = []
        insort(got, rank)
        k.dirty.add(node)

    def pick(self, n: int, cluster: ClusterSnapshot) -> list[GpuCost] | None:
        """What ``_pick_gpus`` picks from the scan of every GPU (see ``cheapest``), ``n`` > 1 GPUs.

        The sorted lists' cheapest are merged with the timed GPUs' costs.
        """
        k, up = self.current, self.up
        costs = k.costs
        if len(costs) < n:
            return None
        loose = [costs[gid].rank() for gid in k.loose]
        # per node with n candidates in the lists: its n cheapest and their score, kept by score
        for node in k.dirty:
            old = k.scores.pop(node, None)
            if old is not None:
                _remove(k.best, (old, node))
            cs = k.by_node.get(node)
            if cs is not None and len(cs) >= n:
                score = node_score(cs[:n])
                k.scores[node] = score
                insort(k.best, (score, node))
        k.dirty = set()
        mixed: dict[str, list[CostRank]] = {}   # node -> its timed GPUs' costs
        for c in loose:
            mixed.setdefault(up[c.gpu].node, []).append(c)
        best_score, best_pick = None, None   # the best node's score and n cheapest
        for score, node in k.best:
            if node not in mixed:
                best_score, best_pick = score, k.by_node[node][:n]
                break
        for node, cs in mixed.items():
            pick = sorted(cs + k.by_node.get(node, [])[:n])[:n]
            if len(pick) >= n:
                score = node_score(pick)
                if best_score is None or score < best_score:
                    best_score, best_pick = score, pick
        if best_pick:
            return [costs[c.gpu] for c in best_pick]
        chosen = []
        for c in heapq.merge(k.all, sorted(loose)):
            if cluster.spans_onto(up[c.gpu].node):
                chosen.append(costs[c.gpu])
                if len(chosen) == n:
                    return chosen
        return None


class GangClearSteps:
    """Each up GPU's ``clear_steps`` for one gang size (see ``ClearIndex``)."""

    def __init__(self) -> None:
        self.stale: set[str] = set()        # GPUs whose tenants changed since last read
        self.steps: dict[str, ClearSteps] = {}
        # GPUs with a tenant inside its minimum run -> their clocks (``MakeRoom.clock``)
        self.clocks: dict[str, ClearClock] = {}
        self.table: StepTable | None = None   # the steps as arrays (gang size 1)


class JobClearCosts:
    """One job size's kept clear costs (see ``ClearIndex``); the lists are kept sorted."""

    def __init__(self) -> None:
        self.stale: set[str] = set()        # GPUs whose tenants changed since last read
        self.timed: set[str] = set()        # GPUs with a tenant inside its minimum run
        self.costs: dict[str, GpuCost] = {}
        self.loose: set[str] = set()        # GPUs whose costs are not in the lists (timed)
        self.all: list[CostRank] = []       # every other cost's rank
        self.by_node: dict[str, list[CostRank]] = {}
        self.dirty: set[str] = set()        # nodes whose costs changed since the last pick
        self.scores: dict[str, NodeScore] = {}   # node -> score of its cheapest (pick's gang size)
        self.best: list[tuple[NodeScore, str]] = []   # (score, node)


def retimed(gid: str, steps: ClearSteps, clock: ClearClock,
            now: float) -> tuple[ClearSteps, ClearClock | None] | None:
    """A GPU's ``clear_steps`` at ``now`` from its ``clock`` (``MakeRoom.clock``), its
    tenants unchanged since: (steps, clock or None if no wait falls any more), or None
    if the tenants' order (soonest ready first) changed.

    The waits are ``ready_in``'s sums on the same numbers and the running
    maxima are taken in the same order, so the steps are those ``clear_steps``
    would give to the bit.
    """
    moves = steps.moves
    waits = list(clock.waits)
    ticking = []
    for timer in clock.timers:
        i, last, min_run = timer.place, timer.last_start, timer.min_run
        if now - last >= min_run:   # movable now (``RoundState.may_move``)
            waits[i] = 0.0
        else:
            waits[i] = min_run - (now - last)
            ticking.append(timer)
    hs = moves[0].tenants   # the tenants in the order they are moved
    for i in range(len(hs) - 1):
        a, b = waits[i], waits[i + 1]
        if a > b or (a == b and (-frac_on(hs[i], gid), hs[i].id)
                     > (-frac_on(hs[i + 1], gid), hs[i + 1].id)):
            return None
    out, wait = [], 0.0
    for step, w in zip(moves, waits):
        wait = max(wait, w)   # a lone tenant's wait w is never -0.0: max(0.0, w) is w
        out.append(ClearStep(step.free, step.tenants_left, step.util_room, wait, step.moved, hs))
    return (ClearSteps(steps.free, steps.tenants, steps.util_room, tuple(out)),
            ClearClock(tuple(waits), tuple(ticking)) if ticking else None)


def node_score(pick: list[GpuCost] | list[CostRank]) -> NodeScore:
    """How a node's ``k`` cheapest GPUs for a gang compare with another node's."""
    return NodeScore(max(c.wait_s for c in pick), sum(c.moves for c in pick), pick[0].order)


def _remove(items: list, x) -> None:
    """Take ``x`` out of the sorted list ``items`` (it must be there)."""
    i = bisect_left(items, x)
    if i == len(items) or items[i] != x:
        raise KeyError(x)
    del items[i]


def clear_cost_from(steps: ClearSteps, f: float, util: float, cap: int) -> ClearCost | None:
    """``clear_cost`` of a GPU from its ``clear_steps``."""
    if steps.util_room is None:   # idle
        return ClearCost(0.0, 0, ()) if steps.free >= f - EPS else None
    if steps.free >= f - EPS and steps.tenants < cap and util <= steps.util_room + EPS:
        return ClearCost(0.0, 0, ())
    for step in steps.moves:
        if step.free >= f - EPS and step.tenants_left < cap and util <= step.util_room + EPS:
            hs, n = step.tenants, step.moved
            return ClearCost(step.wait_s, n, hs if n == len(hs) else hs[:n])
    return None


def finish_in(job: JobView, horizon: float) -> float:
    """Seconds until a running job is predicted to finish, or inf if not within ``horizon``
    (or not predicted): past the horizon, how far past is never read."""
    left = remaining_s(job)
    if left is None:
        return math.inf
    left = max(left, EPS)
    return left if left <= horizon else math.inf


def frac_on(job: JobView, gid: str) -> float:
    """The fraction of ``gid`` the job holds (0 if none)."""
    for f in job.fragments:
        if f.gpu == gid:
            return f.fraction
    return 0.0
