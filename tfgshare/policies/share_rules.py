"""Placement rules for GPU-sharing workloads: FGD and the baselines it was compared with.

After Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with
Fragmentation Gradient Descent" (USENIX ATC '23), whose simulator
(``hkust-adsl/kubernetes-scheduler-simulator``) scores nodes for a task asking for CPU,
memory and either a share of one GPU (``milli`` < 1000) or whole GPUs. Each rule is the
score step of a Kubernetes-style scheduler: every feasible node is scored (an integer in
0..100, as that simulator's score plugins return), the highest wins, and ties go to the
node first in a fixed, seeded order of the nodes (the authors' simulator prefixes node
names with a seeded permutation and takes the smallest name, which packs ties onto the
same nodes); the rule names the GPUs on the winning node.

Rules (``RULES``):

* ``random-fit``: a feasible node at random, a fitting GPU on it at random.
* ``best-fit``: the node left with the least CPU and GPU, each over the largest node's
  (128 cores, 8 GPUs), weighted half and half; min-max normalised over the nodes.
* ``dot-product``: the node whose free (CPU, GPU) vector, over the largest node's, has the
  smallest dot product with the task's request (the best-aligned leftover).
* ``packing``: GPUs already shared first, then partly used nodes, then idle nodes.
* ``clustering``: nodes that already hold tasks of the same kind (a share, or n whole
  GPUs) first.
* ``fgd``: the placement that least raises the node's fragmentation, measured against
  the target workload (:class:`Workload`): the expected GPU capacity, over the task
  types of the workload, that a task of that type could not use on the node.

Within the chosen node a one-GPU share goes to the fitting GPU the rule prefers (the
fullest for best-fit, dot-product, packing and clustering; FGD's least-fragmenting); whole
GPUs are the node's first fully free ones. All arithmetic is in integer milli-GPUs and
milli-CPUs, as the trace's requests are. Imports only the standard library.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

MILLI = 1000
MAX_SCORE = 100
MAX_NODE_CPU = 128_000     # the largest node of the trace, for normalising (milli-CPU)
MAX_NODE_GPU = 8 * MILLI   # its GPUs, in milli
POPULAR_SHARE = 0.95       # FGD's target workload: the commonest task types up to this share


@dataclass(frozen=True)
class Ask:
    """What a task asks for: CPU (milli), memory (MiB), GPUs and each GPU's share."""

    cpu: int = 0
    memory: int = 0
    num_gpu: int = 0
    milli: int = 0                     # per GPU: < 1000 is a share of one GPU
    kinds: tuple[str, ...] = ()        # GPU types it may run on (empty: any)

    @property
    def gpu_total(self) -> int:
        """Its GPU request in milli-GPUs."""
        return self.num_gpu * self.milli

    @property
    def shares_gpu(self) -> bool:
        """Whether it asks for a share of one GPU."""
        return self.num_gpu == 1 and self.milli < MILLI


@dataclass(slots=True)
class NodeRoom:
    """One node's free resources (and, for clustering, the shares of its GPU tasks)."""

    name: str
    kind: str                          # its GPUs' type ("" on a CPU-only node)
    cpu: int                           # free milli-CPU
    memory: int                        # free MiB
    gpus: list[int]                    # free milli of each GPU
    cpu_cap: int = 0
    memory_cap: int = 0
    tasks: Counter = field(default_factory=Counter)   # GPU tasks held, by kind (``tag``)

    @property
    def gpu_left(self) -> int:
        """Free milli-GPUs on the node."""
        return sum(self.gpus)

    def key(self) -> tuple:
        """What FGD's fragmentation of the node depends on (its GPUs in any order)."""
        return (self.kind, self.cpu, tuple(sorted(self.gpus)))


def accessible(node_kind: str, kinds: Sequence[str]) -> bool:
    """Whether a node of this GPU type may hold a task limited to ``kinds``."""
    return not kinds or node_kind in kinds


def feasible(node: NodeRoom, ask: Ask) -> bool:
    """Whether the node can hold the task now (CPU, memory, type, enough fitting GPUs)."""
    if node.cpu < ask.cpu or node.memory < ask.memory:
        return False
    if ask.num_gpu == 0:
        return True
    if not accessible(node.kind, ask.kinds):
        return False
    return sum(1 for g in node.gpus if g >= ask.milli) >= ask.num_gpu


def whole_gpus(node: NodeRoom, ask: Ask) -> tuple[int, ...]:
    """The node's first fully free GPUs for a whole-GPU task (for a task of several GPUs
    that asks for part of each, the fullest that fit, as the peer's node subtraction)."""
    if ask.milli < MILLI:
        fits = sorted((g, i) for i, g in enumerate(node.gpus) if g >= ask.milli)
        return tuple(i for _, i in fits[:ask.num_gpu])
    free = [i for i, g in enumerate(node.gpus) if g == MILLI]
    return tuple(free[:ask.num_gpu])


