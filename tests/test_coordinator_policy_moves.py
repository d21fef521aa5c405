"""fgs on the live coordinator, with its defaults: the moves it plans are the moves carried out.

Fake agents report what real agents and runners report; a movable clock lets
the tests pass fgs's time bounds (``min_run_s``, promotion) without waiting.
"""

from __future__ import annotations

import time

import pytest

from coordinator_fakes import Clock, CoordinatorThread, FakeAgent
from tfgshare import schema as s
from tfgshare.client.api import Client
from tfgshare.policies.registry import get_policy

GIB32 = 32768


@pytest.fixture
def live(tmp_path):
    """(coordinator thread, client, agent with two 32 GiB GPUs, clock), fgs with its defaults."""
    clock = Clock()
    ct = CoordinatorThread(tmp_path / "state.db", policy=get_policy("fgs"), clock=clock,
                           node_timeout=1e6)
    client = Client(ct.address, timeout_s=5.0)
    agent = FakeAgent(ct.address, "n1", gpus=((0, GIB32), (1, GIB32)))
    agent.register()
    yield ct, client, agent, clock
    agent.close()
    client.close()
    ct.close()


def spec(steps=100_000, **kw) -> s.JobSpec:
    return s.JobSpec("lenet", max_number_of_steps=steps, **kw)


def run_to(agent: FakeAgent, jid: str, peak_mb: float, step_time: float = 0.1,
           cpu_util: float = 0.3) -> s.StartJob:
    """Sample the job as its runner would, then return its full start."""
    first = agent.wait_command(s.StartJob, jid)
    assert first.sample_only
    agent.event(jid, "started", global_step=0, restored=False, device="cpu",
                memory_fraction=first.fragments[0].fraction)
    agent.sample(jid, step_time=step_time, peak_mb=peak_mb, cpu_util=cpu_util)
    start = agent.wait_command(s.StartJob, jid)
    assert not start.sample_only
    return start


def test_policy_consolidates_by_migration_and_the_waiting_job_starts_in_the_cleared_gpu(live):
    ct, client, agent, clock = live
    # x and z share GPU 0, y runs on GPU 1; then z ends: 0.4 free on each GPU
    (x,) = client.submit([spec()])
    assert run_to(agent, x, 11900).fragments[0].gpu_index == 0
    (z,) = client.submit([spec()])
    assert run_to(agent, z, 11900).fragments[0].gpu_index == 0
    (y,) = client.submit([spec()])
    y_start = run_to(agent, y, 11900)
    assert y_start.fragments[0].gpu_index == 1
    # rounds with nothing waiting run now (as they do under load); fgs once lost
    # y's GPU in them and then kept starting w beside y
    time.sleep(0.5)
    agent.exit(z, 0)
    clock.skip(400)      # past min_run_s: x and y may be moved now
    # w needs 0.67 of a GPU: no GPU has it, but the two free halves together do
    (w,) = client.submit([spec()])
    w_sample = agent.wait_command(s.StartJob, w)
    assert w_sample.sample_only
    agent.sample(w, step_time=0.1, peak_mb=20000, cpu_util=0.3)
    migrate = agent.wait_command(s.SuspendJob, timeout_s=10)
    moved = migrate.job
    assert moved in (x, y)
    left = 0 if moved == x else 1
    assert client.job(moved)["state"] == "migrating"
    assert client.job(w)["state"] != "running"      # its GPU is freed only when the runner exits
    agent.exit(moved, 75, "suspended")
    w_start = agent.wait_command(s.StartJob, w)
    assert [f.gpu_index for f in w_start.fragments] == [left]
    resumed = agent.wait_command(s.StartJob, moved)
    assert [f.gpu_index for f in resumed.fragments] == [1 - left]
    info = client.job(moved)
    assert info["migrations"] == 1 and info["state"] == "running"
    assert client.metrics()["refused"] == {}
    assert "policy actions refused: 0" in client.metrics()["report"]


def test_starving_large_job_is_promoted_and_gets_its_reservation(live):
    ct, client, agent, clock = live
    # two busy jobs (each keeps a GPU's compute to itself) hold both GPUs
    (a,) = client.submit([spec()])
    assert run_to(agent, a, 11900, cpu_util=1.0).fragments[0].gpu_index == 0
    (b,) = client.submit([spec()])
    assert run_to(agent, b, 11900, cpu_util=1.0).fragments[0].gpu_index == 1
    # a 2-GPU job samples beside them, then does not fit beside them
    (big,) = client.submit([spec(num_gpus=2, steps=1000)])
    sampling = agent.wait_command(s.StartJob, big)
    assert sampling.sample_only and len(sampling.fragments) == 2
    agent.sample(big, step_time=0.1, peak_mb=20000, cpu_util=1.0)
    time.sleep(0.5)
    assert client.job(big)["state"] == "sampled"
    assert not [c for c in agent.commands if isinstance(c, (s.StartJob, s.SuspendJob))]
    clock.skip(700)   # past its wait bound (600 s); a and b ran past min_run_s
    suspended = {agent.wait_command(s.SuspendJob, timeout_s=10).job for _ in range(2)}
    assert suspended == {a, b}
    assert client.job(big)["state"] == "sampled"   # its GPUs free when a's and b's runners exit
    for j in (a, b):
        agent.exit(j, 75, "suspended")
    start = agent.wait_command(s.StartJob, big)
    assert sorted(f.gpu_index for f in start.fragments) == [0, 1] and not start.sample_only
    assert client.job(big)["state"] == "running"
    assert client.metrics()["refused"] == {}


