"""Predictions that include the co-location a job will see: measured sharing, no oracle.

The pure functions of ``tfgshare.policies.prediction`` (sharing factor, step time
alone, run time beside sampling runs, the forecast consistent with the policy's
promotion bound), and the simulator's predictions on a burst of small jobs
whose first jobs are promoted beside the newcomers' sampling runs.
"""

from __future__ import annotations

import statistics

import pytest

from philly.jobs import TraceJob
from tfgshare import schema as s
from tfgshare.policies.base import Fragment, JobState, Policy, Start
from tfgshare.policies.prediction import (ColocationForecast, outside_slowdown,
                                          predict_remaining_s, run_time_s, sharing_factor,
                                          solo_step_s, work_ahead_s)
from tfgshare.policies.registry import get_policy
from tfgshare.sim.cluster import load_cluster
from tfgshare.sim.engine import simulate
from tfgshare.sim.profiles import load_profiles


def test_sharing_factor_and_step_alone():
    assert sharing_factor(0.4, 0.2) == pytest.approx(2.0)
    assert sharing_factor(0.19, 0.2) == 1.0          # never faster than alone
    assert sharing_factor(0.4, 0.0) is None
    assert solo_step_s(0.4, 2.0) == pytest.approx(0.2)
    assert solo_step_s(0.4, None) == 0.4             # nothing measured: as sampled


def test_step_alone_on_a_virtual_gpu_is_the_sampled_step_less_its_wait_for_a_core():
    # a runner that waited runnable 0.3 s of each 0.4 s step ran 0.1 s a step, whatever
    # kept it waiting (a co-tenant, another runner's start-up, any other process)
    assert solo_step_s(0.4, None, 0.3) == pytest.approx(0.1)
    assert solo_step_s(0.4, 1.2, 0.3) == pytest.approx(0.1)   # the wait, not the sharing
    assert solo_step_s(0.4, None, 0.0) == pytest.approx(0.4)
    # a wait summed over threads that waited at once: no shorter than the time they ran
    assert solo_step_s(0.4, None, 0.39, 0.05) == pytest.approx(0.05)
    assert solo_step_s(0.4, None, 0.5) == pytest.approx(0.4)   # nothing to go by: as sampled



def test_slowdown_from_outside_the_cluster_is_what_its_own_processes_do_not_explain():
    # sampled 4x slower than alone beside one of the cluster's competitors per core:
    # two more came from outside, and slow it 3x when it runs with none of the cluster's
    assert outside_slowdown(0.4, 0.1, 1.0) == pytest.approx(3.0)
    assert outside_slowdown(0.2, 0.1, 1.0) == 1.0         # all the cluster's own: none
    assert outside_slowdown(0.2, 0.0, 0.0) is None
    f = ColocationForecast()
    assert f.outside_now() == 1.0                         # none measured (GPUs, simulator)
    f.note_outside(3.0)
    f.note_outside(None)
    f.note_outside(5.0)
    assert f.outside_now() == pytest.approx(4.0)
    # 100 steps of 0.1 s alone, 4x slower from outside, nothing left to sample
    assert f.remaining_s(100, 0.1, 2.0, 0, 2, None) == pytest.approx(2.0 + 100 * 0.4)


def test_run_time_beside_sampling_then_alone():
    # 100 steps of 0.1 s alone; sharing doubles a step for the next 5 s
    assert run_time_s(100, 0.1, 2.0, 0.0, 0.0) == pytest.approx(10.0)
    assert run_time_s(100, 0.1, 2.0, 0.0, 5.0) == pytest.approx(5.0 + (100 - 25) * 0.1)
    assert run_time_s(100, 0.1, 2.0, 0.0, 100.0) == pytest.approx(20.0)   # shared throughout
    assert run_time_s(100, 0.1, 2.0, 6.0, 5.0) == pytest.approx(10.0)     # starts after it


def test_forecast_without_sampling_left_is_the_plain_prediction():
    f = ColocationForecast()
    f.note_sampling(20.0)
    plain = predict_remaining_s(90, 0.2, 1, 3.0)
    f.note_sharing(2.0)
    assert f.remaining_s(90, 0.2, 3.0, 0, 2, lambda left: 0.0) == pytest.approx(plain)
    assert f.remaining_s(90, 0.2, 3.0, 10, 2, None) == pytest.approx(plain)


