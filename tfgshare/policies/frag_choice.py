"""FGD's fragmentation measure as a FreeMap's choice between the places that fit.

A FreeMap places a job on the tightest GPU that fits (one node's tightest GPUs for a
gang). With a chooser set (``FreeMap.chooser``) it instead gathers every place that
fits and lets the chooser pick: :class:`LeastFragmenting` takes the place that least
raises its node's fragmentation under a target workload, the measure of Weng et al.
(ATC '23, "Beware of Fragmentation", section 4) restated for fractions of a GPU: for
each task type of the workload (``k`` GPUs of fraction ``f`` each, with its share of the
tasks), the free room of a node that such a task could not use (all of it when fewer
than ``k`` of its GPUs have ``f`` free, else the room of the GPUs with less than ``f``),
summed with the shares as weights. Scores go through FGD's sigmoid onto integers
0..100 as its scheduler's do; ties go to the tightest place (least room left on the
node, then the GPU with the least room), then cluster order. Imports only ``base`` and ``placement``.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import TYPE_CHECKING, Iterable, Sequence

from .placement import EPS

if TYPE_CHECKING:
    from .freemap import FreeMap

# (GPU id, fraction) candidates of one node, tightest first, as FreeMap gathers them
Cands = list[tuple[str, float]]
POPULAR = 0.95     # the target workload: the commonest task types up to this share (FGD's)
GRAIN = 20         # task fractions are counted in steps of 1/GRAIN of a GPU


def target_types(asked: Counter, popular: float = POPULAR
                 ) -> tuple[tuple[int, float, float], ...]:
    """(GPUs, fraction, share) of the commonest requests ``asked`` ((GPUs, fraction) ->
    jobs seen) that together make up ``popular`` of them, shares summing to 1."""
    total = sum(asked.values())
    if not total:
        return ()
    kept, cum = [], 0
    for (k, f), n in sorted(asked.items(), key=lambda kv: (-kv[1], kv[0])):
        if cum >= popular * total:
            break
        kept.append((k, f, n))
        cum += n
    return tuple((k, f, n / cum) for k, f, n in kept)


def request_of(k: int, fraction: float) -> tuple[int, float]:
    """A request as the target workload counts it: GPUs, fraction rounded up to a step."""
    return k, min(1.0, math.ceil(fraction * GRAIN - EPS) / GRAIN)


def node_fragmentation(frees: Sequence[float], types: Iterable[tuple[int, float, float]]
                       ) -> float:
    """The expected free room (in GPUs) of a node with these free fractions that a task
    of the target workload could not use."""
    left = sum(frees)
    frag = 0.0
    for k, f, share in types:
        if sum(1 for x in frees if x >= f - EPS) < k:
            frag += share * left
        else:
            frag += share * sum(x for x in frees if x < f - EPS)
    return frag


def sigmoid_score(before: float, after: float, per_gpu: float = 1.0) -> int:
    """FGD's score of a placement, 0..100: the drop in fragmentation (in GPUs: ``per_gpu``
    units of the measure) through a sigmoid, truncated to an integer."""
    return int(100 / (1.0 + math.exp(-(before - after) / per_gpu)))


class LeastFragmenting:
    """A FreeMap chooser: the place that least raises its node's fragmentation under the
    target workload ``types`` ((GPUs, fraction, share), see :func:`target_types`)."""

    per_gpu = 1.0    # units of ``fragmentation`` per GPU

    def __init__(self, types: Sequence[tuple[int, float, float]]) -> None:
        self.types = tuple(types)
        self._nodes: tuple[object, dict[str, list[str]]] | None = None

    @property
    def active(self) -> bool:
        """Whether it has a workload to measure by (without, the FreeMap's own choice)."""
        return bool(self.types)

    def node_gpus(self, fm: "FreeMap") -> dict[str, list[str]]:
        """Node -> its up GPUs, in cluster order (worked out once per GPU table)."""
        if self._nodes is None or self._nodes[0] is not fm.gpus:
            nodes: dict[str, list[str]] = {}
            for gid, g in fm.gpus.items():
                nodes.setdefault(g.node, []).append(gid)
            self._nodes = (fm.gpus, nodes)
        return self._nodes[1]

    def choose(self, fm: "FreeMap", k: int, by_node: dict[str, Cands]) -> Cands | None:
        """``k`` GPUs on one node (None when no node has ``k`` that fit)."""
        gpus = self.node_gpus(fm)
        best, where = None, None
        for node, cands in by_node.items():
            if len(cands) < k:
                continue
            ids = gpus[node]
            frees = [self.room(fm, g) for g in ids]
            before = self.fragmentation(node, frees, False)
            pos = {g: i for i, g in enumerate(ids)}
            for take in self.options(fm, cands, k):
                after = list(frees)
                for gid, f in take:
                    after[pos[gid]] -= f
                key = (-sigmoid_score(before, self.fragmentation(node, after, True), self.per_gpu),
                       self.left(node, after), self.room(fm, take[0][0]),
                       fm.order[take[0][0]])
                if best is None or key < best:
                    best, where = key, take
        return where

    def fragmentation(self, node: str, frees: list[float], placed: bool) -> float:
        """The node's fragmentation with these free fractions (``placed``: after the
        placement scored)."""
        return node_fragmentation(frees, self.types)

    def left(self, node: str, frees: list[float]) -> float:
        """How much room the node keeps after the placement (the tie-break: least first)."""
        return sum(frees)

    @staticmethod
    def room(fm: "FreeMap", gid: str) -> float:
        """The room a new tenant could have on the GPU (0 when it takes none)."""
        if gid in fm.closed or (fm.max_tenants is not None
                                and fm.tenants(gid) >= fm.max_tenants):
            return 0.0
        return max(0.0, fm.free(gid))

    @classmethod
    def options(cls, fm: "FreeMap", cands: Cands, k: int) -> list[Cands]:
        """The places on one node worth scoring: for one GPU, the first GPU of each free
        room (FGD tries every GPU, and GPUs of equal room score alike); for a gang, its
        tightest ``k``."""
        if k > 1:
            return [cands[:k]]
        out, seen = [], set()
        for gid, f in cands:
            key = round(cls.room(fm, gid), 9)
            if key not in seen:
                seen.add(key)
                out.append([(gid, f)])
        return out
