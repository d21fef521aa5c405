"""Tiresias's queues, as the authors' code keeps them: each job's place, and the indexes.

Owns ``TiresiasMemo``, the memo ``tfgshare.policies.tiresias.Tiresias`` carries
between decisions (see that module's doc for why it is history, not a cache),
``Place``, where one job stands in its queue, ``RunPart``, a queue's running jobs as one
item of the walk, and ``RUN``, ``WAIT``, ``TAIL``, the
parts of a queue. The policy moves jobs between places; this module only holds
them and counts what the job views show. ``tfgshare.policies.tiresias``
re-exports ``TiresiasMemo`` and the parts.

May import: the policy interface (``base``, ``memo``, ``queueing``),
``sortedcontainers`` and the standard library; never the coordinator, agent,
client or simulator (see ``tfgshare.policies``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

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
    GPUs, how many, and the (entry, view) pairs to walk one by one if they do not all fit."""

    gpus: int
    count: int
    jobs: Iterable[tuple[object, JobView]]


class TiresiasMemo(Memo):
    """The queues as the authors' code keeps them: each job's place, and counters.

    For ``dlas-gpu`` (no promotion, no ``min_run_s``) it also keeps the walk
    itself incrementally: the jobs in walk order, the running ones apart, GPU
    counts, each holding job's next threshold crossing in a heap, and each
    running job's wake-up moment by GPU count; a decision then costs
    O(changed jobs x log n) plus the part of the walk it needs.
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

    def tail(self) -> float:
        """A key behind every key given so far."""
        self.seq += 1.0
        return self.seq
