"""The simulator's records: one job's state (``SimJob``), one run's outcome
(``SimResult``), and the admission of a workload's jobs onto a cluster.

Imports only the policy records, the metrics' accounts and the simulator's
cluster, profiles and ``gc_pause``.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass
from typing import Iterable

from tfgshare.metrics import JobAccount, JobRecord, Report, Timeline
from tfgshare.policies.base import Fragment, JobState, SampleRecord

from .cluster import SimCluster
from .gc_pause import no_cycle_collection
from .profiles import ModelProfile, Profiles


class SimulationError(RuntimeError):
    """The policy asked for something impossible, or the run cannot progress."""


@dataclass(slots=True, eq=False)
class SimJob(JobAccount):
    """The simulator's state of one job (policies see a JobView of it).

    It is its own ``JobAccount``: the waits, holds, moves and prediction are
    kept by the account's methods, as the live coordinator keeps them.
    """

    id: str
    num_gpus: int
    model: str
    total_steps: int
    prof: ModelProfile
    state: JobState = JobState.QUEUED
    steps: float = 0.0            # training steps done (never decreases)
    target: float = 0.0           # step at which the current run ends
    tail_s: float = 0.0           # work after reaching target (the sampling checkpoint)
    rate: float = 0.0             # steps per second once the stall is over
    t_prog: float = 0.0           # time ``steps`` was last brought up to date
    stall_until: float = 0.0      # no progress before this (start-up, restore, waiting on a save)
    # with startup_on_device: its start-up's seconds (alone) still to run, counted from
    stall_work: float = 0.0
    stall_from: float = 0.0
    end_at: float = 0.0           # when the current run's END event is due
    fragments: tuple[Fragment, ...] = ()
    slow: float = 1.0             # current co-location slowdown (max over its GPUs)
    speed: float = 0.0            # co-location speed while it trains (0 while stalled)
    sample: SampleRecord | None = None
    measured_step_s: float | None = None
    solo_step_s: float | None = None  # its step time alone: sampled, less a measured sharing
    restart_s: float | None = None  # measured cost of its last start (start-up, restore)
    save_s: float | None = None     # measured time of its last checkpoint save
    start_cost_s: float = 0.0       # true cost of its current start, measured once past it
    start_measured: bool = True
    restoring: bool = False         # its current start restores a checkpoint (a resume)
    ready_at: float = 0.0         # its last checkpoint save completes
    has_checkpoint: bool = False
    oom_starts: int = 0
    min_memory_mb: float = 0.0    # measured when it ran out of memory (JobView.min_memory_mb)
    version: int = 0              # bumps whenever its scheduled END becomes stale
    view_version: int = 0         # bumps whenever a new view is built
    position: int = 0             # arrival order, from 1 (0: not arrived)
    requested_fraction: float | None = None   # a GPU-sharing trace's share of one GPU
    gpu_types: tuple[str, ...] = ()           # GPU types it may run on (empty: any)
    sampled_beside: float | None = None       # (virtual GPUs' measure: never simulated)


@dataclass
class SimResult:
    """The outcome of one simulation."""

    policy: str
    report: Report
    records: list[JobRecord]
    timeline: Timeline
    decide_s: array               # wall seconds of each policy call
    wall_s: float
    rounds: int
    oom_starts: int = 0
    tick_s: float | None = None   # the tick it ran under (None: the policy's own timed events)


@no_cycle_collection()   # admitting makes no cycles
def admit(jobs: Iterable, profiles: Profiles, cluster: SimCluster) -> list[SimJob]:
    """The jobs as the simulator runs them, by submit time; a ValueError names the first
    job that cannot run on ``cluster`` (no model, no profile, too big, a bad time)."""
    out = []
    seen = set()
    max_memory = max(g.memory_mb for g in cluster.gpus)
    smallest: dict[frozenset, int] = {}   # GPU kinds -> the smallest memory they may run on
    for j in jobs:
        jid = str(j.id)
        if jid in seen:
            raise ValueError(f"job id {jid!r} appears twice")
        seen.add(jid)
        if not j.model:
            raise ValueError(f"job {jid} has no model; assign models first "
                             "(philly.mapping.assign_models)")
        try:
            prof = profiles.get(j.model, j.batch_size)
        except KeyError as err:
            raise ValueError(f"job {jid}: {err.args[0]}") from None
        prof, fraction = _own_profile(j, prof, cluster, smallest)
        if int(j.num_gpus) < 1 or int(j.total_steps) < 1:
            raise ValueError(f"job {jid}: num_gpus and total_steps must be >= 1, "
                             f"got {j.num_gpus} and {j.total_steps}")
        if int(j.num_gpus) > cluster.num_gpus:
            raise ValueError(f"job {jid} needs {j.num_gpus} GPUs but cluster "
                             f"{cluster.name} has {cluster.num_gpus}")
        if prof.memory_mb + cluster.reserve_mb > max_memory:
            raise ValueError(f"job {jid}: {j.model} at batch size {j.batch_size} needs "
                             f"{prof.memory_mb:.0f} MB, more than any GPU of cluster "
                             f"{cluster.name} holds ({max_memory} MB less a "
                             f"{cluster.reserve_mb:.0f} MB reserve)")
        if not math.isfinite(j.submit_time) or j.submit_time < 0:
            raise ValueError(f"job {jid}: submit time {j.submit_time!r} must be >= 0")
        out.append(SimJob(jid, int(j.num_gpus), j.model, int(j.total_steps), prof,
                          submit_time=float(j.submit_time), requested_fraction=fraction,
                          gpu_types=tuple(getattr(j, "gpu_types", ()) or ())))
    out.sort(key=lambda s: s.submit_time)
    return out


def _own_profile(j, prof: ModelProfile, cluster: SimCluster,
                 smallest: dict[frozenset, int]) -> tuple[ModelProfile, float | None]:
    """The job's own profile where the workload gave it its own utilisation or memory, and
    its requested share of a GPU (a GPU-sharing trace's): a share is all the memory it
    gets, so its memory is that share of the smallest GPU it may run on (``smallest``:
    that size by GPU kinds, filled as met, so a job does not scan every GPU)."""
    util, memory = getattr(j, "gpu_util", None), getattr(j, "memory_mb", None)
    fraction = getattr(j, "gpu_fraction", None)
    if fraction is not None:
        if not 0 < fraction <= 1:
            raise ValueError(f"job {j.id}: gpu_fraction {fraction!r} must be in (0, 1]")
        kinds = frozenset(getattr(j, "gpu_types", ()) or ())
        least = smallest.get(kinds)
        if least is None:
            sizes = [g.memory_mb for g in cluster.gpus if not kinds or g.kind in kinds] or \
                [g.memory_mb for g in cluster.gpus]
            least = smallest[kinds] = min(sizes)
        share = fraction * least - cluster.reserve_mb
        memory = share if memory is None else min(memory, share)
        if memory <= 0:
            raise ValueError(f"job {j.id}: a {fraction:g} share of a {least} MB GPU "
                             f"leaves nothing past the {cluster.reserve_mb:g} MB reserve")
    if util is not None and not 0 < util <= 1:
        raise ValueError(f"job {j.id}: gpu_util {util!r} must be in (0, 1]")
    if util is None and memory is None:
        return prof, fraction
    return prof.with_workload(None if util is None else float(util),
                              None if memory is None else float(memory)), fraction
