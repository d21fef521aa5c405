"""The simulator on tiny scenarios whose outcome is computed by hand."""

from __future__ import annotations

import pytest

from philly.jobs import TraceJob
from tfgshare.policies.base import Fragment, JobState, Migrate, Policy, Start, Suspend, Tick
from tfgshare.policies.registry import get_policy
from tfgshare.sim.cluster import load_cluster
from tfgshare.sim.colocation import Colocation
from tfgshare.sim.config import SimConfig
from tfgshare.sim.engine import SimulationError, Simulator, simulate
from tfgshare.sim.profiles import load_profiles

# One model: 1 s per step, 10 s start-up, 1000 MB, checkpoint 1e6 * 4 B * 2 = 7.63 MiB.
TOY = """
models:
  toy:
    params: 1000000
    startup_s: 10
    batches:
      1: {step_time_s: 1.0, memory_mb: 1000, gpu_util: 1.0}
      2: {step_time_s: 1.0, memory_mb: 1000, gpu_util: 0.6}
"""
CKPT_MB = 1e6 * 8 / 2**20
STORAGE = 250.0
SAVE = CKPT_MB / STORAGE


@pytest.fixture
def toy(tmp_path):
    path = tmp_path / "toy.yaml"
    path.write_text(TOY)
    return load_profiles(path)


def job(id, submit, steps, gpus=1, batch=1):
    return TraceJob(id, submit, gpus, float(steps), model="toy", batch_size=batch,
                    total_steps=steps)


class Script(Policy):
    """A test policy: ``fn(now, jobs_by_id)`` returns the actions; it records every view."""

    name = "script"

    def __init__(self, fn):
        self.fn = fn
        self.seen: list[tuple[float, dict]] = []

    def decide(self, now, cluster, jobs):
        by_id = {j.id: j for j in jobs}
        self.seen.append((now, by_id))
        return self.fn(now, by_id)


def whole(gpu="n0:0"):
    return (Fragment(gpu, 0.95),)


def sample_then_run(now, jobs):
    """A script: job "a" samples on the one GPU, then runs there."""
    a = jobs.get("a")
    if a and a.state is JobState.QUEUED:
        return [Start("a", whole(), sample_only=True)]
    if a and a.state is JobState.SAMPLED:
        return [Start("a", whole())]
    return []


def test_fifo_two_jobs_one_gpu_by_hand(toy):
    # a: starts at 0, 10 s start-up, 100 steps -> finishes at 110
    # b: arrives at 5, waits until 110, 10 s start-up, 50 steps -> finishes at 170
    res = simulate(load_cluster("1x1"), [job("a", 0, 100), job("b", 5, 50)], toy,
                   get_policy("fifo"), SimConfig(check=True))
    recs = {r.id: r for r in res.records}
    assert (recs["a"].first_start, recs["a"].finish_time, recs["a"].waited_s) == (0, 110, 0)
    assert (recs["b"].first_start, recs["b"].finish_time, recs["b"].waited_s) == (110, 170, 105)
    rep = res.report
    assert rep.jct_mean == pytest.approx((110 + 165) / 2)
    assert rep.wait_mean == pytest.approx(105 / 2)
    assert rep.makespan == 170
    assert rep.util_allocated == pytest.approx(1.0)      # one whole GPU held throughout
    assert rep.util_effective == pytest.approx(150 / 170)  # start-ups do no useful work


def test_sampling_phase_counts_its_steps_and_predicts(toy):
    pol = Script(sample_then_run)
    res = simulate(load_cluster("1x1"), [job("a", 0, 100)], toy, pol,
                   SimConfig(step_noise=0.0, memory_noise=0.0, check=True, sample_share=0.05))
    sampled = [v["a"] for _, v in pol.seen if v["a"].state is JobState.SAMPLED][0]
    # 5 % of 100 steps are sampled after the 10 s start-up, then a checkpoint is saved
    assert sampled.steps_done == 5
    assert sampled.sample.step_time_s == pytest.approx(1.0)
    assert sampled.sample.peak_memory_mb == pytest.approx(1000)
    # 95 steps at the measured 1 s, and one more start at its measured 10 s start-up
    assert sampled.predicted_remaining_s == pytest.approx(95 + 10)
    assert sampled.last_wait_start == pytest.approx(15 + SAVE)
    rec = res.records[0]
    # restart: 10 s start-up + checkpoint restore, then the remaining 95 steps
    assert rec.finish_time == pytest.approx(15 + SAVE + 10 + SAVE + 95)
    # predicted once the sampling run has exited (as the live coordinator predicts):
    # 95 steps at the measured 1 s, and one more start at its measured 10 s start-up
    assert rec.predicted_total_s == pytest.approx(95 + 10)
    # the run time from then: the restart (start-up and restore) and the 95 steps
    assert rec.actual_total_s == pytest.approx(10 + SAVE + 95)


