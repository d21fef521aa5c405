"""SJF, Tiresias and Gandiva on hand-built clusters where the decision is known."""

import pytest

from tfgshare.policies.base import JobState, Start, Suspend
from tfgshare.policies.builders import make_cluster, make_job
from tfgshare.policies.validate import validate
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


# ---- tiresias (the authors' dlas-gpu: SymbioticLab/Tiresias run_sim.py) ------

def _running(id, attained, gpus=("n0:0",), submit=0.0, at=None):
    return make_job(id, submit=submit, gpus=len(gpus), on={g: WHOLE for g in gpus},
                    attained_service_s=attained, attained_at=at, last_start=0)


def _waiting(id, attained=0.0, submit=0.0, gpus=1):
    state = JobState.SUSPENDED if attained else JobState.QUEUED
    return make_job(id, submit=submit, gpus=gpus, state=state, attained_service_s=attained,
                    last_start=0 if attained else None)


def test_tiresias_defaults_are_the_authors():
    pol = get_policy("tiresias")
    assert pol.thresholds == (3250.0, 7200.0) and pol.promote_knob == 0 and pol.min_run_s == 0
    assert get_policy("tiresias-promote").promote_knob == 4


def test_tiresias_new_job_preempts_a_job_of_a_lower_queue():
    c = make_cluster(1, 1)
    old, new = _running("old", 4000), _waiting("new", submit=4000)
    pol = get_policy("tiresias")
    memo = pol.new_memo()
    acts = pol.decide(4001, c, [old, new], memo)
    assert acts == [Suspend("old"), Start("new", acts[1].fragments)]
    assert pol.queue_of(memo, "old") == 1 and pol.queue_of(memo, "new") == 0
    assert validate(acts, c, [old, new]) == []


def test_tiresias_never_preempts_within_a_queue():
    c = make_cluster(1, 1)
    young = _running("young", 3000)                      # below 3,250 GPU-s: queue 0
    assert get_policy("tiresias").decide(3001, c, [young, _waiting("new", submit=3000)]) == []
    wide = _running("wide", 4 * 1000, gpus=("n0:0", "n0:1", "n0:2", "n0:3"))  # 4,000 GPU-s
    acts = get_policy("tiresias").decide(1000, make_cluster(1, 4), [wide, _waiting("new")])
    assert [type(a) for a in acts] == [Suspend, Start]


def test_tiresias_demoted_job_goes_behind_the_waiting_jobs_of_its_new_queue():
    c = make_cluster(1, 1)
    pol = get_policy("tiresias")
    memo = pol.new_memo()                                    # the queues live in the memo
    waiter = _waiting("waiter", attained=4000)               # queue 1, waiting
    assert pol.decide(1000, c, [_running("r", 3000, at=1000), waiter], memo) == []  # r: queue 0
    # 300 s later r has 3,300 GPU-s (its view is extrapolated from attained_at):
    # demoted to the back of queue 1, behind the waiter, which takes the GPU
    acts = pol.decide(1300, c, [_running("r", 3000, at=1000), waiter], memo)
    assert [(type(a), a.job) for a in acts] == [(Suspend, "r"), (Start, "waiter")]
    # a job already running in queue 1 keeps its GPU ahead of the queue's waiting jobs
    other = get_policy("tiresias")
    assert other.decide(1300, c, [_running("r", 3300, at=1300), waiter]) == []


def test_tiresias_smaller_job_passes_a_blocked_one_in_its_queue():
    c = make_cluster(1, 2)
    jobs = [_running("busy", 10, gpus=("n0:0",)), _waiting("big", submit=1, gpus=2),
            _waiting("small", submit=2)]
    assert [a.job for a in get_policy("tiresias").decide(5, c, jobs)] == ["small"]
    jobs = [_waiting("b", submit=2), _waiting("a", submit=1)]
    assert [a.job for a in get_policy("tiresias").decide(5, make_cluster(1, 1), jobs)] == ["a"]


def test_tiresias_has_no_promotion_but_the_variant_does():
    c = make_cluster(1, 1)
    runner = _running("runner", 10_000, submit=10)           # queue 2
    starved = make_job("starved", state=JobState.SUSPENDED, attained_service_s=8000,
                       last_start=0, waited_s=0.0, last_wait_start=1000)
    for name, want in (("tiresias", []), ("tiresias-promote", ["runner", "starved"])):
        pol = get_policy(name)
        memo = pol.new_memo()
        pol.decide(999, c, [runner, make_job("starved", submit=0, on={"n0:0": WHOLE},
                                             attained_service_s=8000 - 1, last_start=0)], memo)
        # waited 40,000 s > 4 x 8,000 s of run: promoted to queue 0 in the variant only
        assert [a.job for a in pol.decide(41_000, c, [runner, starved], memo)] == want, name


def test_tiresias_asks_to_be_woken_at_the_next_demotion():
    c = make_cluster(1, 2)
    pol = get_policy("tiresias", authors_wake=False)
    memo = pol.new_memo()
    pol.decide(100, c, [_running("r", 3000, at=100), _waiting("w", gpus=2)], memo)
    assert pol.wake_at(100, memo) == pytest.approx(350.0)    # 250 s to 3,250 GPU-s
    theirs = get_policy("tiresias")                          # their jump: (limit - run s) / GPUs
    memo = theirs.new_memo()
    theirs.decide(100, c, [_running("r2", 2 * 1000, gpus=("n0:0", "n0:1"), at=100),
                           _waiting("w")], memo)
    assert theirs.wake_at(100, memo) == pytest.approx(100 + (3250 - 1000) / 2)


def test_tiresias_bad_params():
    with pytest.raises(ValueError, match="increasing"):
        get_policy("tiresias", thresholds=(100, 50))
    with pytest.raises(ValueError, match=">= 0"):
        get_policy("tiresias", promote_knob=-1)


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
