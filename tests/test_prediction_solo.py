"""A job sampled beside co-tenants is predicted from its step alone, on both sides."""

from __future__ import annotations

import pytest

from philly.jobs import TraceJob
from tfgshare.policies.base import Fragment, JobState, Start
from tfgshare.policies.prediction import solo_step_s
from tfgshare.sim.cluster import load_cluster
from tfgshare.sim.colocation import Colocation
from tfgshare.sim.config import SimConfig
from tfgshare.sim.engine import simulate
from tfgshare.sim.profiles import load_profiles


def test_solo_step_takes_out_the_interference_models_slowdown():
    assert solo_step_s(0.4, []) == 0.4
    assert solo_step_s(0.4, [0.3]) == 0.4                      # alone, under 1: no slowdown
    # two busy tenants on one GPU: time-sliced, 2 x (1 + 5 % for the extra tenant)
    assert solo_step_s(0.42, [1.0, 1.0]) == pytest.approx(0.2)
    assert solo_step_s(0.42, [0.5, 0.5]) == pytest.approx(0.4)  # room for both: overhead only


TOY = """
models:
  toy:
    params: 1000000
    startup_s: 10
    batches:
      1: {step_time_s: 1.0, memory_mb: 1000, gpu_util: 1.0}
"""


class Script:
    """Run ``a`` on n0:0; sample ``b`` beside it, then run ``b`` alone on n0:1."""

    name = "script"

    def __init__(self):
        self.seen = []

    def decide(self, now, cluster, jobs):
        by_id = {j.id: j for j in jobs}
        acts = []
        a, b = by_id.get("a"), by_id.get("b")
        if a is not None and a.state is JobState.QUEUED:
            acts.append(Start("a", (Fragment("n0:0", 0.4),)))
        if b is not None:
            self.seen.append(b)
            if b.state is JobState.QUEUED:
                acts.append(Start("b", (Fragment("n0:0", 0.4),), sample_only=True))
            elif b.state is JobState.SAMPLED:
                acts.append(Start("b", (Fragment("n0:1", 0.4),)))
        return acts


def test_simulator_predicts_a_job_sampled_beside_a_busy_one_from_its_step_alone(tmp_path):
    path = tmp_path / "toy.yaml"
    path.write_text(TOY)
    pol = Script()
    jobs = [TraceJob("a", 0, 1, 1000.0, model="toy", batch_size=1, total_steps=1000),
            TraceJob("b", 20, 1, 200.0, model="toy", batch_size=1, total_steps=200)]
    res = simulate(load_cluster("1x2"), jobs, load_profiles(path), pol,
                   SimConfig(step_noise=0.0, memory_noise=0.0, check=True,
                             colocation=Colocation(overhead=0.05)))
    sampled = next(v for v in pol.seen if v.state is JobState.SAMPLED)
    assert sampled.sample.step_time_s == pytest.approx(2.1)   # slowed beside a
    b = next(r for r in res.records if r.id == "b")
    # it ran alone at 1 s a step: 180 steps after sampling and one restart (10 s start-up)
    assert b.predicted_total_s == pytest.approx(180 + 10)
    assert abs(b.predicted_total_s - b.actual_total_s) / b.actual_total_s < 0.02
