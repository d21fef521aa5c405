"""The one forecast (``policies.forecast``): both sides' jobs are what it reads, and the
simulator's indexed read of the waiting jobs is the forecast's scan."""

from __future__ import annotations

import typing

import pytest

from tfgshare.coordinator.measures import run_left_s as live_left_s
from tfgshare.coordinator.cluster import LiveJob
from tfgshare.policies.base import Fragment, JobState, SampleRecord
from tfgshare.policies.forecast import (ForecastJob, forecast_step_s, prior_sharing,
                                        sharing_beside, waiting_beside)
from tfgshare.policies.prediction import ColocationForecast
from tfgshare.schema import JobSpec
from tfgshare.sim.forecast import run_left_s as sim_left_s
from tfgshare.sim.job import SimJob
from tfgshare.sim.live_window import LiveWindow
from tfgshare.sim.profiles import ModelProfile

PROF = ModelProfile("lenet", 32, 0.1, 500.0, 0.5, 10.0, 5.0)


def sim_job(n: int, state: JobState, step: float | None, steps: float = 0.0) -> SimJob:
    job = SimJob(f"s{n}", 1, "lenet", 1000, PROF, state=state, steps=steps,
                 measured_step_s=step, submit_time=float(n), position=n)
    job.sample = None if step is None else SampleRecord(step, 500.0, 0.5)
    job.solo_step_s = step
    return job


def live_job(n: int, state: JobState, step: float | None, left: float | None) -> LiveJob:
    job = LiveJob(id=f"l{n}", seq=n, spec=JobSpec("lenet", max_number_of_steps=1000),
                  state=state, submit_time=float(n), measured_step_s=step,
                  solo_step_s=step, predicted_remaining_s=left)
    job.sample = None if step is None else SampleRecord(step, 500.0, 0.5)
    return job


def test_the_live_and_the_simulated_job_have_what_the_forecast_reads():
    names = typing.get_type_hints(ForecastJob)
    assert {"id", "state", "sample", "solo_step_s", "sampled_beside"} <= set(names)
    for job in (sim_job(1, JobState.SAMPLED, 0.1), live_job(1, JobState.SAMPLED, 0.1, 90.0)):
        assert all(hasattr(job, name) for name in names)


def test_the_live_window_reads_what_the_forecast_scans():
    states = [JobState.SAMPLED, JobState.RUNNING, JobState.QUEUED, JobState.SUSPENDED,
              JobState.SAMPLED, JobState.SAMPLING]
    jobs = [sim_job(i + 1, s, None if s is JobState.QUEUED else 0.1 * (i + 1), 10.0 * i)
            for i, s in enumerate(states)]
    window = LiveWindow(len(jobs))
    for job in jobs:   # as the engine notes each job's contribution
        window.join(job.position)
        window.note(job.position, job.sample is not None and job.state.waiting,
                    sim_left_s(job))
    for me in jobs:
        waiting, measured, runs = window.read(1000, me.position)
        scanned, mean = waiting_beside(jobs, me, sim_left_s)
        assert waiting == scanned
        assert (runs / measured if measured else None) == mean


class Promotes:
    """A policy that would promote a waiting job at once."""

    @staticmethod
    def promotion_wait_s(job, left_s: float) -> float:
        return 0.0


def test_both_sides_forecast_alike_from_the_same_readings():
    forecast = ColocationForecast()
    forecast.note_sampling(30.0)
    forecast.note_util(0.5)
    found = []
    # the jobs ahead of it run 2 s more each: it is promoted while newcomers sample
    for make, left_s in ((lambda n, s: sim_job(n, s, 0.2, 990.0 if n < 9 else 0.0), sim_left_s),
                         (lambda n, s: live_job(n, s, 0.2, 2.0), live_left_s)):
        others = [make(n, JobState.RUNNING) for n in range(1, 4)]
        job = make(9, JobState.SAMPLED)
        job.last_wait_start = 9.0
        # promoted beside the sampling still to come: slower than its 0.2 s alone (the
        # job stands for its policy view: what the promotion bound reads)
        found.append(forecast_step_s(forecast, Promotes(), job, job, 1000, 5.0, 10.0,
                                     jobs=others + [job], left_s=left_s, unsampled=4,
                                     gpus=2, waiting=4, mean_run_s=None))
        assert prior_sharing(forecast, Promotes(), job) > 1.0
    assert found[0] == found[1] and found[0] is not None and found[0].step_s > 0.2


def test_sharing_beside_reads_the_running_co_tenants_measured():
    me = sim_job(1, JobState.SAMPLING, 0.1)
    me.fragments = (Fragment("n:0", 0.5),)
    beside = [sim_job(2, JobState.RUNNING, 0.1), sim_job(3, JobState.RUNNING, 0.2),
              sim_job(4, JobState.SAMPLED, 0.1)]
    shared = {"s2": 0.3, "s3": None, "s4": 9.0}
    got = sharing_beside(me, lambda gpu: [me, *beside], lambda o: shared[o.id])
    assert got == pytest.approx(3.0)   # s2 only: s3 not measured, s4 not running
