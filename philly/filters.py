"""Choosing and reshaping trace jobs: windows, subsets, scaling and time compression.

Every function is pure: it returns new lists (jobs are immutable) and depends only
on its arguments and, where random, on ``seed``.
"""

from __future__ import annotations

import dataclasses
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
    return [dataclasses.replace(job, submit_time=job.submit_time - first) for job in jobs]


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
