"""SJF, Tiresias and Gandiva on hand-built clusters where the decision is known."""

import pytest

from tfgshare.policies.base import JobState, Start, Suspend
from tfgshare.policies.builders import make_cluster, make_job
from tfgshare.policies.placement import validate
from tfgshare.policies.registry import get_policy

WHOLE = 1 - 300 / 16000


def starts(actions):
    return {a.job: a for a in actions if isinstance(a, Start)}


# ---- sjf -----------------------------------------------------------------

def test_sjf_picks_the_shortest_predicted_job():
    c = make_cluster(1, 1)
    jobs = [make_job("long", submit=0, memory_mb=2000, total_steps=10_000),
            make_job("short", submit=5, memory_mb=2000, total_steps=100),
            make_job("mid", submit=1, memory_mb=2000, total_steps=1000)]
    (a,) = get_policy("sjf").decide(10, c, jobs)
    assert a.job == "short" and not a.sample_only and a.fragments[0].fraction == pytest.approx(WHOLE)


def test_sjf_samples_unpredicted_jobs_on_exclusive_gpus_first():
    c = make_cluster(1, 2)
    jobs = [make_job("known", submit=0, memory_mb=2000, total_steps=10),
            make_job("new", submit=5)]
    acts = get_policy("sjf").decide(10, c, jobs)
    s = starts(acts)
    assert s["new"].sample_only and not s["known"].sample_only
    assert {a.fragments[0].gpu for a in acts} == {"n0:0", "n0:1"}
    assert validate(acts, c, jobs, max_tenants=1) == []


def test_sjf_uses_caller_prediction_and_skips_what_does_not_fit():
    c = make_cluster(1, 2)
    jobs = [make_job("busy", on={"n0:0": WHOLE}),
            make_job("wide", submit=0, gpus=2, predicted_s=1.0),
            make_job("narrow", submit=1, predicted_s=50.0)]
    (a,) = get_policy("sjf").decide(10, c, jobs)
    assert a.job == "narrow" and a.fragments[0].gpu == "n0:1"


def test_sjf_without_sampling_runs_unpredicted_jobs_last():
    c = make_cluster(1, 1)
    jobs = [make_job("new", submit=0), make_job("known", submit=5, predicted_s=9e9)]
    (a,) = get_policy("sjf", sample_on_admission=False).decide(10, c, jobs)
    assert a.job == "known"


# ---- tiresias --------------------------------------------------------------

def test_tiresias_demotes_a_long_job_and_preempts_it_for_a_new_one():
    c = make_cluster(1, 1)
    old = make_job("old", submit=0, on={"n0:0": WHOLE}, attained_service_s=4000,
                   last_start=0)
    new = make_job("new", submit=4000)
    pol = get_policy("tiresias")
    assert pol.queue_of(old, 4001) == 1 and pol.queue_of(new, 4001) == 0
    acts = pol.decide(4001, c, [old, new])
    assert acts == [Suspend("old"), Start("new", acts[1].fragments)]
    assert acts[1].fragments[0].gpu == "n0:0"
    assert validate(acts, c, [old, new]) == []


def test_tiresias_does_not_preempt_below_threshold_or_within_its_queue():
    c = make_cluster(1, 1)
    young = make_job("young", submit=0, on={"n0:0": WHOLE}, attained_service_s=3000,
                     last_start=0)
    assert get_policy("tiresias").decide(3001, c, [young, make_job("new", submit=3000)]) == []


def test_tiresias_multi_gpu_attained_service_counts_gpu_seconds():
    c = make_cluster(1, 4)
    wide = make_job("wide", gpus=4, on={f"n0:{i}": WHOLE for i in range(4)},
                    attained_service_s=4 * 1000, last_start=0)   # 1000 s on 4 GPUs
    acts = get_policy("tiresias").decide(1000, c, [wide, make_job("new", submit=999)])
    assert [type(a) for a in acts] == [Suspend, Start]


def test_tiresias_respects_min_run_time():
    c = make_cluster(1, 1)
    old = make_job("old", on={"n0:0": WHOLE}, attained_service_s=9000, last_start=100)
    new = make_job("new", submit=120)
    assert get_policy("tiresias", min_run_s=60).decide(130, c, [old, new]) == []
    assert len(get_policy("tiresias", min_run_s=60).decide(161, c, [old, new])) == 2


def test_tiresias_promotes_a_starving_job():
    c = make_cluster(1, 1)
    runner = make_job("runner", submit=10, on={"n0:0": WHOLE}, attained_service_s=5000,
                      last_start=0)
    starved = make_job("starved", submit=0, state=JobState.SUSPENDED,
                       attained_service_s=4000, last_start=0, last_wait_start=4000)
    pol = get_policy("tiresias", promote_knob=2)
    assert pol.queue_of(starved, 9000) == 1            # waited 5000 < 2 x 4000
    assert pol.queue_of(starved, 12001) == 0           # waited 8001 > 8000
    assert [a.job for a in pol.decide(12001, c, [runner, starved])] == ["runner", "starved"]


def test_tiresias_fifo_within_a_queue_and_bad_params():
    c = make_cluster(1, 1)
    jobs = [make_job("b", submit=2), make_job("a", submit=1)]
    assert [a.job for a in get_policy("tiresias").decide(5, c, jobs)] == ["a"]
    with pytest.raises(ValueError, match="increasing"):
        get_policy("tiresias", thresholds=(100, 50))


# ---- gandiva ---------------------------------------------------------------

def test_gandiva_packs_two_small_jobs_on_one_gpu():
    c = make_cluster(1, 1)
    jobs = [make_job("a", submit=0, memory_mb=3000), make_job("b", submit=1, memory_mb=3000)]
    acts = get_policy("gandiva").decide(5, c, jobs)
    assert [(a.job, a.fragments[0].gpu) for a in acts] == [("a", "n0:0"), ("b", "n0:0")]
    assert acts[0].fragments[0].fraction == pytest.approx(3000 * 1.1 / 16000)
    assert validate(acts, c, jobs) == []


def test_gandiva_spreads_to_the_least_loaded_gpu_then_packs():
    c = make_cluster(1, 2)
    jobs = [make_job("r", on={"n0:0": 0.3}),
            make_job("a", submit=0, requested_fraction=0.3),
            make_job("b", submit=1, requested_fraction=0.3),
            make_job("c", submit=2, requested_fraction=0.3)]
    acts = get_policy("gandiva").decide(5, c, jobs)
    assert [(a.job, a.fragments[0].gpu) for a in acts] == [
        ("a", "n0:1"), ("b", "n0:0"), ("c", "n0:1")]
    assert validate(acts, c, jobs) == []


def test_gandiva_skips_a_big_job_without_promoting_it_and_caps_tenants():
    c = make_cluster(1, 1)
    jobs = [make_job("r", on={"n0:0": 0.2}), make_job("big", submit=0, requested_fraction=0.9),
            make_job("s1", submit=1, requested_fraction=0.1),
            make_job("s2", submit=2, requested_fraction=0.1)]
    acts = get_policy("gandiva", max_tenants=2).decide(5, c, jobs)
    assert [a.job for a in acts] == ["s1"]
