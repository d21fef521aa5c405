"""The sampling plan and the completion-time prediction."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tfgshare.runner.timing import StepTimer
from tfgshare.sampling import SamplePlan, plan_sampling


@given(remaining=st.integers(1, 10**6), warmup=st.integers(0, 50),
       samples=st.integers(1, 200), share=st.floats(0.01, 1.0))
def test_plan_stays_within_the_job_and_its_share(remaining, warmup, samples, share):
    plan = plan_sampling(remaining, warmup, samples, share)
    assert plan.sampled >= 1
    assert plan.warmup + plan.sampled <= remaining
    assert plan.sampled <= samples and plan.warmup <= warmup
    assert plan.warmup + plan.sampled <= max(2, int(remaining * share))
    if remaining >= 2 and warmup >= 1:
        assert plan.warmup >= 1   # the first (set-up) step is never sampled


def test_long_job_gets_the_full_sample():
    assert plan_sampling(1000, 5, 20, 0.1) == SamplePlan(5, 20)


def test_no_steps_or_no_sampling_means_no_sample():
    assert plan_sampling(0, 5, 20, 0.1) == SamplePlan(0, 0)
    assert plan_sampling(100, 5, 0, 0.1) == SamplePlan(0, 0)


def test_timer_samples_after_warmup_and_predicts():
    timer = StepTimer(SamplePlan(warmup=2, sampled=3), images_per_step=10)
    done = [timer.add(s) for s in (5.0, 5.0, 0.1, 0.3, 0.2)]
    assert done == [False, False, False, False, True]
    stats = timer.sample_stats()
    assert stats["step_time_mean_s"] == pytest.approx(0.2)
    assert stats["step_time_std_s"] == pytest.approx(0.0816, abs=1e-3)
    assert stats["images_per_sec"] == pytest.approx(50.0)
    assert timer.predicted_remaining_s(100) == pytest.approx(20.0)


def test_prediction_follows_a_slowdown():
    timer = StepTimer(SamplePlan(warmup=0, sampled=2), images_per_step=1)
    timer.add(1.0)
    timer.add(1.0)
    for _ in range(60):
        timer.add(2.0)   # a co-tenant arrived
    assert timer.predicted_remaining_s(10) == pytest.approx(20.0, rel=0.01)


def test_no_prediction_before_any_measured_step():
    timer = StepTimer(SamplePlan(warmup=3, sampled=5), images_per_step=1)
    timer.add(9.0)
    assert timer.predicted_remaining_s(10) is None