def test_a_job_promoted_while_newcomers_sample_is_predicted_beside_them():
    f = ColocationForecast()
    f.note_sampling(20.0)
    # 10 jobs left to sample on 2 GPUs: 100 s of sampling runs. No sharing measured
    # yet: none assumed
    alone = predict_remaining_s(90, 0.2, 1, 3.0)
    assert f.remaining_s(90, 0.2, 3.0, 10, 2, lambda left: 0.0) == pytest.approx(alone)
    # measured: a running job ran 1.5x and 1.7x slower beside sampling runs. Promoted
    # at once, its 90 steps of 0.2 s run beside them, 1.6x slower, after its 3 s start
    f.note_sharing(1.5)
    f.note_sharing(None)
    f.note_sharing(1.7)
    assert f.sharing_now() == pytest.approx(1.6)
    assert f.remaining_s(90, 0.2, 3.0, 10, 2, lambda left: 0.0) == pytest.approx(
        3.0 + 90 * 0.2 * 1.6)


def test_the_forecast_agrees_with_its_own_promotion_bound():
    """Promoted after twice its prediction: the prediction is the one whose
    promotion leaves exactly the predicted share of its run beside sampling."""
    f = ColocationForecast()
    f.note_sampling(20.0)
    f.note_sharing(2.0)
    restart, unsampled, gpus = 2.0, 6, 2              # 60 s of sampling left

    def promoted_in(left: float) -> float:
        return 2.0 * left

    left = f.remaining_s(100, 0.1, restart, unsampled, gpus, promoted_in)
    alone = predict_remaining_s(100, 0.1, 1, restart)
    assert alone < left < predict_remaining_s(100, 0.2, 1, restart)
    again = restart + run_time_s(100, 0.1, 2.0, promoted_in(left) + restart, 60.0)
    assert again == pytest.approx(left, abs=0.01)
    # promoted only after the sampling is over: it runs alone
    assert f.remaining_s(100, 0.1, restart, unsampled, gpus,
                         lambda left: 61.0) == pytest.approx(alone)
    # promoted at once, but behind 96 s of others' runs on 2 GPUs: its steps begin at
    # 48 + 2 s, 10 s before the sampling ends (50 steps at 0.2 s), then 50 at 0.1 s
    assert f.remaining_s(100, 0.1, restart, unsampled, gpus, lambda left: 0.0,
                         lambda enough: 96.0) == pytest.approx(restart + 10.0 + 50 * 0.1)
    assert work_ahead_s([30.0, None, 50.0, 70.0], enough=60.0) == 80.0   # stops past 60


STEPS = (100, 200, 300, 400, 150)
PROFILE = """
models:
  lenet:
    params: 3274634
    optimizer_slots: 1
    startup_s: 4.8
    batches:
      8: {step_time_s: 0.18, memory_mb: 863, gpu_util: 1.0}
"""


def test_simulated_burst_is_predicted_within_20_percent(tmp_path):
    """tools/bench_predictions.py's batch, simulated: 20 lenet jobs at once on two
    GPUs. fgs samples newcomers first and promotes the first sampled jobs beside
    the later newcomers' sampling runs, and the last ones sample beside a running
    job. Predicted from the step sampled alone (or beside a job) they were 35 %
    off on average, up to 2x for the jobs sampled beside a running job."""
    path = tmp_path / "lenet.yaml"
    path.write_text(PROFILE)
    trace = [TraceJob(f"p{i}", 0.0, 1, 1.0, model="lenet", batch_size=8,
                      total_steps=STEPS[i % len(STEPS)]) for i in range(20)]
    res = simulate(load_cluster("1x2:16384"), trace, load_profiles(path), get_policy("fgs"))
    errors = [abs(r.predicted_total_s - r.actual_total_s) / r.actual_total_s
              for r in res.records]
    assert len(errors) == 20
    assert statistics.fmean(errors) <= 0.20
    assert max(errors) < 0.6


class BesideScript(Policy):
    """j1 samples, then runs on a third of the GPU; j2 samples beside it."""

    name = "beside"

    def decide(self, now, cluster, jobs):
        by = {j.id: j for j in jobs}
        a, b = by.get("j1"), by.get("j2")
        acts = []
        if a is not None and a.state is JobState.QUEUED:
            acts.append(Start("j1", (Fragment("n0:0", 0.3),), sample_only=True))
        elif a is not None and a.state is JobState.SAMPLED:
            acts.append(Start("j1", (Fragment("n0:0", 0.3),)))
        if b is not None and b.state is JobState.QUEUED and a.state is JobState.RUNNING:
            acts.append(Start("j2", (Fragment("n0:0", 0.5),), sample_only=True))
        return acts