@pytest.mark.parametrize("steps, sampled", [(2, 2), (5, 2), (25, 2), (45, 4), (100, 10),
                                             (1000, 25)])
def test_the_sampling_phase_is_as_long_as_the_live_runners(toy, steps, sampled):
    # the runner's rule (tfgshare.sampling.plan_sampling, default 5 warm-up + 20 sampled
    # steps within 10 % of the job, at least 1 + 1): a 2-step job is sampled whole and
    # finishes in its sampling run; a 25-step job samples 2 steps, not ceil(2.5)
    pol = Script(sample_then_run)
    res = simulate(load_cluster("1x1"), [job("a", 0, steps)], toy, pol,
                   SimConfig(step_noise=0.0, memory_noise=0.0, check=True))
    after = [v["a"] for _, v in pol.seen if "a" in v and v["a"].state is JobState.SAMPLED]
    if sampled == steps:
        assert after == [] and res.records[0].finish_time == pytest.approx(10 + steps)
    else:
        assert after[0].steps_done == sampled


def test_suspend_keeps_steps_and_charges_save_and_restore(toy):
    def fn(now, jobs):
        a, b = jobs.get("a"), jobs.get("b")
        if a and a.state is JobState.QUEUED:
            return [Start("a", whole())]
        if b and b.state is JobState.QUEUED:          # b arrives at 50 and takes a's GPU
            return [Suspend("a"), Start("b", whole())]
        if a and a.state is JobState.SUSPENDED:
            return [Start("a", whole("n0:1"))]
        return []
    pol = Script(fn)
    res = simulate(load_cluster("1x2"), [job("a", 0, 100), job("b", 50, 1)], toy, pol,
                   SimConfig(check=True))
    steps = [v["a"].steps_done for _, v in pol.seen if "a" in v]
    assert steps == sorted(steps), "a suspend lost steps"
    suspended = [v["a"] for _, v in pol.seen if v["a"].state is JobState.SUSPENDED][0]
    assert suspended.steps_done == 40           # 10 s start-up, then 40 steps by t=50
    rec = {r.id: r for r in res.records}
    # b waits for a's checkpoint save to leave the GPU, starts up, runs its one step
    b_end = 50 + SAVE + 10 + 1
    assert rec["b"].finish_time == pytest.approx(b_end)
    # a resumes when b ends: start-up + restore, then its 60 remaining steps
    assert rec["a"].finish_time == pytest.approx(b_end + 10 + SAVE + 60)
    assert (rec["a"].suspends, rec["a"].resumes, rec["a"].migrations) == (1, 1, 0)
    assert rec["a"].waited_s == pytest.approx(b_end - 50)
    assert rec["a"].move_cost_s == pytest.approx(SAVE + 10 + SAVE)


def test_colocated_jobs_slow_each_other(toy):
    frag = (Fragment("n0:0", 0.45),)

    def fn(now, jobs):
        return [Start(j.id, frag) for j in jobs.values() if j.state is JobState.QUEUED]
    colo = Colocation(overhead=0.08, exponent=1.0)
    res = simulate(load_cluster("1x1"), [job("a", 0, 100, batch=2), job("b", 0, 100, batch=2)],
                   toy, Script(fn), SimConfig(check=True, colocation=colo))
    slow = (1 + 0.08) * 1.2                         # two tenants, utilisations sum to 1.2
    for rec in res.records:
        assert rec.finish_time == pytest.approx(10 + 100 * slow)
    busy = 100 * slow
    assert res.report.util_effective == pytest.approx(min(1, 1.2 / slow) * busy / (10 + busy))


