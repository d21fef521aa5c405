"""What a policy believes about a job's remaining run time and its wait so far."""

from __future__ import annotations

from .base import JobView
from .queueing import HOLDING, WAITING


def remaining_time_s(total_steps: float, steps_done: float, step_time_s: float) -> float:
    """The sampling analysis's prediction: remaining steps x step time (never negative).

    The one formula the coordinator, the simulator and the policies use.
    """
    left = total_steps - steps_done
    return left * step_time_s if left > 0 else 0.0


def predict_remaining_s(steps_left: float, step_time_s: float, restarts: int = 0,
                        restart_s: float = 0.0) -> float:
    """Run time a job still needs: its steps at the current measured step time, plus
    the measured cost of each restart still expected.

    ``step_time_s`` is the latest measured step time, so it carries the present
    co-location slowdown; ``restart_s`` is what its last start cost before its
    steps ran at speed (process start, graph build, restore); ``restarts`` is
    1 for a job that waits (it must start again) and 0 for one that runs. The
    live coordinator and the simulator both predict with this function, from
    measurements (the simulator's carry its measurement noise).
    """
    return max(0.0, steps_left) * max(0.0, step_time_s) + restarts * max(0.0, restart_s)


def remaining_s(job: JobView) -> float | None:
    """Predicted seconds left: the caller's refreshed figure, else from the sample, else None."""
    if job.predicted_remaining_s is not None:
        return job.predicted_remaining_s
    if job.sample is not None:
        return remaining_time_s(job.total_steps, job.steps_done, job.sample.step_time_s)
    return None


def current_wait_s(job: JobView, now: float) -> float:
    """How long a waiting job has waited since it last stopped running (or since submit)."""
    if job.state not in WAITING:
        return 0.0
    since = job.last_wait_start if job.last_wait_start is not None else job.submit_time
    return max(0.0, now - since)


def total_wait_s(job: JobView, now: float) -> float:
    """All the time the job has not run since submit, up to ``now``.

    ``waited_s`` is read as the waiting already closed (before the current
    wait began at ``last_wait_start``); the current wait is added to it. A job
    that never ran and has no ``last_wait_start`` has waited since submit.
    """
    if job.state in WAITING and job.last_wait_start is None and job.last_start is None:
        return max(0.0, now - job.submit_time)
    return job.waited_s + current_wait_s(job, now)


def run_s(job: JobView) -> float:
    """Seconds the job has run so far: attained GPU-seconds over its GPU count."""
    return job.attained_service_s / max(1, job.num_gpus)


def attained_now(job: JobView, now: float) -> float:
    """GPU-seconds received up to ``now``: a job holding GPUs gains ``num_gpus`` per second
    since its view measured ``attained_service_s`` (at ``attained_at``)."""
    if job.attained_at is not None and job.state in HOLDING and now > job.attained_at:
        return job.attained_service_s + (now - job.attained_at) * job.num_gpus
    return job.attained_service_s
