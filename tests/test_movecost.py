"""A job's minimum run between moves, from its measured move cost: one rule for both sides.

The coordinator and the simulator fill ``JobView.move_cost_s`` with
``policies.movecost.move_cost_s`` from what they measured; fgs derives each
job's minimum run and promotion floor from it (``policies.movecost``).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from coordinator_fakes import Clock, CoordinatorThread, FakeAgent
from philly.jobs import TraceJob
from tfgshare import schema as s
from tfgshare.client.api import Client
from tfgshare.coordinator.cluster import LiveJob
from tfgshare.policies import movecost
from tfgshare.policies.base import Fragment, JobState, Policy, Start, Suspend
from tfgshare.policies.builders import make_cluster, make_job
from tfgshare.policies.registry import get_policy
from tfgshare.schema import JobSpec
from tfgshare.sim.cluster import load_cluster
from tfgshare.sim.config import SimConfig
from tfgshare.sim.engine import simulate
from tfgshare.sim.profiles import load_profiles


def test_move_cost_is_save_plus_restart_and_unknown_until_the_restart_is_measured():
    assert movecost.move_cost_s(None, 2.0) is None
    assert movecost.move_cost_s(5.0, None) == 5.0
    assert movecost.move_cost_s(5.0, 2.0) == 7.0


def test_min_run_is_move_cost_over_the_share_with_the_fixed_value_before_a_measurement():
    assert movecost.min_run_s(None, 300.0) == 300.0
    assert movecost.min_run_s(4.0, 300.0) == pytest.approx(40.0)        # 4 s is 10 % of 40 s
    assert movecost.min_run_s(60.0, 300.0) == pytest.approx(600.0)      # not capped: 10 % holds
    assert movecost.promote_floor_s(None, 600.0) == 600.0
    assert movecost.promote_floor_s(4.0, 600.0) == pytest.approx(40.0)   # its minimum run


def test_fgs_reads_each_jobs_move_cost():
    pol = get_policy("fgs")
    measured = make_job("m", move_cost_s=5.0)
    assert pol.min_run(measured) == pytest.approx(50.0)
    assert pol.promote_floor(measured) == pytest.approx(50.0)
    unmeasured = make_job("u")
    assert pol.min_run(unmeasured) == pol.min_run_s == 300.0
    assert pol.promote_floor(unmeasured) == pol.promote_floor_s == 600.0
    fixed = get_policy("fgs", move_share=None)
    assert fixed.min_run(measured) == 300.0 and fixed.promote_floor(measured) == 600.0
    with pytest.raises(ValueError, match="move_share"):
        get_policy("fgs", move_share=0)


def test_fgs_promotes_a_waiting_job_and_suspends_a_cheap_to_move_job_after_its_minimum_run():
    """Both GPUs busy with jobs that keep them busy; a short job waits past its bound.

    With measured 5 s moves, the running jobs may move after 50 s and the short
    job is promoted after 50 s of waiting (the fixed 300 s / 600 s before).
    """
    c = make_cluster(1, 2)
    now = 1000.0

    def jobs(cost):
        return [make_job("a", submit=0, on={"n0:0": 0.1}, memory_mb=1000, gpu_util=0.95,
                         total_steps=10 ** 4, last_start=now - 120, move_cost_s=cost),
                make_job("b", submit=1, on={"n0:1": 0.1}, memory_mb=1000, gpu_util=0.95,
                         total_steps=10 ** 4, last_start=now - 120, move_cost_s=cost),
                make_job("s", submit=now - 130, state=JobState.SAMPLED, memory_mb=1000,
                         gpu_util=0.95, total_steps=100, move_cost_s=cost,
                         last_wait_start=now - 110, waited_s=20.0, last_start=now - 130)]

    pol = get_policy("fgs")
    acts = pol.decide(now, c, jobs(5.0))
    assert acts[0] == Suspend("a")             # the longest running of the two, then s starts
    assert acts[1] == Start("s", acts[1].fragments) and acts[1].fragments[0].gpu == "n0:0"
    assert pol.decide(now, c, jobs(None)) == []   # unmeasured: 130 s waited < 600 s floor
    assert pol.decide(now, c, jobs(20.0)) == []   # 20 s moves: 200 s floor not reached


def test_live_job_view_carries_the_measured_move_cost():
    job = LiveJob(id="j1", seq=1, spec=JobSpec("lenet", max_number_of_steps=100))
    assert job.view().move_cost_s is None
    job.start_cost_s, job.save_s = 3.0, 0.5
    job.touch()
    assert job.view().move_cost_s == pytest.approx(3.5)


# One model: 1 s per step, 10 s start-up, checkpoint 1e6 * 4 B * 2 = 7.63 MiB at 250 MB/s.
TOY = """
models:
  toy:
    params: 1000000
    startup_s: 10
    batches:
      1: {step_time_s: 1.0, memory_mb: 1000, gpu_util: 1.0}
