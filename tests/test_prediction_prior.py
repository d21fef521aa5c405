"""Predictions before any sharing is measured, and the restart a sampled job still pays.

The first jobs of a burst sample with nothing running (no sharing can be
measured yet) and are then promoted beside the later newcomers' sampling runs.
They are predicted with the time-sharing of their compute unit
(``expected_sharing``) until the first sharing is measured. Their next start is
a resume: it imports the exported graph and reads a checkpoint, as the latest
measured resumes of its model did.
"""

from __future__ import annotations

import pytest

from tfgshare import schema as s
from tfgshare.policies.base import Fragment, JobState, Policy, Start
from tfgshare.policies.prediction import ColocationForecast, expected_sharing

from test_prediction_colocation import LENET_100, SAMPLE_FIELDS, send_progress

# a resume before any of its model is measured, after a fresh start of 1 s process, 2 s
# graph built and 1 s first step, 1 s sampled steps and a 0.5 s save: the process, 3 % of
# the build imported, 1.8x the first step less the steady step it is counted as, the
# checkpoint read as long as its write took
RESUME = 1.0 + 0.03 * 2.0 + (1.8 * 1.0 - 1.0) + 0.5


def test_expected_sharing_is_the_time_sharing_of_one_compute_unit():
    # two busy processes on one core each get half of it
    assert expected_sharing(1.0, 1.0) == pytest.approx(2.0)
    # a spare runner importing TensorFlow half the time on that core; load from outside
    assert expected_sharing(1.0, 1.0, others=0.5) == pytest.approx(2.5)
    assert expected_sharing(1.0, 1.0, outside=2.0) == pytest.approx(3.0)
    # light jobs fit together: no slowdown but the per-tenant overhead on a GPU
    assert expected_sharing(0.3, 0.4) == pytest.approx(1.0)
    assert expected_sharing(0.3, 0.4, overhead=0.05) == pytest.approx(1.05)
    assert expected_sharing(1.0, 1.0, overhead=0.05) == pytest.approx(2.1)


def test_the_prior_stands_until_a_sharing_is_measured():
    f = ColocationForecast()
    f.note_sampling(20.0)
    assert f.newcomer_util() == 1.0           # nothing sampled: the safe guess
    f.note_util(0.5)
    f.note_util(0.7)
    assert f.prior(1.0) == pytest.approx(1.6)
    f.note_util(1.0)
    f.note_util(1.0)
    prior = f.prior(1.0)
    assert prior == pytest.approx(1.8)
    # 10 jobs left to sample on 2 GPUs (100 s); promoted at once: its 90 steps of 0.2 s
    # run beside the sampling runs, 1.8x slower, after its 3 s start
    assert f.remaining_s(90, 0.2, 3.0, 10, 2, lambda left: 0.0,
                         prior=prior) == pytest.approx(3.0 + 90 * 0.2 * 1.8)
    f.note_sharing(1.2)                       # measured: it replaces the prior
    assert f.remaining_s(90, 0.2, 3.0, 10, 2, lambda left: 0.0,
                         prior=prior) == pytest.approx(3.0 + 90 * 0.2 * 1.2)


def test_a_resume_is_predicted_at_the_measured_resumes():
    f = ColocationForecast()
    # nothing measured: its own last start (a sampling start, which built its graph)
    assert f.restart_s("lenet", 9.0) == 9.0
    f.note_resume("lenet", 2.0)
    f.note_resume("lenet", 4.0)
    f.note_resume("cifarnet", 7.0)
    assert f.restart_s("lenet", 9.0) == pytest.approx(3.0)
    assert f.restart_s("vgg_16", 9.0) == pytest.approx(9.0)


class PromoteScript(Policy):
    """j1 samples alone; every other job waits queued; a sampled job would be
    promoted at once (fgs's promotion bound, here 0)."""

    name = "promote"

    @staticmethod
    def promotion_wait_s(job, left_s):
        return 0.0

    def decide(self, now, cluster, jobs):
        by = {j.id: j for j in jobs}
        a = by.get("j1")
        if a is not None and a.state is JobState.QUEUED:
            return [Start("j1", (Fragment("n0:0", 0.3),), sample_only=True)]
        return []


def sample_alone(run, job, runnable):
    """j1's sampling run from t=0: started, its start phases (4 s), 2 warm-up and 8
    sampled steps of 1 s, half of each waiting for a core, with ``runnable`` of the
    cluster's other processes per core beside it; exits at 15 s."""
    run.at(4.0)
    run.event(job, "started", global_step=0, restored=False, device="cpu", memory_fraction=0.3)
    run.event(job, "start_phases", start_s=1.0, graph_s=2.0, graph_source="built",
              restore_s=0.0, restored_from=None, first_step_s=1.0)
    run.at(14.0)
    run.event(job, "sample", step_time_mean_s=1.0, predicted_remaining_s=90.0,
              predicted_total_s=100.0, window_start=6.0, cpu_wait_s=8 * 0.5,
              cpu_run_s=8 * 0.5, cluster_runnable=runnable, **SAMPLE_FIELDS)
    run.event(job, "checkpoint", step=10, path="ckpt", seconds=0.5, size_mb=10.0)
    run.event(job, "suspended", step=10)
    run.at(15.0)
    run.exit(job, 75)
    run.round()


