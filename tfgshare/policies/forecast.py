"""The one forecast of a just-sampled job's step time, read the same way by the live
coordinator and the simulator.

Both sides keep a ``ColocationForecast`` fed with their own measurements (the
coordinator's from its runners' reports, the simulator's with its measurement
noise) and ask these functions for a sampled job's prediction. A job is read
through ``ForecastJob``, which the coordinator's ``LiveJob`` and the simulator's
``SimJob`` both satisfy; what each side measures differently (a co-tenant's
step time beside a sampling run, a job's steps and run left, the jobs waiting)
is passed in.
"""

from __future__ import annotations

from itertools import islice
from typing import Callable, Iterable, NamedTuple, Protocol, TypeVar

from .base import Fragment, JobState, JobView, SampleRecord
from .prediction import (AHEAD_SCAN, ColocationForecast, gpu_overhead, promotion_in,
                         sharing_factor, work_ahead_s)


class ForecastJob(Protocol):
    """What the forecast reads of a job (``LiveJob`` and ``SimJob`` have it)."""

    id: str
    submit_time: float
    state: JobState
    sample: SampleRecord | None
    fragments: tuple[Fragment, ...]
    solo_step_s: float | None      # its step time alone (sampled, less a measured sharing)
    sampled_beside: float | None   # virtual GPUs: other processes per core by its sample


J = TypeVar("J", bound=ForecastJob)   # the caller's own job type


class Forecast(NamedTuple):
    """A sampled job's expected step time, sharing included, and how much slower than
    alone it runs once newcomers stop sampling (``ColocationForecast.after_sampling``)."""

    step_s: float
    after: float


def sharing_beside(job: J, tenants: Callable[[str], Iterable[J]],
                   shared_step_s: Callable[[J], float | None]) -> float | None:
    """How much the running jobs beside ``job`` were slowed while it sampled: the mean
    over its GPUs' running co-tenants (``tenants(gpu)``) of their step time then
    (``shared_step_s``, None: not measured) over their step time alone (None if none)."""
    found = []
    for f in job.fragments:
        for other in tenants(f.gpu):
            if other is not job and other.state is JobState.RUNNING \
                    and other.solo_step_s is not None:
                step = shared_step_s(other)
                factor = None if step is None else sharing_factor(step, other.solo_step_s)
                if factor is not None:
                    found.append(factor)
    return sum(found) / len(found) if found else None


def prior_sharing(forecast: ColocationForecast, policy: object, job: ForecastJob) -> float:
    """The sharing a sampled job is expected to see beside a sampling run before one is
    measured: the time-sharing of its compute unit (CPU cores: equal turns, with the
    cluster's processes its sample measured beside it; GPUs: the policy's
    interference model)."""
    util = job.sample.gpu_util if job.sample is not None else 1.0
    if job.sampled_beside is not None:
        return forecast.prior(util, job.sampled_beside)
    return forecast.prior(util, 0.0, gpu_overhead(policy))


def waiting_beside(jobs: Iterable[J], job: J,
                   left_s: Callable[[J], float | None]) -> tuple[int, float | None]:
    """Among the first ``AHEAD_SCAN`` live ``jobs`` but ``job``: how many wait with a
    sample, and the mean predicted run (``left_s``) of those predicted (None if none).
    The simulator keeps the same figures indexed (``sim.live_window.LiveWindow``)."""
    waiting, runs = 0, []
    for other in islice(jobs, AHEAD_SCAN):
        if other is not job and other.sample is not None and other.state.waiting:
            waiting += 1
            left = left_s(other)
            if left is not None:
                runs.append(left)
    return waiting, (sum(runs) / len(runs) if runs else None)


def forecast_step_s(forecast: ColocationForecast, policy: object, job: J, view: JobView,
                    steps: float, restart: float, now: float, *, jobs: Iterable[J],
                    left_s: Callable[[J], float | None], unsampled: int, gpus: int,
                    waiting: int, mean_run_s: float | None,
                    node_units: int = 1) -> Forecast | None:
    """The step time a just-sampled ``job`` (its policy view ``view``, ``steps`` left)
    is expected to run at, sharing included, after a start costing ``restart``.

    From its step alone, the sampling still to come (``unsampled`` jobs over
    ``gpus``), when ``policy`` would promote it, the work ahead of it among the
    live ``jobs`` (arrival order; ``left_s``: a job's predicted run left, None if
    not predicted: the coordinator's refreshed prediction, the simulator's steps
    at its measured step), and the co-location it is placed in once none is left
    to sample (``waiting`` jobs, sampled or not, of ``mean_run_s`` mean predicted
    run; its node's ``node_units``). None before it has a sample and a step alone.
    """
    solo = job.solo_step_s
    if solo is None or job.sample is None:
        return None
    if steps <= 0:
        return Forecast(solo, 1.0)
    mine = (job.submit_time, job.id)

    def ahead(enough: float) -> float:   # once promoted: running jobs, longer waiting ones
        return work_ahead_s((left_s(j) for j in islice(jobs, AHEAD_SCAN)
                             if j is not job and j.state is not JobState.SAMPLING
                             and (j.state.holds_gpu or (j.submit_time, j.id) < mine)),
                            enough)

    overhead = 0.0 if job.sampled_beside is not None else gpu_overhead(policy)
    after = forecast.after_sampling(job.sample.gpu_util,
                                    (steps * solo + restart) * forecast.outside_now(),
                                    waiting, gpus, node_units, mean_run_s, policy, overhead)
    total = forecast.remaining_s(steps, solo, restart, unsampled, gpus,
                                 promotion_in(policy, view, now), ahead,
                                 prior_sharing(forecast, policy, job), after)
    return Forecast(max(0.0, total - restart) / steps, after)
