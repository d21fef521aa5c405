"""Which jobs wait for a placement, and the arrival order that breaks ties."""

from __future__ import annotations

from typing import Iterable

from .base import JobView


def arrival_key(job: JobView) -> tuple[float, str]:
    """Sort key for arrival order: submit time, then id (stable tie-break)."""
    return (job.submit_time, job.id)


def waiting_jobs(jobs: Iterable[JobView]) -> list[JobView]:
    """The jobs waiting for GPUs (queued, sampled or suspended), in arrival order."""
    return sorted((j for j in jobs if j.state.waiting), key=arrival_key)


def running_jobs(jobs: Iterable[JobView]) -> list[JobView]:
    """The jobs training now (not sampling or suspending), in arrival order."""
    from .base import JobState
    return sorted((j for j in jobs if j.state is JobState.RUNNING), key=arrival_key)