def test_live_first_job_of_a_burst_is_predicted_beside_the_sampling_runs(tmp_path):
    """j1 samples with nothing running (no sharing measured), 0.5 s a step alone, while
    a spare runner imports TensorFlow on its core (one process per core beside it).
    Promoted at once while j2 and j3 are still to sample (2 x its 15 s sampling run on
    the one GPU), it is predicted to run its first 27.64 s after its 2.36 s resume
    (RESUME below) sharing its core three ways, 1.5 s a step, and the rest alone but for
    the spare that its own start sets importing (``after_sampling``: the 1 runnable a
    core measured over its 14 s window with 1 start, over its 47.36 s run), then its
    final save, as long as its sampling run's (0.5 s). Before, it was predicted alone
    throughout: 2 + 90 x 0.5 = 47 s."""
    from test_coordinator_accounts import LiveRun

    run = LiveRun(tmp_path)
    run.coord.policy = PromoteScript()
    a = run.submit(s.JobSpec(**LENET_100))
    run.submit(s.JobSpec(**LENET_100))
    run.submit(s.JobSpec(**LENET_100))
    run.round()
    assert run.attempts == {a: 1}
    sample_alone(run, a, runnable=1.0)
    job = run.coord.cluster.jobs[a]
    forecast = run.coord.cluster.forecast
    assert job.solo_step_s == pytest.approx(0.5)
    assert forecast.outside == [pytest.approx(1.0)]    # its wait was the cluster's spare
    assert forecast.sharing == []
    shared = 30.0 - RESUME
    after = 1.0 + 14.0 / (RESUME + 90 * 0.5)
    assert job.after_sampling == pytest.approx(after)
    assert job.predicted_total_s == pytest.approx(
        RESUME + shared + (90 - shared / 1.5) * 0.5 * after + 0.5)


class ResumeScript(Policy):
    """j1 samples, then resumes; j2 samples beside it."""

    name = "resume"

    def decide(self, now, cluster, jobs):
        by = {j.id: j for j in jobs}
        a, b = by.get("j1"), by.get("j2")
        if a is not None and a.state is JobState.QUEUED:
            return [Start("j1", (Fragment("n0:0", 0.3),), sample_only=True)]
        if a is not None and a.state is JobState.SAMPLED:
            return [Start("j1", (Fragment("n0:0", 0.1),))]
        if b is not None and b.state is JobState.QUEUED and a.state is JobState.RUNNING:
            return [Start("j2", (Fragment("n0:0", 0.5),), sample_only=True)]
        return []


def test_live_resume_cost_comes_from_measured_resumes(tmp_path):
    """A sampled job's next start is a resume: it imports the exported graph and reads
    a checkpoint. It is predicted at the measured resumes (1 s here) once there are
    some; before, at its own sampling start's phases (process 1 s, graph 2 s built,
    first step 1 s; not its variables' initialisation and input start, 0.5 s, which a
    resume does not run) with the graph imported (3 % of the build), a resumed
    process's first step (1.8x, less the 1 s steady step it is counted as) and the
    checkpoint read as long as it took to write (0.5 s): RESUME, 2.36 s; never with its
    wait for a runner. Its final save costs what its last save took (0.5 s)."""
    from test_coordinator_accounts import LiveRun

    run = LiveRun(tmp_path)
    run.coord.policy = ResumeScript()
    forecast = run.coord.cluster.forecast

    def sampled(job, t0):
        """Started at ``t0`` + 4 s after a 4 s build, 2 + 8 steps of 1 s, nothing
        beside it but its co-tenant; exits 1 s after."""
        run.at(t0 + 4.0)
        run.event(job, "started", global_step=0, restored=False, device="cpu",
                  memory_fraction=0.3)
        run.event(job, "start_phases", start_s=1.0, graph_s=2.0, graph_source="built",
                  restore_s=0.0, restored_from=None, first_step_s=1.0, init_s=0.4,
                  input_s=0.1)
        run.at(t0 + 8.0)
        send_progress(run, job, 3, 1.0)       # its progress before the sample
        run.at(t0 + 14.0)
        run.event(job, "sample", step_time_mean_s=1.0, predicted_remaining_s=90.0,
                  predicted_total_s=100.0, window_start=t0 + 6.0, cpu_wait_s=0.0,
                  cpu_run_s=8.0, cluster_runnable=float(job != a), **SAMPLE_FIELDS)
        run.event(job, "checkpoint", step=10, path="ckpt", seconds=0.5, size_mb=10.0)
        run.event(job, "suspended", step=10)
        run.at(t0 + 15.0)
        run.exit(job, 75)
        run.round()

    a = run.submit(s.JobSpec(**LENET_100))
    run.round()
    sampled(a, 5.0)                           # after 5 s waiting for a runner
    assert run.coord.cluster.jobs[a].predicted_total_s == pytest.approx(
        RESUME + 90 * 1.0 + 0.5)
    # a move costs its save and its start's phases, the initialisation left out
    assert run.coord.cluster.jobs[a].view().move_cost_s == pytest.approx(0.5 + 4.0)
    assert run.attempts[a] == 2               # resumed at 20 s
    run.at(24.0)                              # 2 s waiting for a runner, 2 s of phases
    run.event(a, "started", global_step=10, restored=True, device="cpu", memory_fraction=0.1)
    run.event(a, "start_phases", start_s=0.1, graph_s=0.4, graph_source="imported",
              restore_s=0.5, restored_from="ckpt", first_step_s=1.0)
    run.at(26.0)
    send_progress(run, a, 12, 1.0)
    # measured: 2 s of phases, its first step among them, counted as a steady 1 s step
    assert forecast.resumes == {"lenet": [pytest.approx(1.0)]}
    b = run.submit(s.JobSpec(**LENET_100))
    run.round()
    sampled(b, 26.0)
    # its resume at the 1 s measured
    assert run.coord.cluster.jobs[b].predicted_total_s == pytest.approx(1.0 + 90 * 1.0 + 0.5)
