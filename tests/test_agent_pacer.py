"""A job's progress reports paced by its agent (tfgshare.agent.pacer), as the
coordinator receives them."""

from __future__ import annotations

import pytest

from test_agent import FakeCoordinator, pump, start_msg  # noqa: F401  (fixtures below)
from agent_fakes import write_fake_runner
from tfgshare.agent.gpus import VirtualGpus, parse_virtual_gpus
from tfgshare.agent.node import Agent, AgentConfig
from tfgshare.agent.pacer import PROGRESS_EVERY_S, ProgressPacer
from tfgshare.agent.supervisor import Supervisor
from test_agent import ctx  # noqa: F401  (the fixture)


def test_the_first_report_goes_at_once_then_the_newest_every_period():
    pacer = ProgressPacer(10.0)
    assert pacer.offer("j", "step 10", now=0.0)            # it trains: at once
    assert not pacer.offer("j", "step 20", now=2.0)        # held ...
    assert not pacer.offer("j", "step 30", now=4.0)        # ... replaced by the newest
    assert pacer.due(9.9) == []
    assert pacer.due(10.0) == [("step 30", 6.0)]           # held 6 s
    assert not pacer.offer("j", "step 40", now=12.0)
    assert pacer.flush("j", now=13.0) == ("step 40", 1.0)  # before the job's next event
    assert pacer.flush("j", now=13.0) is None
    assert pacer.offer("j", "step 50", now=13.5, beside_sampling=True)
    pacer.forget("j")
    assert pacer.offer("j", "step 0", now=14.0)            # a new runner: at once
    # off by default: every report goes
    default = ProgressPacer()
    assert PROGRESS_EVERY_S == 0.0 and all(default.offer("j", n, now=0.0) for n in range(3))


@pytest.fixture
def paced(ctx, tmp_path):  # noqa: F811
    """An agent (two virtual GPUs, runners of 0.05 s steps) with a 0.5 s progress period."""
    coord = FakeCoordinator(ctx)
    sup = Supervisor(tmp_path / "work", suspend_timeout_s=5.0,
                     runner_cmd=write_fake_runner(tmp_path) + ["--step_time", "0.05"])
    cfg = AgentConfig(coordinator=coord.address, node="n1", work_dir=tmp_path / "work",
                      register_retry_s=0.2, progress_every_s=0.5)
    agent = Agent(cfg, VirtualGpus(parse_virtual_gpus("2x16GiB")), sup, ctx)
    yield agent, coord
    agent.shutdown(timeout_s=2)


def events(coord, job, name):
    return [m for m in coord.of_type("job_event") if m.job == job and m.event["event"] == name]


def test_a_job_reports_once_a_period_alone_and_every_step_while_a_job_samples_beside_it(
        paced, tmp_path):
    agent, coord = paced
    pump(agent, coord, lambda: agent.registered)
    coord.send(start_msg(tmp_path, job="long", steps=400, gpu=1))
    pump(agent, coord, lambda: len(events(coord, "long", "progress")) >= 3)
    alone = events(coord, "long", "progress")
    assert alone[0].event["step"] == 1 and alone[0].held_s == 0
    # one report a period (0.5 s), the newest written within a step or so of its send
    assert all(b.event["time"] - a.event["time"] >= 0.35 for a, b in zip(alone, alone[1:]))
    assert all(0 <= m.held_s <= 0.5 for m in alone[1:])   # held since it was read
    coord.send(start_msg(tmp_path, job="sampler", steps=50, gpu=1, sample_only=True))
    pump(agent, coord, lambda: any(m.job == "sampler" for m in coord.of_type("job_exit")))
    (started,) = events(coord, "sampler", "started")
    (sample,) = events(coord, "sampler", "sample")
    beside = [m.event["step"] for m in events(coord, "long", "progress")
              if started.event["time"] < m.event["time"] < sample.event["time"]]
    # while it sampled (3 steps of 0.05 s), every report of the long job went
    assert len(beside) >= 2 and beside == list(range(beside[0], beside[0] + len(beside)))
