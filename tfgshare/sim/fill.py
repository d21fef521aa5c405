"""FGD's experiment: tasks arrive and never leave until the cluster is full; how much of
the arrived GPU demand each placement rule allocates, and how fragmented it leaves the
GPUs.

The experiment of Weng et al. (ATC '23, section 6) as their simulator runs it: the pod
list is shuffled (seeded) and grown by tasks drawn from it until the requested GPUs reach
``ratio`` (1.3 by default) of the cluster's; the tasks arrive one by one, each placed by
the rule or failed where no node can hold it. After each arrival we record the arrived
and allocated GPU demand and the fragmentation (FGD's measure, summed over the nodes,
against the target workload of the original pod list). Placement rules are
:mod:`tfgshare.policies.share_rules`; nothing here imports TensorFlow.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

from tfgshare.policies.base import GPU, ClusterSnapshot
from tfgshare.policies.frag_choice import LeastFragmenting, sigmoid_score
from tfgshare.policies.freemap import FreeMap
from tfgshare.policies.share_rules import (MAX_NODE_CPU, MAX_NODE_GPU, MILLI, Ask,
                                           Fragmentation, NodeRoom, Workload, feasible,
                                           make_rule, take)

from .alibaba import Node, Pod

DEFAULT_RATIO = 1.3
FILL_RULES = ("random-fit", "best-fit", "dot-product", "packing", "clustering", "fgd", "fgs",
              "fgs-frag")


@dataclass(frozen=True)
class FillPoint:
    """The cluster after the ``arrived``-th task: demand and allocation in milli-GPUs."""

    arrived: int          # tasks arrived so far
    failed: int           # of them, tasks no node could hold
    arrived_milli: int    # GPU demand of the arrived tasks
    allocated_milli: int  # GPU demand placed
    frag_milli: float     # FGD's fragmentation of the free GPUs (summed over nodes)
    used_gpus: int        # GPUs holding at least one task


def ask_of(pod: Pod) -> Ask:
    """A pod's request as a placement rule reads it."""
    milli = pod.gpu_milli if pod.num_gpu else 0
    return Ask(pod.cpu_milli, pod.memory_mib, pod.num_gpu, milli, pod.gpu_types)


def rooms(nodes: Sequence[Node]) -> list[NodeRoom]:
    """Empty nodes as placement rules read them."""
    return [NodeRoom(n.sn, n.model, n.cpu_milli, n.memory_mib, [MILLI] * n.gpus,
                     n.cpu_milli, n.memory_mib) for n in nodes]


def arrivals(pods: Sequence[Pod], nodes: Sequence[Node], seed: int,
             ratio: float = DEFAULT_RATIO) -> list[Pod]:
    """The pod list shuffled, then grown by pods drawn from it (with replacement) until
    the requested GPUs reach ``ratio`` of the cluster's; the added pods arrive after the
    list's own, as in the authors' simulator."""
    rng = random.Random(seed)
    by_name = sorted(pods, key=lambda p: p.name)
    order = list(by_name)
    rng.shuffle(order)
    target = ratio * MILLI * sum(n.gpus for n in nodes)
    demand = sum(p.num_gpu * p.gpu_milli for p in order)
    while demand < target:
        p = by_name[rng.randrange(len(by_name))]
        if demand + p.gpu_milli > target:    # the authors' stop test: its per-GPU milli
            break
        order.append(p)
        demand += p.num_gpu * p.gpu_milli
    return order


class NodeFragmentation(LeastFragmenting):
    """fgs's chooser on the fill's nodes: FGD's measure as its authors' simulator takes
    it (the node's CPU too, the target workload's types, in milli), ties to the place
    that leaves the least CPU and GPU on the node (best fit, as the rule ``best-fit``
    weighs them)."""

    per_gpu = float(MILLI)

    def __init__(self, nodes: Sequence[NodeRoom], frag: Fragmentation) -> None:
        super().__init__(())    # the types are the workload's, in ``frag``
        self.nodes, self.frag = nodes, frag
        self.ask = Ask()

    @property
    def active(self) -> bool:
        """Always: the workload is ``frag``'s."""
        return True

    def fragmentation(self, node: str, frees: list[float], placed: bool) -> float:
        """FGD's fragmentation (milli) of the node with these free fractions and its
        CPU, less the task's when ``placed``."""
        n = self.nodes[int(node)]
        cpu = n.cpu - (self.ask.cpu if placed else 0)
        return self.frag.of(n.kind, cpu, [round(f * MILLI) for f in frees])

    def left(self, node: str, frees: list[float]) -> float:
        """The node's CPU and GPU left after the placement, over the largest node's."""
        n = self.nodes[int(node)]
        return ((n.cpu - self.ask.cpu) / MAX_NODE_CPU
                + sum(round(f * MILLI) for f in frees) / MAX_NODE_GPU)


