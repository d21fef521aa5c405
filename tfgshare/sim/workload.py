"""The jobs a simulation replays: a trace, filtered, with models assigned."""

from __future__ import annotations

from dataclasses import dataclass, field

from philly.filters import compress_time
from philly.jobs import TraceJob
from philly.mapping import assign_models
from philly.trace import load_trace

from .profiles import Profiles


@dataclass
class Workload:
    """Jobs ready to simulate, and those left out because the cluster is too small."""

    jobs: list[TraceJob]
    too_wide: list[TraceJob] = field(default_factory=list)


def load_workload(trace: str, profiles: Profiles, cluster_gpus: int, *, seed: int = 0,
                  num_jobs: int | None = None, vcs: list[str] | None = None,
                  start: float | str | None = None, end: float | str | None = None,
                  time_compression: float = 1.0) -> Workload:
    """Jobs of ``trace`` ("philly" or a trace file) to replay on ``cluster_gpus`` GPUs.

    ``num_jobs`` keeps the earliest submitted jobs (after the VC and time
    filters), so arrivals keep the trace's density. Jobs without a model (or
    step count) get one from ``philly.mapping.assign_models`` with these
    profiles; jobs that name a model keep it. Jobs wider than
    the cluster could never start and are set aside in ``too_wide``.
    """
    if num_jobs is not None and num_jobs < 1:
        raise ValueError(f"num_jobs must be >= 1, got {num_jobs}")
    jobs = load_trace(trace, vcs=vcs, start=start, end=end, max_jobs=num_jobs)
    if not jobs:
        raise ValueError(f"trace {trace!r} has no jobs left after the filters")
    if time_compression != 1.0:
        jobs = compress_time(jobs, time_compression)
    bare = [i for i, j in enumerate(jobs) if not j.model or j.total_steps < 1]
    if bare:
        given = assign_models([jobs[i] for i in bare], profiles.step_times(), seed)
        for i, job in zip(bare, given):
            jobs[i] = job
    fits = [j for j in jobs if j.num_gpus <= cluster_gpus]
    wide = [j for j in jobs if j.num_gpus > cluster_gpus]
    return Workload(fits, wide)