def fullest_gpu(node: NodeRoom, ask: Ask) -> tuple[int, ...]:
    """The fitting GPU with the least free milli (first on a tie), or whole GPUs."""
    if not ask.shares_gpu:
        return whole_gpus(node, ask) if ask.num_gpu else ()
    best = None
    for i, g in enumerate(node.gpus):
        if g >= ask.milli and (best is None or g < node.gpus[best]):
            best = i
    return (best,)


def tag(ask: Ask) -> str:
    """A GPU task's kind for clustering: ``share`` or ``<n>-gpu``."""
    return "share" if ask.shares_gpu else f"{ask.num_gpu}-gpu"


def take(node: NodeRoom, ask: Ask, gpus: Sequence[int]) -> None:
    """Give the task its CPU, memory and the named GPUs of the node."""
    node.cpu -= ask.cpu
    node.memory -= ask.memory
    for i in gpus:
        node.gpus[i] -= ask.milli
    if ask.num_gpu:
        node.tasks[tag(ask)] += 1


# ---- the target workload and FGD's fragmentation ---------------------------------


@dataclass(frozen=True)
class Workload:
    """FGD's target workload: task types (CPU, GPUs, milli, types) and their shares."""

    types: tuple[tuple[Ask, float], ...]

    @classmethod
    def of(cls, asks: Iterable[Ask], popular: float = POPULAR_SHARE) -> "Workload":
        """The commonest task types of ``asks`` (memory aside) that together make up
        ``popular`` of them, their shares renormalised to sum to 1."""
        return cls.of_counts(Counter(Ask(a.cpu, 0, a.num_gpu, a.milli, a.kinds)
                                     for a in asks), popular)

    @classmethod
    def of_counts(cls, counts: Counter, popular: float = POPULAR_SHARE) -> "Workload":
        """As :meth:`of`, from task types (memory aside) and how many tasks had each."""
        total = sum(counts.values())
        if not total:
            raise ValueError("a target workload needs at least one task")
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0].num_gpu, kv[0].milli,
                                                        kv[0].cpu, kv[0].kinds))
        kept, cum = [], 0
        for ask, n in ranked:
            if cum >= popular * total:
                break
            kept.append((ask, n))
            cum += n
        return cls(tuple((a, n / cum) for a, n in kept))


def fragment(kind: str, cpu: int, gpus: Sequence[int], t: Ask) -> int:
    """Free milli-GPUs of a node that a task of type ``t`` could not use: all of them when
    it cannot run there (or needs no GPU), else those on GPUs too small for it."""
    left = sum(gpus)
    if t.milli == 0 or not accessible(kind, t.kinds) or cpu < t.cpu:
        return left
    if sum(1 for g in gpus if g >= t.milli) < t.num_gpu:
        return left
    return sum(g for g in gpus if g < t.milli)


class Fragmentation:
    """A node's expected fragmentation under a target workload, cached by node state."""

    def __init__(self, workload: Workload) -> None:
        self.workload = workload
        self.cache: dict[tuple, float] = {}

    def of(self, kind: str, cpu: int, gpus: Sequence[int]) -> float:
        """Sum over task types of share x the milli-GPUs it could not use."""
        key = (kind, cpu, tuple(sorted(gpus)))
        got = self.cache.get(key)
        if got is None:
            got = self.cache[key] = sum(p * fragment(kind, cpu, gpus, t)
                                        for t, p in self.workload.types)
        return got

    def node(self, node: NodeRoom) -> float:
        """The node's fragmentation now."""
        return self.of(node.kind, node.cpu, node.gpus)


def _sigmoid_score(before: float, after: float) -> int:
    # the peer's score: a drop in fragmentation (in thousands of milli) through a
    # sigmoid onto 0..100, truncated to an integer
    return int(MAX_SCORE / (1.0 + math.exp(-(before - after) / 1000.0)))


# ---- the rules -----------------------------------------------------------------

Score = Callable[[NodeRoom, Ask], "tuple[int, tuple[int, ...]]"]