LENET_100 = dict(model_name="lenet", batch_size=32, max_number_of_steps=100)
# the sample event's fields the live tests below do not vary (a runner sends them all)
SAMPLE_FIELDS = dict(warmup_steps=2, sampled_steps=8, step=10, step_time_std_s=0.0,
                     images_per_sec=32.0, peak_memory_mb=1000.0, memory_source="process_rss_peak", cpu_util=1.0)


def send_progress(run, job, step, step_s, held_s=0.0):
    """A runner's progress event for a 100-step job of 32 images a step (its agent
    held it ``held_s``: tfgshare.agent.pacer)."""
    run.event(job, "progress", step=step, loss=1.0, step_time_s=step_s, held_s=held_s,
              images_per_sec=32 / step_s, predicted_remaining_s=(100 - step) * step_s)


@pytest.mark.parametrize("late_s", [0.0, 0.9])
def test_live_job_sampled_beside_a_running_job_is_predicted_at_its_step_alone(
        tmp_path, late_s):
    """The coordinator measures how much the running job slowed while j2 sampled
    beside it (its progress: 2 s a step against the 1 s it sampled alone) and
    predicts j2 from its sampled step over that factor, not from the shared step.
    A report its agent held (paced) counts when the runner wrote it."""
    from test_coordinator_accounts import LiveRun

    run = LiveRun(tmp_path)
    run.coord.policy = BesideScript()
    spec = dict(LENET_100)
    sample = dict(SAMPLE_FIELDS)

    def progress(job, step, step_s, held_s=0.0):
        send_progress(run, job, step, step_s, held_s)

    def sampled(job, t0, step_s):
        run.at(t0 + 2 * step_s + 8 * step_s)
        run.event(job, "sample", step_time_mean_s=step_s, predicted_remaining_s=90 * step_s,
                  predicted_total_s=100 * step_s, window_start=t0 + 2 * step_s, **sample)
        progress(job, 10, step_s)
        run.event(job, "checkpoint", step=10, path="ckpt", seconds=0.5, size_mb=10.0)
        run.event(job, "suspended", step=10)
        run.exit(job, 75)
        run.round()

    a = run.submit(s.JobSpec(**spec))
    run.round()                                     # j1 samples alone: 1 s a step
    run.at(5.0)
    run.event(a, "started", global_step=0, restored=False, device="cpu", memory_fraction=0.3)
    sampled(a, 5.0, 1.0)                            # ... and starts for good
    run.at(20.0)
    run.event(a, "started", global_step=10, restored=True, device="cpu", memory_fraction=0.3)
    for i in range(1, 11):                          # at 1 s a step alone
        run.at(20.0 + i)
        progress(a, 10 + i, 1.0)
    b = run.submit(s.JobSpec(**spec))
    run.round()                                     # j2 samples beside j1
    assert run.attempts[b] == 1
    for i in range(1, 21):                          # j1 at 2 s a step meanwhile
        held = late_s if i == 12 else 0.0           # its last before j2's sample came late
        run.at(30.0 + 2 * i + held)
        progress(a, 20 + i, 2.0, held)
    run.at(35.0)
    run.event(b, "started", global_step=0, restored=False, device="cpu", memory_fraction=0.5)
    sampled(b, 35.0, 2.0)                           # j2's steps took 2 s beside j1
    job = run.coord.cluster.jobs[b]
    assert job.sample.co_tenants == 1
    assert run.coord.cluster.forecast.sharing == [pytest.approx(2.0)]
    # its start cost: 35 - 30 s before its first step, and 90 steps at 1 s alone
    # (its start, its checkpoint read back as long as its save, its steps, its final save)
    assert job.predicted_total_s == pytest.approx(5.0 + 0.5 + 90 * 1.0 + 0.5)