def test_a_startup_on_a_virtual_gpu_is_slowed_by_its_co_tenant(toy):
    # one core, two tenants: each runs at half speed (slowdown 2), start-ups included
    # when they compute on the device (startup_on_device, virtual GPUs); b starts at 30
    # beside a, which trains from 10: b's 10 s start-up takes 20 s, a's steps meanwhile 2 s
    frag = (Fragment("n0:0", 0.45),)

    def fn(now, jobs):
        return [Start(j.id, frag) for j in jobs.values() if j.state is JobState.QUEUED]
    colo = Colocation(overhead=1.0, exponent=0.0)
    jobs = [job("a", 0, 100), job("b", 30, 10)]
    on_device = simulate(load_cluster("1x1"), jobs, toy, Script(fn),
                         SimConfig(check=True, colocation=colo, startup_on_device=True))
    rec = {r.id: r for r in on_device.records}
    # b trains from 50 at 2 s a step: 10 steps by 70; a did 20 alone, 20 beside b, 60 alone
    assert rec["b"].finish_time == pytest.approx(50 + 10 * 2)
    assert rec["a"].finish_time == pytest.approx(70 + 60)
    host = simulate(load_cluster("1x1"), jobs, toy, Script(fn),
                    SimConfig(check=True, colocation=colo))
    rec = {r.id: r for r in host.records}
    assert rec["b"].finish_time == pytest.approx(40 + 10 * 2)     # its start-up unslowed
    assert rec["a"].finish_time == pytest.approx(60 + 65)      # 20 + 15 + 65 steps


def test_migration_costs_from_its_request_until_it_trains_again(toy):
    def fn(now, jobs):
        a, b = jobs.get("a"), jobs.get("b")
        if a and a.state is JobState.QUEUED:
            return [Start("a", whole())]
        if b and b.state is JobState.QUEUED:        # b arrives at 30: a moves to n0:1
            return [Migrate("a", whole("n0:1")), Start("b", whole())]
        return []
    res = simulate(load_cluster("1x2"), [job("a", 0, 100), job("b", 30, 1)], toy, Script(fn),
                   SimConfig(check=True))
    rec = {r.id: r for r in res.records}
    # a saves (SAVE), starts up (10) and restores (SAVE) on n0:1, counted once
    assert (rec["a"].migrations, rec["a"].suspends, rec["a"].resumes) == (1, 0, 0)
    assert rec["a"].move_cost_s == pytest.approx(SAVE + 10 + SAVE)
    assert rec["a"].waited_s == 0.0
    assert rec["a"].finish_time == pytest.approx(30 + SAVE + 10 + SAVE + 80)
    assert rec["b"].finish_time == pytest.approx(30 + SAVE + 10 + 1)  # after a's save


def test_undersized_fragment_fails_start_and_the_job_learns_the_peak_it_reached(toy):
    seen = []

    def fn(now, jobs):
        a = jobs["a"]
        if a.state is not JobState.QUEUED:
            return []
        seen.append(a.min_memory_mb)
        # 245 MB first (the job needs 1000 MB), then twice the peak it ran out at
        return [Start("a", (Fragment("n0:0", max(0.01, 2 * a.min_memory_mb / 24576)),))]
    res = simulate(load_cluster("1x1"), [job("a", 0, 10)], toy, Script(fn),
                   SimConfig(check=True, tick_s=30))
    # it learns only what it reached (its fragment, measured a little past it), never
    # its true 1000 MB: 245.76 MB, then about 2 x 250.7 = 501.4 MB, then it fits
    assert res.oom_starts == 2
    assert seen[:3] == [0.0, pytest.approx(245.76 * 1.02), pytest.approx(2 * 245.76 * 1.02 ** 2)]
    assert res.records[0].finish_time == pytest.approx(60 + 10 + 10)


def test_policy_that_never_starts_a_job_is_reported(toy):
    with pytest.raises(SimulationError, match="cannot finish"):
        simulate(load_cluster("1x1"), [job("a", 0, 10)], toy, Script(lambda now, jobs: []))


def test_a_policy_that_writes_only_decide_gets_the_defaults(toy):
    class OnlyDecide(Policy):
        name = "only-decide"

        def decide(self, now, cluster, jobs):
            return []

    pol = OnlyDecide()
    assert pol.new_memo() is None and pol.wake_at(0.0, None) is None
    assert pol.tick_s is Tick.CALLER and pol.acts_when_idle is False
    sim = Simulator(load_cluster("1x1"), [], toy, pol, SimConfig(tick_s=7.0))
    assert sim.tick_s == 7.0   # the caller's tick


