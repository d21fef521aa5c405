"""Choosing and reshaping trace jobs: windows, subsets, scaling and time compression.

Every function is pure: it returns new lists (jobs are immutable) and depends only
on its arguments and, where random, on ``seed``.
"""

from __future__ import annotations

import math
import random
from datetime import datetime
from typing import Iterable

from philly.jobs import TraceJob

Time = float | int | datetime | str


def select(jobs: list[TraceJob], *, start: Time | None = None, end: Time | None = None,
           origin: datetime | None = None, vcs: Iterable[str] | None = None,
           gpus: Iterable[int] | None = None, min_gpus: int | None = None, max_gpus: int | None = None,
           min_duration: float | None = None, max_duration: float | None = None,
           max_jobs: int | None = None) -> list[TraceJob]:
    """The jobs that pass every given filter, in their input order.

    ``start`` (inclusive) and ``end`` (exclusive) bound the submit time: seconds on
    the jobs' own time axis, or date-times (``datetime`` or ISO text) which need
    ``origin``, the wall-clock time of ``submit_time == 0``. ``vcs`` and ``gpus``
    are allowed sets; ``min_*``/``max_*`` are inclusive bounds; ``max_jobs`` keeps
    the earliest submitted jobs.
    """
    lo = _seconds(start, origin, "start")
    hi = _seconds(end, origin, "end")
    if lo is not None and hi is not None and lo > hi:
        raise ValueError(f"start {start!r} is after end {end!r}")
    vc_set = _as_set(vcs, "vcs", str)
    gpu_set = _as_set(gpus, "gpus", int)
    for name, value in (("min_gpus", min_gpus), ("max_gpus", max_gpus),
                        ("min_duration", min_duration), ("max_duration", max_duration),
                        ("max_jobs", max_jobs)):
        if value is not None and not (isinstance(value, (int, float)) and value >= 0):
            raise ValueError(f"{name} must be a number >= 0, got {value!r}")

    def keep(job: TraceJob) -> bool:
        return ((lo is None or job.submit_time >= lo)
                and (hi is None or job.submit_time < hi)
                and (vc_set is None or job.vc in vc_set)
                and (gpu_set is None or job.num_gpus in gpu_set)
                and (min_gpus is None or job.num_gpus >= min_gpus)
                and (max_gpus is None or job.num_gpus <= max_gpus)
                and (min_duration is None or job.duration >= min_duration)
                and (max_duration is None or job.duration <= max_duration))

    kept = [job for job in jobs if keep(job)]
    if max_jobs is not None and len(kept) > max_jobs:
        earliest = sorted(range(len(kept)), key=lambda i: kept[i].submit_time)[: int(max_jobs)]
        kept = [kept[i] for i in sorted(earliest)]
    return kept


def rebase(jobs: list[TraceJob]) -> list[TraceJob]:
    """The same jobs with submit times shifted so that the earliest is at 0."""
    if not jobs:
        return []
    first = min(job.submit_time for job in jobs)
    if first == 0:
        return list(jobs)
    return [job.copy_with(submit_time=job.submit_time - first) for job in jobs]


def _seconds(value: Time | None, origin: datetime | None, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"{name} must be seconds or a date-time, got {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError(f"{name} {value!r} is neither seconds nor an ISO date-time") from None
    if not isinstance(value, datetime):
        raise ValueError(f"{name} must be seconds or a date-time, got {type(value).__name__}")
    if origin is None:
        raise ValueError(f"{name} is a date-time but this trace has no dates; give seconds")
    return (value.replace(tzinfo=None) - origin).total_seconds()


def _as_set(values, name: str, kind: type) -> set | None:
    if values is None:
        return None
    if isinstance(values, (str, int)):
        values = [values]
    try:
        return {kind(v) for v in values}
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a collection of {kind.__name__} values, got {values!r}") from None


def offered_load(jobs: list[TraceJob], span: float | None = None) -> float:
    """GPU-seconds asked for per second of arrivals (span defaults to first-to-last submit)."""
    if not jobs:
        return 0.0
    if span is None:
        span = max(j.submit_time for j in jobs) - min(j.submit_time for j in jobs)
    if span <= 0:
        raise ValueError("offered load needs jobs spread over a positive time span")
    return sum(j.gpu_time for j in jobs) / span


def subsample(jobs: list[TraceJob], fraction: float | None = None, num_jobs: int | None = None,
              seed: int = 0) -> list[TraceJob]:
    """A uniform random subset, each job keeping its submit time (a thinned arrival process).

    Give exactly one of ``fraction`` (in [0, 1]) or ``num_jobs``. The result keeps
    the input order; the same seed gives the same subset.
    """
    if (fraction is None) == (num_jobs is None):
        raise ValueError("give exactly one of fraction or num_jobs")
    if fraction is not None:
        if not 0 <= fraction <= 1:
            raise ValueError(f"fraction must be in [0, 1], got {fraction!r}")
        num_jobs = round(fraction * len(jobs))
    if not (isinstance(num_jobs, int) and 0 <= num_jobs):
        raise ValueError(f"num_jobs must be an integer >= 0, got {num_jobs!r}")
    if num_jobs > len(jobs):
        raise ValueError(f"num_jobs {num_jobs} is more than the {len(jobs)} jobs given")
    chosen = sorted(random.Random(seed).sample(range(len(jobs)), num_jobs))
    return [jobs[i] for i in chosen]


def scale_to_cluster(jobs: list[TraceJob], cluster_gpus: int, reference_gpus: int,
                     seed: int = 0) -> list[TraceJob]:
    """A random subset whose offered load per GPU on ``cluster_gpus`` matches the
    original's on ``reference_gpus``; submit times are kept.

    Jobs that need more GPUs than the cluster has are left out (they could never
    start); the others are taken in a seeded random order while their GPU-time
    stays within ``total * cluster_gpus / reference_gpus``, and the gap left when
    the next job would overshoot is filled with the later jobs (same order) that
    still fit. The result keeps the input order.
    """
    for name, value in (("cluster_gpus", cluster_gpus), ("reference_gpus", reference_gpus)):
        if not (isinstance(value, int) and value > 0):
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if cluster_gpus > reference_gpus:
        raise ValueError(
            f"cluster_gpus {cluster_gpus} exceeds reference_gpus {reference_gpus}: "
            "scaling can only thin a trace, not add jobs")
    target = sum(j.gpu_time for j in jobs) * cluster_gpus / reference_gpus
    order = [i for i, j in enumerate(jobs) if j.num_gpus <= cluster_gpus]
    random.Random(seed).shuffle(order)
    chosen, total = [], 0.0
    for i in order:
        size = jobs[i].gpu_time
        if total + size <= target:
            chosen.append(i)
            total += size
    return [jobs[i] for i in sorted(chosen)]


def compress_time(jobs: list[TraceJob], factor: float, durations: bool = False) -> list[TraceJob]:
    """Jobs arriving ``factor`` times faster (inter-arrival times divided by it);
    with ``durations=True`` run times shrink by the same factor.

    The earliest submission keeps its time.
    """
    if not (isinstance(factor, (int, float)) and factor > 0 and math.isfinite(factor)):
        raise ValueError(f"factor must be a positive number, got {factor!r}")
    if not jobs:
        return []
    first = min(j.submit_time for j in jobs)
    return [
        j.copy_with(
            submit_time=first + (j.submit_time - first) / factor,
            duration=j.duration / factor if durations else j.duration)
        for j in jobs
    ]
