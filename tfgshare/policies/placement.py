"""Fragment accounting on GPUs, shared by every policy: the rule, fractions, layout.

The one rule: on each GPU, ``sum(fraction) + tenants * reserve_mb / memory_mb``
must not pass 1 (each process also pays a CUDA context reserve). Policies plan
placements on a :class:`tfgshare.policies.freemap.FreeMap`; the coordinator and
the simulator check a list of actions with :func:`tfgshare.policies.validate.check_actions`.
Imports only ``base`` and ``queueing``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from .base import ClusterSnapshot, Fragment, GPU, JobView
from .queueing import HOLDING

EPS = 1e-9                 # tolerance on the per-GPU sum
MIN_FRACTION = 0.01        # smallest fragment we hand out (TF needs some room)
GANG_LOOKAHEAD = 64        # GPUs a gang search looks at past its first fit

# A job's fraction on a GPU. It may depend on the GPU only through memory_mb,
# so that a FreeMap can evaluate it once per GPU size.
Need = Callable[[GPU], float]


@dataclass(slots=True)
class GpuUse:
    """What the jobs on one GPU hold: their fractions, count and utilisations, summed."""

    used: float = 0.0
    tenants: int = 0
    util: float = 0.0    # sum of the tenants' single-tenant utilisation (1 if unknown)


def reserve_fraction(gpu: GPU, reserve_mb: float) -> float:
    """The per-process context reserve as a fraction of this GPU."""
    return reserve_mb / gpu.memory_mb


def exclusive_fraction(gpu: GPU, reserve_mb: float) -> float:
    """The fraction a sole tenant gets: the whole GPU less one reserve."""
    return 1.0 - reserve_mb / gpu.memory_mb


def free_fraction(gpu: GPU, use: GpuUse | None, reserve_mb: float) -> float:
    """The largest fraction one more tenant could get on this GPU (may be <= 0)."""
    if use is None:
        return 1.0 - reserve_mb / gpu.memory_mb
    return 1.0 - use.used - (use.tenants + 1) * reserve_mb / gpu.memory_mb


def fits(gpu: GPU, use: GpuUse | None, fraction: float, reserve_mb: float) -> bool:
    """Whether one more tenant with ``fraction`` keeps this GPU within its memory."""
    return fraction <= free_fraction(gpu, use, reserve_mb) + EPS


def usage(cluster: ClusterSnapshot, jobs: Iterable[JobView]) -> dict[str, GpuUse]:
    """Per-GPU used fraction, tenant count and utilisation, from the jobs that hold a GPU.

    GPUs that nobody holds are absent from the result.
    """
    use: dict[str, GpuUse] = {}
    get = use.get
    for job in jobs:
        if not job.fragments or job.state not in HOLDING:
            continue
        util = job.sample.gpu_util if job.sample is not None else 1.0
        for frag in job.fragments:
            u = get(frag.gpu)
            if u is None:
                use[frag.gpu] = GpuUse(frag.fraction, 1, util)
            else:
                u.used += frag.fraction
                u.tenants += 1
                u.util += util
    return use


def fraction_for(job: JobView, gpu: GPU, headroom: float = 0.1,
                 reserve_mb: float = 300.0, default: float | None = None) -> float:
    """The fraction ``job`` should get on ``gpu``.

    The user's requested fraction if set; else the sampled peak memory times
    (1 + headroom) over the GPU's memory; else ``default``, and with no default
    the conservative choice: the whole GPU less the reserve. A job that ran
    out of memory gets at least its measured peak then (``min_memory_mb``)
    times (1 + headroom). The result is clipped to [MIN_FRACTION, exclusive
    fraction].
    """
    top = exclusive_fraction(gpu, reserve_mb)
    if job.requested_fraction is not None:
        want = job.requested_fraction
    elif job.sample is not None:
        want = job.sample.peak_memory_mb * (1.0 + headroom) / gpu.memory_mb
    elif default is not None:
        want = default
    else:
        return top
    if job.min_memory_mb:
        want = max(want, job.min_memory_mb * (1.0 + headroom) / gpu.memory_mb)
    return min(top, max(MIN_FRACTION, want))


def as_need(need: float | Need) -> Need:
    """A constant fraction or a function of the GPU, as a function of the GPU."""
    if callable(need):
        return need
    value = float(need)
    return lambda _gpu: value


@dataclass
class Layout:
    """What a FreeMap needs from a cluster that does not change between calls."""

    gpus: dict[str, GPU]              # up GPUs by id, in cluster order
    sizes: set[int]                   # their memory sizes
    order: dict[str, int]
    rep: dict[int, GPU]               # one GPU of each memory size
    empty: dict[int, list[tuple[float, int, str]]]   # sorted keys if all were empty
    by_room: list[GPU]                # up GPUs, smallest whole-GPU room (MB) first
    room_rank: dict[str, int]         # GPU id -> its place in by_room
    whole: float                      # sum of their whole-GPU fractions
    node_of: dict[str, str] = field(default_factory=dict)   # up GPU id -> its node
    on_node: dict[str, list[str]] = field(default_factory=dict)   # node -> its up GPU ids


def layout(cluster: ClusterSnapshot) -> Layout:
    """The cluster's layout, worked out once per snapshot object.

    Kept on the (immutable) snapshot itself, like a cached property: a value
    derived from its fields only, so callers that reuse one snapshot while the
    nodes do not change pay for it once.
    """
    lay = cluster.__dict__.get("_layout")
    if lay is not None:
        return lay
    down = cluster.down_nodes
    lay = Layout({}, set(), {}, {}, {}, [], {}, 0.0)
    for i, g in enumerate(cluster.gpus):
        if down and g.node in down:
            continue
        lay.gpus[g.id] = g
        lay.order[g.id] = i
        lay.node_of[g.id] = g.node
        lay.on_node.setdefault(g.node, []).append(g.id)
        lay.sizes.add(g.memory_mb)
        if g.memory_mb not in lay.rep:
            lay.rep[g.memory_mb] = g
            lay.empty[g.memory_mb] = []
        free = free_fraction(g, None, cluster.reserve_mb)
        if free >= MIN_FRACTION - EPS:
            lay.empty[g.memory_mb].append((free, i, g.id))
    reserve = cluster.reserve_mb
    lay.whole = sum(free_fraction(g, None, reserve) for g in lay.gpus.values())
    lay.by_room = sorted(lay.gpus.values(), key=lambda g: (
        free_fraction(g, None, reserve) * g.memory_mb, lay.order[g.id]))
    lay.room_rank = {g.id: i for i, g in enumerate(lay.by_room)}
    object.__setattr__(cluster, "_layout", lay)
    return lay


def by_room(cluster: ClusterSnapshot) -> list[GPU]:
    """Up GPUs in best-fit order for whole-GPU jobs: smallest room first, then cluster order."""
    return layout(cluster).by_room


def room_rank(cluster: ClusterSnapshot) -> dict[str, int]:
    """Each up GPU's place in ``by_room`` order (cached; do not modify)."""
    return layout(cluster).room_rank


def one_size(cluster: ClusterSnapshot) -> GPU | None:
    """One up GPU if every up GPU has the same memory size, else None."""
    lay = layout(cluster)
    return next(iter(lay.rep.values())) if len(lay.sizes) == 1 else None


def up_gpus(cluster: ClusterSnapshot) -> dict[str, GPU]:
    """The GPUs not on down nodes, by id in cluster order (cached; do not modify)."""
    return layout(cluster).gpus


def to_fragments(placed: Sequence[tuple[str, float]]) -> tuple[Fragment, ...]:
    """(gpu id, fraction) pairs as Fragments."""
    return tuple(Fragment(gid, f) for gid, f in placed)