class FgsPlacement:
    """fgs's own placement on the fill's nodes, ``FreeMap.gang_place``: as fgs places by
    default (the tightest GPUs that fit, on one node where it can, whole nodes kept
    whole), or with ``measure`` as with ``Fgs.frag_measure`` (its chooser,
    :mod:`tfgshare.policies.frag_choice`: FGD's measure, then the tightest place); a
    GPU's memory counted in milli (1000 per GPU, no context reserve), limited to nodes
    with the CPU and memory."""

    def __init__(self, nodes: Sequence[NodeRoom], frag: Fragmentation,
                 measure: bool = False) -> None:
        self.name = "fgs-frag" if measure else "fgs"
        gpus = tuple(GPU(f"{k}:{i}", str(k), i, MILLI, n.kind)
                     for k, n in enumerate(nodes) for i in range(len(n.gpus)))
        self.free = FreeMap(ClusterSnapshot(gpus, reserve_mb=0.0))
        self.chooser = NodeFragmentation(nodes, frag) if measure else None
        self.free.chooser = self.chooser
        self.frag = frag

    def choose(self, nodes: Sequence[NodeRoom], ask: Ask, rng: random.Random,
               rank: Sequence[int] | None = None) -> tuple[int, tuple[int, ...]] | None:
        """(node index, GPU indexes), as the rules' ``choose`` (fgs breaks ties by
        cluster order, as FreeMap does). A CPU-only task, which fgs itself never places
        (it places GPUs), goes where the chooser's measure puts it (by default: on the
        first node that holds it, as before the chooser)."""
        if ask.num_gpu == 0:
            return self.cpu_only(nodes, ask)
        ok = {str(k) for k, n in enumerate(nodes) if feasible(n, ask)}
        if not ok:
            return None
        if self.chooser is not None:
            self.chooser.ask = ask
        got = self.free.gang_place(ask.num_gpu, ask.milli / MILLI,
                                   ok=lambda gid: gid.partition(":")[0] in ok)
        if got is None or len({g.partition(":")[0] for g, _ in got}) != 1:
            return None          # a task's GPUs are on one node in this experiment
        self.free.take(got)
        k = int(got[0][0].partition(":")[0])
        return k, tuple(int(g.partition(":")[2]) for g, _ in got)

    def cpu_only(self, nodes: Sequence[NodeRoom], ask: Ask) -> tuple[int, tuple] | None:
        """The node for a task that asks for no GPU: the least fragmenting (FGD's
        measure of its CPU left), then the tightest, then the first."""
        fits = (k for k, n in enumerate(nodes) if feasible(n, ask))
        if self.chooser is None:
            return next(((k, ()) for k in fits), None)
        c, frag = self.chooser, self.frag
        c.ask = ask
        best = None
        for k in fits:
            n = nodes[k]
            frees = [g / MILLI for g in n.gpus]
            key = (-sigmoid_score(frag.node(n), c.fragmentation(str(k), frees, True),
                                  c.per_gpu), c.left(str(k), frees), k)
            if best is None or key < best:
                best = key
        return None if best is None else (best[2], ())


def fill(nodes: Sequence[Node], sequence: Sequence[Pod], rule_name: str, *,
         workload: Workload, seed: int = 0, every: int = 1,
         order: Sequence[str] | None = None) -> list[FillPoint]:
    """Place ``sequence`` in order with the rule called ``rule_name`` (``FILL_RULES``);
    a point every ``every`` arrivals and after the last. Ties between nodes go to the
    first in ``order`` (node names; default: a permutation seeded by ``seed``)."""
    rng = random.Random(seed)
    cluster = rooms(nodes)
    if order is None:
        order = [n.sn for n in nodes]
        random.Random(f"order:{seed}").shuffle(order)
    place = {name: i for i, name in enumerate(order)}
    rank = [place.get(n.sn, len(place) + i) for i, n in enumerate(nodes)]
    frag = Fragmentation(workload)
    rule = (FgsPlacement(cluster, frag, rule_name == "fgs-frag")
            if rule_name.startswith("fgs") else make_rule(rule_name, rng, workload))
    node_frag = [frag.node(n) for n in cluster]
    total_frag = sum(node_frag)
    used = [0] * len(cluster)
    points: list[FillPoint] = []
    arrived_milli = allocated = failed = used_gpus = 0
    for k, pod in enumerate(sequence, 1):
        ask = ask_of(pod)
        arrived_milli += ask.gpu_total
        where = rule.choose(cluster, ask, rng, rank)
        if where is None:
            failed += 1
        else:
            i, gpus = where
            node = cluster[i]
            fresh = sum(1 for g in gpus if node.gpus[g] == MILLI)
            take(node, ask, gpus)
            allocated += ask.gpu_total
            used_gpus += fresh
            used[i] += 1
            new = frag.node(node)
            total_frag += new - node_frag[i]
            node_frag[i] = new
        if k % every == 0 or k == len(sequence):
            points.append(FillPoint(k, failed, arrived_milli, allocated, total_frag,
                                    used_gpus))
    return points
