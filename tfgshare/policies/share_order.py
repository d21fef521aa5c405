"""A queue order with a GPU-sharing placement rule: ``fifo/fgd``, ``sjf/best-fit``, ...

The order is the baseline's: ``fifo`` (arrival order, head-of-line blocking, as
:mod:`fifo`) or ``sjf`` (shortest predicted job first, a job with no prediction first
sampled, no blocking, as :mod:`sjf`); neither preempts. The placement is one of
:mod:`share_rules`' (FGD and the baselines of its paper): where a job asks for a share of
a GPU (a GPU-sharing trace's ``requested_fraction``, or, once sampled, the larger of its
memory's fraction and its utilisation: its share of the GPU's memory and time) it may
share a GPU with others; a job with neither gets whole GPUs, as under the exclusive
baselines. The simulator's cluster has no host CPU or memory, so rules see GPUs only. A
job's GPU types (``JobView.gpu_types``, an Alibaba pod's ``gpu_spec``) limit the nodes the
rules consider; the other policies do not read them. The rules place a task on one node;
a job wider than any node takes whole idle GPUs on the fewest nodes, as the exclusive
baselines do. Ties between nodes go to the first in an order seeded by ``seed``.

FGD's target workload is the jobs the policy has seen arrive: the commonest requests,
as its authors take it from the trace (there known in advance; here learnt online, and
made again whenever the requests seen have grown by 5 %). So, unlike the other policies'
memos, this one is more than a cache: a fresh memo knows only the jobs alive now, and
``fifo/fgd`` may then decide differently (the other rules do not read it).
"""

from __future__ import annotations

import hashlib
import math
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

from .base import Action, ClusterSnapshot, Fragment, JobState, JobView, Policy, Start
from .memo import Memo
from .placement import EPS, exclusive_fraction, fraction_for, up_gpus
from .prediction import remaining_s
from .queueing import WAITING
from .share_rules import (MILLI, RULE_NAMES, Ask, Fragmentation, NodeRoom, Workload,
                          make_rule, tag)

ORDERS = ("fifo", "sjf")
REFRESH = 0.05        # FGD's target workload is made again when the requests grow 5 %
HOST = 1 << 40        # a node's CPU and memory: not modelled by the simulator, never short


class ShareMemo(Memo):
    """Waiting jobs in the order's key; every request seen (FGD's target workload)."""

    def __init__(self, order: str) -> None:
        self.order = order
        super().__init__()

    def reset(self) -> None:
        self.queue: dict[str, tuple] = {}
        self.seen: dict[str, tuple[int, int]] = {}     # job id -> (GPUs, milli) asked
        self.asked: Counter = Counter()                # (GPUs, milli) -> jobs seen asking
        self.frag: Fragmentation | None = None         # FGD's measure of ``asked``, cached
        self.frag_at = 0                               # how many requests it was made from

    def see(self, jid: str, request: tuple[int, int]) -> None:
        """Count a job's request into the target workload (once per job)."""
        if jid not in self.seen:
            self.seen[jid] = request
            self.asked[request] += 1

    def fragmentation(self) -> Fragmentation:
        """FGD's fragmentation measure against the requests seen so far, made again
        whenever they have grown by ``REFRESH`` since it was last made."""
        seen = len(self.seen)
        if self.frag is None or seen > self.frag_at * (1 + REFRESH):
            self.frag = Fragmentation(Workload.of_counts(Counter(
                {Ask(0, 0, n, m): k for (n, m), k in self.asked.items()})))
            self.frag_at = seen
        return self.frag

    def changed(self, jid: str, old: JobView | None, new: JobView | None) -> None:
        self.queue.pop(jid, None)
        if new is None or new.state not in WAITING:
            return
        if self.order == "fifo":
            key: tuple = (new.submit_time, jid)
        else:
            left = remaining_s(new)
            first = 0 if left is None and new.state is JobState.QUEUED else 1
            key = (first, 0.0 if first == 0 else (math.inf if left is None else left),
                   new.submit_time, jid)
        self.queue[jid] = key