"""
SAVE = 1e6 * 8 / 2**20 / 250.0


class Script(Policy):
    """A test policy: sample ``a``, run it, suspend it when ``b`` arrives, resume it."""

    name = "script"

    def __init__(self):
        self.seen = []

    def decide(self, now, cluster, jobs):
        by_id = {j.id: j for j in jobs}
        a = by_id.get("a")
        if a is None:
            return []
        self.seen.append(a)
        whole = (Fragment("n0:0", 0.95),)
        acts = []
        b = by_id.get("b")
        if b is not None and b.state is JobState.QUEUED:
            acts.append(Start("b", (Fragment("n0:1", 0.95),)))
        if a.state is JobState.QUEUED:
            return acts + [Start("a", whole, sample_only=True)]
        if a.state in (JobState.SAMPLED, JobState.SUSPENDED):
            return acts + [Start("a", whole)]
        if a.state is JobState.RUNNING and a.suspends == 0 and b is not None:
            return acts + [Suspend("a")]
        return acts


def test_simulator_measures_the_move_cost_from_its_profile(tmp_path):
    path = tmp_path / "toy.yaml"
    path.write_text(TOY)
    pol = Script()
    jobs = [TraceJob("a", 0, 1, 100.0, model="toy", batch_size=1, total_steps=100),
            TraceJob("b", 60, 1, 1.0, model="toy", batch_size=1, total_steps=1)]
    simulate(load_cluster("1x2"), jobs, load_profiles(path), pol,
             SimConfig(step_noise=0.0, memory_noise=0.0, check=True))
    sampled = next(v for v in pol.seen if v.state is JobState.SAMPLED)
    # first start: the 10 s start-up; the sampling run ended with a checkpoint save
    assert sampled.move_cost_s == pytest.approx(10 + SAVE)
    suspended = next(v for v in pol.seen if v.state is JobState.SUSPENDED)
    # its last start was a resume: start-up and restore; then the suspend's save
    assert suspended.move_cost_s == pytest.approx(10 + SAVE + SAVE)
    pol_fgs = get_policy("fgs")
    assert pol_fgs.min_run(suspended) == pytest.approx((10 + 2 * SAVE) / 0.1)
    assert replace(suspended, move_cost_s=None).move_cost_s is None


def test_coordinator_measures_the_move_cost_from_the_runners_phases_and_save(tmp_path):
    ct = CoordinatorThread(tmp_path / "state.db", policy=get_policy("fgs"), clock=Clock(),
                           node_timeout=1e6)
    client = Client(ct.address, timeout_s=5.0)
    agent = FakeAgent(ct.address, "n1", gpus=((0, 32768),))
    try:
        agent.register()
        (jid,) = client.submit([JobSpec("lenet", max_number_of_steps=1000)])
        agent.wait_command(s.StartJob, jid)
        assert client.job(jid)["move_cost_s"] is None
        # what a real runner sends: its start's phases after the first step, then the
        # sampling run's checkpoint (runner protocol EVENTS)
        agent.event(jid, "start_phases", start_s=0.5, graph_s=3.0, graph_source="built",
                    restore_s=0.0, restored_from=None, first_step_s=0.4)
        agent.event(jid, "checkpoint", step=25, path="x/model.ckpt-25", seconds=0.3,
                    size_mb=37.5)
        assert client.job(jid)["move_cost_s"] == pytest.approx(0.5 + 3.0 + 0.4 + 0.3)
        # the latest start counts: a resume with the graph imported costs less
        agent.event(jid, "start_phases", start_s=None, graph_s=0.5, graph_source="imported",
                    restore_s=0.4, restored_from="x/model.ckpt-25", first_step_s=0.4)
        assert client.job(jid)["move_cost_s"] == pytest.approx(0.5 + 0.4 + 0.4 + 0.3)
    finally:
        agent.close()
        client.close()
        ct.close()
