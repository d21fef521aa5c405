"""Tiresias's queues, as the authors' code keeps them: each job's place, and the indexes.

Owns ``TiresiasMemo``, the memo ``tfgshare.policies.tiresias.Tiresias`` carries
between decisions (see that module's doc for why it is history, not a cache),
``Place``, where one job stands in its queue, ``RunPart``, a queue's running jobs as one
item of the walk, ``WaitPart``, its waiting jobs as one item, and ``RUN``, ``WAIT``, ``TAIL``, the
parts of a queue. The policy moves jobs between places; this module only holds
them and counts what the job views show. ``tfgshare.policies.tiresias``
re-exports ``TiresiasMemo`` and the parts.

May import: the policy interface (``base``, ``memo``, ``queueing``),
``sortedcontainers`` and the standard library; never the coordinator, agent,
client or simulator (see ``tfgshare.policies``).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from sortedcontainers import SortedList

from .base import JobState, JobView
from .memo import Memo
from .queueing import HOLDING, WAITING

RUN, WAIT, TAIL = 0, 1, 2   # a job's part of its queue: running, waiting, just demoted


@dataclass(slots=True)
class Place:
    """Where one job stands: queue, part and position within the part."""

    queue: int
    part: int
    key: float
    base_service: float = 0.0     # attained GPU-seconds at its last promotion
    base_wait: float | None = None  # total wait when it first ran after that
    since: float = 0.0              # when it was put at the back (TAIL) of its queue


@dataclass(slots=True)
class RunPart:
    """A queue's running jobs ahead of its waiting ones, in the walk as one item: their
    GPUs, how many, and ``rest(free)``, for when they do not all fit: the GPUs and count of
    the longest run of them that fits leaving GPUs free, and the (entry, view) pairs after
    it, to walk one by one."""

    gpus: int
    count: int
    rest: Callable[[int], tuple[int, int, Iterable[tuple[object, JobView]]]]


@dataclass(slots=True)
class WaitPart:
    """A queue's waiting jobs (its WAIT part) in the walk as one item, kept by GPU count:
    the walk takes those that fit as it meets them and passes the others at no cost."""

    lists: Mapping[int, SortedList]   # GPUs -> the entries of the waiting jobs of that many
    views: Mapping[str, JobView]

    def first(self) -> tuple:
        """The part's first entry."""
        return min(lst[0] for lst in self.lists.values())

    def fitting(self, free: int, chosen: list[JobView]) -> tuple[int, tuple | None]:
        """Append to ``chosen``, in walk order, each job whose GPUs are still free when
        the walk meets it, until none are; the GPUs left and the last such job's entry."""
        heap = []
        for g, lst in self.lists.items():
            if g <= free:
                it = iter(lst)
                heap.append((next(it), g, it))
        heapq.heapify(heap)
        last = None
        while heap:
            e, g, it = heap[0]
            if g > free:          # (free only shrinks: no job of this size fits now)
                heapq.heappop(heap)
                continue
            chosen.append(self.views[e[3]])
            free -= g
            last = e
            if free <= 0:
                break
            nxt = next(it, None)
            if nxt is None:
                heapq.heappop(heap)
            else:
                heapq.heapreplace(heap, (nxt, g, it))
        return free, last


class RunPrefix:
    """One queue's running jobs of its RUN part in walk order, their GPUs summed in a
    Fenwick tree: the longest prefix leaving GPUs free is found in O(log n).

    Entries join only behind every entry so far (a RUN key is always a new
    ``tail()``), or again at the place they left with the same key; a place
    left stays, empty, until the positions are renumbered.
    """

    __slots__ = ("ents", "gpus", "tree", "at", "pending", "live")
    slack = 64   # places left kept beyond as many as there are jobs, before renumbering

    def __init__(self) -> None:
        self.ents: list[tuple] = []          # position -> entry (kept when it left)
        self.gpus: list[int] = []            # position -> GPUs (0: left)
        self.tree: list[list[int]] = [[0, 0]]  # 1-based Fenwick of [GPUs, jobs]
        self.at: dict[str, int] = {}         # id -> position
        self.pending: dict[str, tuple[tuple, int]] = {}   # new keys, placed at ``fit``
        self.live = 0

    def add(self, jid: str, entry: tuple, gpus: int) -> None:
        """The running job ``jid`` stands at ``entry`` of this RUN part."""
        i = self.at.get(jid)
        if i is not None and self.ents[i][2] == entry[2]:
            if not self.gpus[i]:   # back at the place it left
                self.ents[i], self.gpus[i] = entry, gpus
                self.live += 1
                self._bump(i, gpus, 1)
        else:
            self.pending[jid] = (entry, gpus)

    def drop(self, jid: str) -> None:
        """The job left the part (or stopped running); its place stays for a return."""
        if self.pending.pop(jid, None) is None:
            i = self.at.get(jid)
            if i is not None and self.gpus[i]:
                self._bump(i, -self.gpus[i], -1)
                self.gpus[i] = 0
                self.live -= 1

    def fit(self, free: int) -> tuple[int, int, tuple | None]:
        """GPUs and count of the longest prefix whose GPUs stay below ``free``, and the
        entry after it (None if there is none)."""
        self._place()
        tree, n = self.tree, len(self.tree) - 1
        pos, g, c, step = 0, 0, 0, 1 << n.bit_length() >> 1
        while step:
            nxt = pos + step
            if nxt <= n:
                s = g + tree[nxt][0]
                if s < free or s == g:   # (a range of places left holds no GPUs)
                    pos, g, c = nxt, s, c + tree[nxt][1]
            step >>= 1
        return g, c, self.ents[pos] if pos < len(self.ents) else None

    def _bump(self, i: int, dg: int, dc: int) -> None:
        tree, i = self.tree, i + 1
        while i < len(tree):
            node = tree[i]
            node[0] += dg
            node[1] += dc
            i += i & -i

    def _place(self) -> None:
        """Put the jobs that came with new keys behind the rest, in key order."""
        if not self.pending:
            return
        new = sorted(self.pending.items(), key=lambda t: t[1][0][2])
        self.pending = {}
        if (self.ents and new[0][1][0][2] < self.ents[-1][2]) or \
                len(self.ents) + len(new) > 2 * (self.live + len(new)) + self.slack:
            # (a key older than the last placed: every job placed again in key order)
            new = sorted([(e[3], (e, g)) for e, g in zip(self.ents, self.gpus) if g]
                         + new, key=lambda t: t[1][0][2])
            self.ents, self.gpus, self.at, self.live = [], [], {}, 0
            self.tree = [[0, 0]]
        for jid, (e, g) in new:
            self.at[jid] = len(self.ents)
            self.ents.append(e)
            self.gpus.append(g)
            self.live += 1
        if len(self.ents) >= len(self.tree):
            self._build()
        else:
            for jid, (e, g) in new:
                self._bump(self.at[jid], g, 1)

    def _build(self) -> None:
        """The Fenwick tree again, for room to twice the positions, in O(positions)."""
        size = 1 << (2 * len(self.ents) + 16).bit_length()
        tree = [[0, 0] for _ in range(size)]
        gpus = self.gpus
        for i in range(1, size):
            node = tree[i]
            if i <= len(gpus) and gpus[i - 1]:
                node[0] += gpus[i - 1]
                node[1] += 1
            up = i + (i & -i)
            if up < size:
                tree[up][0] += node[0]
                tree[up][1] += node[1]
        self.tree = tree