@dataclass
class Rule:
    """A placement rule: scores a feasible node (0..100, higher wins) and picks its GPUs.

    ``normalise`` min-max rescales a round's scores onto 0..100 before the winner is
    chosen (best-fit does, as its authors' plugin does); ``random`` picks among the
    feasible nodes uniformly, whatever the tie-break order (random-fit).
    """

    name: str
    score: Score
    normalise: bool = False
    random: bool = False

    def choose(self, nodes: Sequence[NodeRoom], ask: Ask, rng: random.Random,
               rank: Sequence[int] | None = None) -> tuple[int, tuple[int, ...]] | None:
        """(node index, GPU indexes) for the task, or None when no node can hold it.

        Ties go to the node of smallest ``rank`` (node index -> place in the tie-break
        order; None: a uniform random pick with ``rng``)."""
        cands = [(i, *self.score(n, ask)) for i, n in enumerate(nodes) if feasible(n, ask)]
        if not cands:
            return None
        if self.normalise:
            lo, hi = min(c[1] for c in cands), max(c[1] for c in cands)
            span = hi - lo
            cands = [(i, 0 if span == 0 else (s - lo) * MAX_SCORE // span, g)
                     for i, s, g in cands]
        top = max(c[1] for c in cands)
        best = [c for c in cands if c[1] == top]
        if len(best) == 1:
            i, _, gpus = best[0]
        elif rank is None or self.random:
            i, _, gpus = best[rng.randrange(len(best))]
        else:
            i, _, gpus = min(best, key=lambda c: rank[c[0]])
        return i, gpus


def _best_fit(node: NodeRoom, ask: Ask) -> tuple[int, tuple[int, ...]]:
    left = (0.5 * (node.cpu - ask.cpu) / MAX_NODE_CPU
            + 0.5 * (node.gpu_left - ask.gpu_total) / MAX_NODE_GPU)
    return int((1.0 - left) * MAX_SCORE), fullest_gpu(node, ask)


def _dot_product(node: NodeRoom, ask: Ask) -> tuple[int, tuple[int, ...]]:
    dot = (node.cpu / MAX_NODE_CPU * ask.cpu / MAX_NODE_CPU
           + node.gpu_left / MAX_NODE_GPU * ask.gpu_total / MAX_NODE_GPU) / 2.0
    return int((1.0 - dot) * MAX_SCORE), fullest_gpu(node, ask)


def _packing(node: NodeRoom, ask: Ask) -> tuple[int, tuple[int, ...]]:
    gpus = fullest_gpu(node, ask)
    if ask.milli <= 0:
        return 0, gpus
    idle = sum(1 for g in node.gpus if g == MILLI)
    if idle == len(node.gpus):                  # an idle node: last
        return max(MAX_SCORE // 3 - idle, idle), gpus
    order = sorted(range(len(node.gpus)), key=lambda i: (node.gpus[i], i))
    use = [i for i in order if node.gpus[i] >= ask.milli][:ask.num_gpu]
    fresh = sum(1 for i in use if node.gpus[i] == MILLI)
    if fresh:                                   # a used node, on idle GPUs
        return max(MAX_SCORE // 2 - fresh, MAX_SCORE // 3), gpus
    free_pct = sum(node.gpus[i] * 100 // MILLI for i in use)   # shared GPUs: first
    return max(MAX_SCORE - free_pct // 10, MAX_SCORE // 2), gpus


def _clustering(node: NodeRoom, ask: Ask) -> tuple[int, tuple[int, ...]]:
    gpus = fullest_gpu(node, ask)
    if ask.num_gpu == 0:
        return 0, gpus
    fill = (MAX_SCORE // 4) * (MAX_NODE_GPU - node.gpu_left) // MAX_NODE_GPU
    held = [t for t, n in node.tasks.items() if n > 0]
    if tag(ask) in held:
        return fill + (3 if len(held) == 1 else 2) * MAX_SCORE // 4, gpus
    return fill + (0 if held else MAX_SCORE // 4), gpus


def _random_gpus(rng: random.Random) -> Score:
    def score(node: NodeRoom, ask: Ask) -> tuple[int, tuple[int, ...]]:
        if not ask.shares_gpu:
            return 0, whole_gpus(node, ask) if ask.num_gpu else ()
        fits = [i for i, g in enumerate(node.gpus) if g >= ask.milli]
        return 0, (fits[rng.randrange(len(fits))],)
    return score


def _fgd(frag: Fragmentation) -> Score:
    def score(node: NodeRoom, ask: Ask) -> tuple[int, tuple[int, ...]]:
        before = frag.node(node)
        if ask.shares_gpu:
            best, where = -1, ()
            cpu = node.cpu - ask.cpu
            for i, g in enumerate(node.gpus):
                if g >= ask.milli:
                    gpus = list(node.gpus)
                    gpus[i] -= ask.milli
                    s = _sigmoid_score(before, frag.of(node.kind, cpu, gpus))
                    if s > best:
                        best, where = s, (i,)
            return best, where
        gpus = list(node.gpus)
        where = whole_gpus(node, ask) if ask.num_gpu else ()
        for i in where:
            gpus[i] -= ask.milli
        return _sigmoid_score(before, frag.of(node.kind, node.cpu - ask.cpu, gpus)), where
    return score


RULE_NAMES = ("random-fit", "best-fit", "dot-product", "packing", "clustering", "fgd")


def make_rule(name: str, rng: random.Random, workload: Workload | None = None,
              frag: Fragmentation | None = None) -> Rule:
    """The rule called ``name`` (``RULE_NAMES``); FGD needs its target ``workload`` (or a
    ``frag`` of it, whose cache a caller may keep across rules)."""
    if name == "random-fit":
        return Rule(name, _random_gpus(rng), random=True)
    if name == "best-fit":
        return Rule(name, _best_fit, normalise=True)
    if name == "dot-product":
        return Rule(name, _dot_product)
    if name == "packing":
        return Rule(name, _packing)
    if name == "clustering":
        return Rule(name, _clustering)
    if name == "fgd":
        if frag is None and workload is None:
            raise ValueError("the fgd placement needs a target workload")
        return Rule(name, _fgd(frag or Fragmentation(workload)))
    raise ValueError(f"unknown placement {name!r}; valid: {', '.join(RULE_NAMES)}")