@dataclass
class ShareOrder(Policy):
    """Jobs in ``order``, each placed by the rule ``placement`` (see the module doc)."""

    order: str = "fifo"
    placement: str = "fgd"
    seed: int = 0                  # for the rules' random tie-breaks
    headroom: float = 0.1          # over a sampled peak, as fgs and gandiva size fractions
    tick_s: float | None = field(default=None, init=False)
    name: str = field(default="", init=False)

    def __post_init__(self) -> None:
        if self.order not in ORDERS:
            raise ValueError(f"unknown order {self.order!r}; valid: {', '.join(ORDERS)}")
        if self.placement not in RULE_NAMES:
            raise ValueError(f"unknown placement {self.placement!r}; valid: "
                             f"{', '.join(RULE_NAMES)}")
        self.name = f"{self.order}/{self.placement}"

    def new_memo(self) -> ShareMemo:
        """An empty memo (see ``policies.memo``)."""
        return ShareMemo(self.order)

    def decide(self, now: float, cluster: ClusterSnapshot, jobs: Sequence[JobView],
               memo: ShareMemo | None = None) -> list[Action]:
        """Start waiting jobs in order, each where the placement rule puts it."""
        memo = self.new_memo() if memo is None else memo
        memo.sync(jobs)
        if not memo.queue:
            return []
        gpus = up_gpus(cluster)
        if not gpus:
            return []
        reserve = cluster.reserve_mb
        views = memo.tracker.views
        smallest = min(gpus.values(), key=lambda g: g.memory_mb)
        for jid in memo.queue:
            if jid not in memo.seen:
                memo.see(jid, _request(views[jid], smallest, reserve, self.headroom))
        rng = random.Random(f"{self.seed}:{now!r}")
        rule = make_rule(self.placement, rng,
                         frag=memo.fragmentation() if self.placement == "fgd" else None)
        nodes, where = _rooms(cluster, memo.holdings.use, memo.holdings.holders.values())
        actions: list[Action] = []
        for jid, _ in sorted(memo.queue.items(), key=lambda kv: kv[1]):
            job = views[jid]
            if job.num_gpus > len(gpus):
                continue
            sample = self.order == "sjf" and job.state is JobState.QUEUED \
                and remaining_s(job) is None
            start = self._place(job, nodes, where, gpus, smallest, reserve, rule, rng, sample)
            if start is None:
                if self.order == "fifo":
                    break          # head-of-line blocking, as fifo
                continue
            actions.append(start)
        return actions

    def _place(self, job: JobView, nodes: list[NodeRoom], where: dict[str, list[str]],
               gpus: dict, smallest, reserve: float, rule, rng: random.Random,
               sample: bool) -> Start | None:
        """A Start on the rule's node and GPUs, with the job's fraction of the smallest
        GPU (so it fits in memory on any), or None when no node holds it."""
        frac = share_of(job, smallest, reserve, self.headroom)
        num, milli = _request(job, smallest, reserve, self.headroom)
        if num > max(len(r.gpus) for r in nodes):
            return _span(job, nodes, where, gpus, reserve, sample)
        pick = rule.choose(nodes, Ask(0, 0, num, milli, job.gpu_types), rng,
                           [_rank(self.seed, r.name) for r in nodes])
        if pick is None:
            return None
        room = nodes[pick[0]]
        ids = [where[room.name][i] for i in pick[1]]
        whole = milli == MILLI
        for i in pick[1]:
            room.gpus[i] -= milli
        room.tasks[tag(Ask(0, 0, num, milli))] += 1
        return Start(job.id, tuple(Fragment(g, exclusive_fraction(gpus[g], reserve)
                                            if whole else frac) for g in ids),
                     sample_only=sample)


def _rank(seed: int, node: str) -> int:
    """A node's place in the seeded tie-break order (the same in every round)."""
    return int.from_bytes(hashlib.blake2b(f"{seed}\x00{node}".encode(),
                                          digest_size=8).digest(), "little")