class TiresiasMemo(Memo):
    """The queues as the authors' code keeps them: each job's place, and counters.

    For ``dlas-gpu`` (no promotion, no ``min_run_s``) it also keeps the walk
    itself incrementally: the jobs in walk order, the running ones apart, the
    waiting ones by queue and GPU count, GPU counts, each holding job's next
    threshold crossing in a heap, and each running job's wake-up moment by GPU
    count; a decision then costs O(changed jobs x log n) plus the part of the walk
    it needs (a queue's waiting jobs that do not fit cost nothing).
    """

    def __init__(self) -> None:
        self.places: dict[str, Place] = {}
        self.seq = 0.0      # last key given at the back of a part
        self.front = 0.0    # last key given at the front of the waiting part
        self.wake: float | None = None
        super().__init__()

    def reset(self) -> None:
        # the places stay (they are history); the indexes over them are rebuilt
        self.restarted = True
        self.pending: set[str] = set()         # views changed, or demoted last time (TAIL)
        self.order = SortedList()              # (queue, part, key, id): the walk
        self.running = SortedList()            # the same, running jobs only
        self.entry: dict[str, tuple] = {}      # id -> its tuple in ``order``
        self.n_waiting = 0
        self.n_running = 0
        self.held_other = 0                    # GPUs of holding jobs that are not running
        self.crossings: list = []              # heap (about when, n, id, view): next threshold
        self.pushed = 0
        self.jumps: dict[int, SortedList] = {} # GPUs -> (moment c, id) of running jobs
        self.jump_of: dict[str, tuple[int, tuple]] = {}
        # queue -> [GPUs, running jobs, entries] of its RUN part in ``order`` (the walk
        # passes a part of running jobs whole when they all fit), and id -> (queue, GPUs,
        # running) counted there
        self.run_part: dict[int, list[int]] = {}
        self.in_run_part: dict[str, tuple[int, int, bool]] = {}
        self.run_prefix: dict[int, RunPrefix] = {}   # queue -> its RUN part's running jobs
        # queue -> GPUs -> entries of its WAIT part (waiting jobs only), and id -> (queue, GPUs)
        self.waits: dict[int, dict[int, SortedList]] = {}
        self.wait_of: dict[str, tuple[int, int]] = {}

    def changed(self, jid: str, old: JobView | None, new: JobView | None) -> None:
        self.pending.add(jid)
        for v, sign in ((old, -1), (new, 1)):
            if v is None:
                continue
            s = v.state
            if s is JobState.RUNNING:
                self.n_running += sign
            elif s in HOLDING:
                self.held_other += sign * v.num_gpus
            elif s in WAITING:
                self.n_waiting += sign

    def run_rest(self, q: int, free: int | None) -> tuple[int, int, Iterable]:
        """``RunPart.rest`` of queue ``q`` (``free`` None: all its RUN part's entries)."""
        gpus, count, first = (0, 0, (q, RUN)) if free is None else \
            self.run_prefix[q].fit(free)
        views = self.tracker.views
        return gpus, count, () if first is None else ((e, views[e[3]]) for e in
                                                       self.order.irange(first, (q, WAIT),
                                                                         inclusive=(True, False)))

    def tail(self) -> float:
        """A key behind every key given so far."""
        self.seq += 1.0
        return self.seq