def test_live_steps_alone_on_virtual_gpus_come_from_the_wait_for_a_core(tmp_path):
    """A burst's first jobs sample while other runners start up on the same cores:
    j1 samples alone on its virtual GPU at 1 s a step, of which it waited 0.5 s
    for a core. It is predicted at 0.5 s a step, and when it then runs at 1 s a
    step beside j2's sampling run, the sharing measured is 2 (not 1, as against
    its sampled step), and j2, sampled at 1 s a step of which it waited 0.5, is
    predicted at 0.5 s a step alone. Before, both were predicted at 1 s a step,
    twice as long as they then ran alone (bench_predictions on a quiet machine)."""
    from test_coordinator_accounts import LiveRun

    run = LiveRun(tmp_path)
    run.coord.policy = BesideScript()
    spec = dict(LENET_100)
    sample = dict(SAMPLE_FIELDS)

    def progress(job, step, step_s, held_s=0.0):
        send_progress(run, job, step, step_s, held_s)

    def sampled(job, t0, step_s, waited_s, beside=1.0):
        run.at(t0 + 2 * step_s + 8 * step_s)
        run.event(job, "sample", step_time_mean_s=step_s, predicted_remaining_s=90 * step_s,
                  predicted_total_s=100 * step_s, window_start=t0 + 2 * step_s,
                  cpu_wait_s=waited_s, cpu_run_s=8 * step_s - waited_s,
                  cluster_runnable=beside, **sample)
        progress(job, 10, step_s)
        run.event(job, "checkpoint", step=10, path="ckpt", seconds=0.5, size_mb=10.0)
        run.event(job, "suspended", step=10)
        run.exit(job, 75)
        run.round()

    a = run.submit(s.JobSpec(**spec))
    run.round()                                     # j1 samples alone: 1 s a step ...
    run.at(5.0)
    run.event(a, "started", global_step=0, restored=False, device="cpu", memory_fraction=0.3)
    sampled(a, 5.0, 1.0, 8 * 0.5)                   # ... half of it waiting for a core
    # (held by one of the cluster's processes: a spare runner importing TensorFlow);
    # after its 5 s start the spare its start replaces imports beside it: 1 runnable a
    # core over its 15 s window with 1 start, over its 50.5 s run (``after_sampling``:
    # its start, its checkpoint read back as long as its 0.5 s save, 90 steps of 0.5 s)
    assert run.coord.cluster.jobs[a].predicted_total_s == \
        pytest.approx(5.5 + 90 * 0.5 * (1 + 15.0 / 50.5) + 0.5)   # + its final save
    run.at(20.0)
    run.event(a, "started", global_step=10, restored=True, device="cpu", memory_fraction=0.3)
    for i in range(1, 11):                          # alone now: 0.5 s a step
        run.at(20.0 + 0.5 * i)
        progress(a, 10 + i, 0.5)
    b = run.submit(s.JobSpec(**spec))
    run.at(25.0)
    run.round()                                     # j2 samples beside j1
    assert run.attempts[b] == 1
    for i in range(1, 21):                          # j1 at 1 s a step meanwhile
        run.at(25.0 + i)
        progress(a, 20 + i, 1.0)
    run.at(30.0)
    run.event(b, "started", global_step=0, restored=False, device="cpu", memory_fraction=0.5)
    sampled(b, 30.0, 1.0, 8 * 0.5)                  # j2 waited half its steps beside j1
    job = run.coord.cluster.jobs[b]
    assert job.sample.co_tenants == 1
    assert run.coord.cluster.forecast.sharing == [pytest.approx(2.0)]
    # no spare beside j2 (its co-tenant was the 1 runnable): the mean of 15 and 0
    # runnable-seconds per start, over its 50.5 s run (its read back included)
    assert run.coord.cluster.forecast.spill == [pytest.approx(15.0), pytest.approx(0.0)]
    # (+ its final save, as long as its sampling run's: 0.5 s)
    assert job.predicted_total_s == pytest.approx(5.5 + 90 * 0.5 * (1 + 7.5 / 50.5) + 0.5)


def test_live_load_from_outside_the_cluster_slows_the_predicted_steps(tmp_path):
    """On a machine shared with other work the wait for a core is not the cluster's:
    a job sampled at 1 s a step, of which it waited 0.75 s with none of the
    cluster's processes beside it, runs 0.25 s a step alone but 4x slower with
    that load: it is predicted at 1 s a step, not 0.25."""
    from test_coordinator_accounts import LiveRun

    run = LiveRun(tmp_path)
    run.coord.policy = BesideScript()
    a = run.submit(s.JobSpec(**LENET_100))
    run.round()
    run.at(5.0)
    run.event(a, "started", global_step=0, restored=False, device="cpu", memory_fraction=0.3)
    run.at(15.0)
    run.event(a, "sample", step_time_mean_s=1.0, predicted_remaining_s=90.0,
              predicted_total_s=100.0, window_start=7.0,
              cpu_wait_s=8 * 0.75, cpu_run_s=8 * 0.25, cluster_runnable=0.0, **SAMPLE_FIELDS)
    run.event(a, "checkpoint", step=10, path="ckpt", seconds=0.5, size_mb=10.0)
    run.event(a, "suspended", step=10)
    run.exit(a, 75)
    run.round()
    job = run.coord.cluster.jobs[a]
    assert job.solo_step_s == pytest.approx(0.25)
    assert run.coord.cluster.forecast.outside == [pytest.approx(4.0)]
    # (its start, its checkpoint read back as long as its save, its steps, its final save)
    assert job.predicted_total_s == pytest.approx(5.0 + 0.5 + 90 * 1.0 + 0.5)