def measured_moves(agent: FakeAgent, jid: str) -> None:
    """What a real runner reports of a start (after its first step) and of a save."""
    agent.event(jid, "start_phases", start_s=0.3, graph_s=1.5, graph_source="imported",
                restore_s=0.5, restored_from="model.ckpt-25", first_step_s=0.4)
    agent.event(jid, "checkpoint", step=25, path="model.ckpt-25", seconds=0.3, size_mb=37.5)


def test_policy_promotes_a_short_job_once_measured_move_costs_allow_it(live):
    """Both GPUs busy with long jobs; a short job waits. Moves measured at 3 s make the
    long jobs movable after 30 s and the short job promoted after 30 s of waiting,
    where the fixed bounds (300 s, 600 s) would keep it waiting."""
    ct, client, agent, clock = live
    longs = []
    for gpu in (0, 1):
        (j,) = client.submit([spec()])
        assert run_to(agent, j, 2000, cpu_util=1.0).fragments[0].gpu_index == gpu
        measured_moves(agent, j)
        longs.append(j)
    (short,) = client.submit([spec(steps=100)])
    assert agent.wait_command(s.StartJob, short).sample_only
    measured_moves(agent, short)
    agent.sample(short, step_time=0.1, peak_mb=2000, cpu_util=1.0)
    time.sleep(0.5)
    assert client.job(short)["state"] == "sampled"
    assert client.job(short)["move_cost_s"] == pytest.approx(3.0)
    assert not [c for c in agent.commands if isinstance(c, (s.StartJob, s.SuspendJob))]
    clock.skip(45)     # past 10 x the 3 s moves, far short of the fixed 300 s / 600 s
    victim = agent.wait_command(s.SuspendJob, timeout_s=10).job
    assert victim in longs
    assert client.job(victim)["state"] == "suspending"
    agent.exit(victim, 75, "suspended")
    start = agent.wait_command(s.StartJob, short)
    assert not start.sample_only
    assert client.job(short)["state"] == "running"
    assert any("suspend (policy fgs)" in line for line in client.logs(victim))
    assert client.metrics()["refused"] == {}


def test_prediction_adds_the_measured_start_up(live):
    from coordinator_fakes import sample_event
    ct, client, agent, clock = live
    (j,) = client.submit([spec(steps=1000)])
    agent.wait_command(s.StartJob, j)
    started = ct.coord.cluster.jobs[j].last_start
    # the runner began its sampled steps 2 s after the start, 2 warm-up steps of 0.1 s
    # among them: 1.8 s of start-up, which its next start will pay again; the sample
    # was taken at step 7 (2 warm-up and 5 sampled steps)
    ev = sample_event(step_time=0.1, peak_mb=2000)
    ev.update(warmup_steps=2, window_start=started + 2.0)
    agent.event(j, "sample", **ev)
    time.sleep(0.3)
    agent.exit(j, 75, "sampled")
    info = client.job(j)
    assert info["predicted_total_s"] == pytest.approx(993 * 0.1 + 1.8, abs=0.01)


def test_prediction_takes_the_restart_from_the_runners_measured_phases(live):
    from coordinator_fakes import sample_event
    ct, client, agent, clock = live
    (j,) = client.submit([spec(steps=1000)])
    agent.wait_command(s.StartJob, j)
    started = ct.coord.cluster.jobs[j].last_start
    # 20 s from the start to its sampled steps (it waited for a runner process), but
    # the runner's own start took 2.7 s: a resume is predicted at its 0.3 s process start,
    # the graph built in 1.5 s imported in 3 % of that, and 1.8x its 0.9 s first step
    # less the 0.1 s steady step that first step counts as: 1.865 s
    agent.event(j, "start_phases", start_s=0.3, graph_s=1.5, graph_source="built",
                restore_s=0.0, restored_from=None, first_step_s=0.9)
    ev = sample_event(step_time=0.1, peak_mb=2000)
    ev.update(warmup_steps=2, window_start=started + 20.0)
    agent.event(j, "sample", **ev)
    time.sleep(0.3)
    agent.exit(j, 75, "sampled")
    info = client.job(j)
    assert info["restart_s"] == pytest.approx(19.8, abs=0.01)
    assert info["predicted_total_s"] == pytest.approx(993 * 0.1 + 1.865, abs=0.01)


def test_out_of_memory_resizes_the_fragment_from_the_peak_and_requeues(live):
    ct, client, agent, clock = live
    (j,) = client.submit([spec()])
    first = run_to(agent, j, 3000)          # sampled at 3000 MiB: a fragment of 3300
    assert first.fragments[0].fraction * GIB32 == pytest.approx(3300)
    # it grows past its fragment: the agent stops it and reports the peak it reached
    agent.event(j, "out_of_memory", peak_memory_mb=3400.0, limit_mb=3300.0,
                message="out of memory: 3400 MiB resident on GPU 0, its fragment is 3300 MiB")
    agent.exit(j, 4, "out of memory")
    again = agent.wait_command(s.StartJob, j)
    assert again.fragments[0].fraction * GIB32 == pytest.approx(3400 * 1.1)
    info = client.job(j)
    assert info["state"] == "running" and "out of memory" in info["reason"]
    # a job that no GPU could hold fails, with the reason
    agent.event(j, "out_of_memory", peak_memory_mb=40000.0, limit_mb=3740.0, message="oom")
    agent.exit(j, 4, "out of memory")
    time.sleep(0.2)
    info = client.job(j)
    assert info["state"] == "failed" and "no GPU could hold it" in info["reason"]
    assert client.metrics()["refused"] == {}