def _span(job: JobView, nodes: list[NodeRoom], where: dict[str, list[str]], gpus: dict,
          reserve: float, sample: bool) -> Start | None:
    """A job wider than any node (the rules place a task on one node): whole idle GPUs
    on the fewest nodes, the nodes with the most idle GPUs first, as the exclusive
    baselines span nodes; None if too few GPUs are idle."""
    order = sorted(range(len(nodes)), key=lambda k: (-nodes[k].gpus.count(MILLI), k))
    chosen: list[tuple[NodeRoom, int]] = []
    for k in order:
        room = nodes[k]
        for i, free in enumerate(room.gpus):
            if free == MILLI and len(chosen) < job.num_gpus:
                chosen.append((room, i))
    if len(chosen) < job.num_gpus:
        return None
    frags = []
    for room, i in chosen:
        room.gpus[i] = 0
        gid = where[room.name][i]
        frags.append(Fragment(gid, exclusive_fraction(gpus[gid], reserve)))
    return Start(job.id, tuple(frags), sample_only=sample)


def share_of(job: JobView, gpu, reserve: float, headroom: float) -> float:
    """The fraction of ``gpu`` the job asks for: its requested share, else the larger of
    its sampled memory's fraction and its sampled utilisation (a share of the GPU's memory
    and of its time), else the whole GPU."""
    frac = fraction_for(job, gpu, headroom, reserve)
    if job.requested_fraction is None and job.sample is not None:
        frac = min(exclusive_fraction(gpu, reserve), max(frac, job.sample.gpu_util))
    return frac


def _request(job: JobView, gpu, reserve: float, headroom: float) -> tuple[int, int]:
    """(GPUs, milli per GPU) the job asks of GPUs like ``gpu``: 1000 for whole GPUs, else
    its share plus its own context reserve (a GPU's free milli count no reserve)."""
    frac = share_of(job, gpu, reserve, headroom)
    if frac >= exclusive_fraction(gpu, reserve) - EPS:
        return job.num_gpus, MILLI
    own = math.ceil(reserve / gpu.memory_mb * MILLI - 1e-9)
    return job.num_gpus, min(MILLI, math.ceil(frac * MILLI - 1e-9) + own)


def _rooms(cluster: ClusterSnapshot, use, holders) -> tuple[list[NodeRoom],
                                                             dict[str, list[str]]]:
    """Each up node's GPUs as free milli (an idle GPU: 1000; a held one: what its tenants
    and their context reserves leave), their ids, and the kinds of the jobs it holds (for
    clustering)."""
    where: dict[str, list[str]] = {}
    free: dict[str, list[int]] = {}
    kinds: dict[str, str] = {}
    reserve = cluster.reserve_mb
    for gid, g in up_gpus(cluster).items():
        u = use.get(gid)
        if u is None or u.tenants == 0:
            milli = MILLI
        else:
            # what is not held, less the tenants' context reserves (a newcomer's own
            # reserve is in its request, see _request)
            left = 1.0 - u.used - u.tenants * reserve / g.memory_mb
            milli = max(0, math.floor(left * MILLI + 1e-9))
        where.setdefault(g.node, []).append(gid)
        free.setdefault(g.node, []).append(milli)
        kinds[g.node] = g.kind
    tasks: dict[str, Counter] = {n: Counter() for n in where}
    gpus = up_gpus(cluster)
    for view in holders:
        frags = [f for f in view.fragments if f.gpu in gpus]
        if not frags:
            continue
        whole = frags[0].fraction >= exclusive_fraction(gpus[frags[0].gpu], reserve) - EPS
        kind = "share" if view.num_gpus == 1 and not whole else f"{view.num_gpus}-gpu"
        for node in {gpus[f.gpu].node for f in frags}:
            tasks[node][kind] += 1
    nodes = [NodeRoom(n, kinds[n], HOST, HOST, free[n], HOST, HOST, tasks[n])
             for n in where]
    return nodes, where