def test_bad_actions_and_jobs_are_named(toy):
    with pytest.raises(SimulationError, match="unknown or finished job 'zz'"):
        simulate(load_cluster("1x1"), [job("a", 0, 10)], toy,
                 Script(lambda now, jobs: [Start("zz", whole())]))
    with pytest.raises(SimulationError, match="overcommitted|n0:0"):
        simulate(load_cluster("1x1"), [job("a", 0, 10), job("b", 0, 10)], toy,
                 Script(lambda now, jobs: [Start(j, whole()) for j in jobs]),
                 SimConfig(check=True))
    with pytest.raises(ValueError, match="no profile for model 'nope'"):
        simulate(load_cluster("1x1"), [TraceJob("x", 0, 1, 5, model="nope", batch_size=1,
                                                total_steps=5)], toy, get_policy("fifo"))
    with pytest.raises(ValueError, match="needs 4 GPUs but cluster 1x2 has 2"):
        simulate(load_cluster("1x2"), [job("x", 0, 5, gpus=4)], toy, get_policy("fifo"))
    with pytest.raises(ValueError, match="needs 1000 MB, more than any GPU"):
        simulate(load_cluster("1x1:1200"), [job("x", 0, 5)], toy, get_policy("fifo"))
    with pytest.raises(ValueError, match="appears twice"):
        simulate(load_cluster("1x1"), [job("x", 0, 5), job("x", 1, 5)], toy,
                 get_policy("fifo"))


def test_same_seed_same_report(toy):
    jobs = [job(f"j{i}", 7.0 * i, 20 + 13 * i, gpus=1 + i % 2, batch=1 + i % 2)
            for i in range(12)]
    for name in ("sjf", "fgs"):
        runs = [simulate(load_cluster("2x2"), jobs, toy, get_policy(name), SimConfig(seed=s))
                for s in (3, 3)]
        assert runs[0].report.as_dict() == runs[1].report.as_dict()
        assert runs[0].records == runs[1].records


def test_a_policy_that_reads_no_progress_sees_a_running_job_as_it_started(toy):
    def run_a(now, jobs):   # "a" runs 1,000 s on the one GPU while "b" waits behind it
        a = jobs.get("a")
        if a and a.state is JobState.QUEUED:
            return [Start("a", whole())]
        b = jobs.get("b")
        return [Start("b", whole())] if b and b.state is JobState.QUEUED and not a else []

    seen = {}
    for reads in (True, False):
        pol = Script(run_a)
        pol.reads_progress = reads
        simulate(load_cluster("1x1"), [job("a", 0, 1000), job("b", 1, 10)], toy, pol,
                 SimConfig(tick_s=60.0))
        seen[reads] = {views["a"].steps_done for _, views in pol.seen if "a" in views}
    assert len(seen[True]) >= 3          # its progress, every 300 s at least
    assert seen[False] == {0}            # its view as it started


@pytest.mark.parametrize("name, spacing, steps", [("fifo", 50.0, 700), ("tiresias", 400.0, 1700)])
def test_a_policy_that_reads_no_progress_decides_as_if_it_did(toy, name, spacing, steps):
    policy = get_policy(name)
    assert policy.reads_progress is False

    class Reading(type(policy)):
        reads_progress = True

    jobs = [job(f"j{i}", spacing * i, 900 + steps * (i % 5), gpus=1 + i % 2, batch=1 + i % 2)
            for i in range(16)]
    quiet, reading = (simulate(load_cluster("2x2"), jobs, toy, pol, SimConfig(seed=1))
                      for pol in (policy, Reading()))
    assert max(r.waited_s for r in quiet.records) > 0   # jobs queued: it had choices
    if name == "fifo":
        assert quiet.records == reading.records
    else:   # its views' steps are settled at other moments: finish times to rounding
        assert sum(r.suspends for r in quiet.records) > 0   # it demoted and preempted
        for a, b in zip(quiet.records, reading.records, strict=True):
            assert (a.id, a.suspends, a.first_start) == (b.id, b.suspends, b.first_start)
            assert a.finish_time == pytest.approx(b.finish_time, abs=1e-6)
