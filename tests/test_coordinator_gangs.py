"""A job across nodes with fake agents: its members start, stop and are lost as one gang."""

from __future__ import annotations

import time

import pytest

from coordinator_fakes import CoordinatorThread
from tfgshare import schema as s
from tfgshare.client.api import Client, Refused
from tfgshare.policies.base import Fragment, Migrate, Policy, Start
from tfgshare.policies.registry import get_policy
from test_coordinator import agents, make, spec  # noqa: F401 (fixtures)


def start_gang(ct, client, agents):
    a = agents(ct.address, "a")
    b = agents(ct.address, "b")
    a.register()
    b.register()
    (jid,) = client.submit([spec("lenet", num_gpus=2, memory_fraction=0.5,
                                 max_number_of_steps=50)])
    starts = {x.node: x.wait_command(s.StartJob, jid) for x in (a, b)}
    return jid, a, b, starts


def test_a_job_too_big_for_one_node_starts_one_worker_per_node(make, agents):
    ct, client = make()
    jid, a, b, starts = start_gang(ct, client, agents)
    chief, other = (a, b) if starts["a"].gang.task == 0 else (b, a)
    first, second = starts[chief.node].gang, starts[other.node].gang
    assert (first.task, second.task) == (0, 1)
    assert first.ps_hosts == second.ps_hosts and first.worker_hosts == second.worker_hosts
    hosts = first.ps_hosts + first.worker_hosts
    assert len(set(hosts)) == 3 and all(h.startswith("127.0.0.1:47") for h in hosts)
    assert starts["a"].attempt == starts["b"].attempt
    assert client.job(jid)["node"] == chief.node
    # the chief's events are the job's; a suspend goes to both, the chief's exit ends it
    chief.event(jid, "progress", step=10, loss=1.0, step_time_s=0.1, images_per_sec=1.0,
                predicted_remaining_s=4.0)
    client.suspend(jid)
    chief.wait_command(s.SuspendJob, jid)
    other.wait_command(s.SuspendJob, jid)
    other.exit(jid, 75)
    assert client.job(jid)["state"] == "suspending"
    chief.exit(jid, 75)
    info = client.job(jid)
    assert info["state"].startswith("suspended") and info["steps_done"] == 10
    other.wait_command(s.KillJob, jid)             # whatever is left of the gang goes
    assert ct.coord.gangs == {} and not any(ct.coord.gang_ports.used.values())


def test_a_lost_member_stops_the_gang_and_requeues_it(make, agents):
    ct, client = make()
    jid, a, b, starts = start_gang(ct, client, agents)
    chief, other = (a, b) if starts["a"].gang.task == 0 else (b, a)
    other.exit(jid, 137, "killed by SIGKILL")
    chief.wait_command(s.KillJob, jid)              # the chief is stopped too
    restart = {x.node: x.wait_command(s.StartJob, jid) for x in (a, b)}
    assert {m.attempt for m in restart.values()} == {starts["a"].attempt + 1}
    log = "\n".join(client.logs(jid))
    assert "gang member on" in log and "restarts from its last checkpoint" in log
    # new ports for the new attempt: the old ones may still be closing
    old = set(starts["a"].gang.worker_hosts + starts["a"].gang.ps_hosts)
    new = set(restart["a"].gang.worker_hosts + restart["a"].gang.ps_hosts)
    assert not old & new


def test_a_node_without_gang_ports_takes_no_part_in_a_gang(make, agents):
    ct, client = make()
    a = agents(ct.address, "a")
    b = agents(ct.address, "b")
    a.register()
    b.request(s.Register(node="b", gpus=b.gpus))      # an agent run with --gang-ports none
    (jid,) = client.submit([spec("lenet", num_gpus=2, memory_fraction=0.5)])
    time.sleep(0.5)
    a.pump(0.1)
    assert not [c for c in a.commands if isinstance(c, s.StartJob)]
    assert client.job(jid)["state"] == "queued"
    # the policy sees which nodes take gang members: it plans nothing the coordinator refuses
    assert client.metrics()["refused"].get("spans_nodes", 0) == 0
    c = agents(ct.address, "c")
    c.register()                                       # a second node that does
    starts = {x.node: x.wait_command(s.StartJob, jid) for x in (a, c)}
    assert {m.gang.task for m in starts.values()} == {0, 1}
    b.pump(0.1)
    assert not [m for m in b.commands if isinstance(m, s.StartJob)]
    assert client.metrics()["refused"] == {}


def restarted(tmp_path, **config):
    """A coordinator on the state database of the one before it (fifo, as ``make``)."""
    ct = CoordinatorThread(tmp_path / "state.db", policy=get_policy("fifo"), **config)
    return ct, Client(ct.address, timeout_s=5.0)


def gang_before_restart(tmp_path, agents):
    """A 2-node gang started, then its coordinator stopped (its agents and runners stay)."""
    ct, client = restarted(tmp_path)
    try:
        jid, a, b, starts = start_gang(ct, client, agents)
        ports = set(ct.coord.gang_ports.used["127.0.0.1"])
    finally:
        client.close()
        ct.close()
    chief = "a" if starts["a"].gang.task == 0 else "b"
    return jid, chief, "b" if chief == "a" else "a", starts["a"].attempt, ports


def test_a_restarted_coordinator_readopts_a_running_gang(tmp_path, agents):
    jid, chief, other, attempt, ports = gang_before_restart(tmp_path, agents)
    ct, client = restarted(tmp_path)
    try:
        assert set(ct.coord.gang_ports.used["127.0.0.1"]) == ports   # still held
        new = {n: agents(ct.address, n) for n in (chief, other)}
        for n in (other, chief):             # the member's agent may come back first
            new[n].register(jobs=[s.RunningJob(jid, pid=100, step=5, attempt=attempt)])
            assert new[n].wait_command(s.AdoptJob, jid).attempt == attempt
        info = client.job(jid)
        assert info["state"] == "running" and info["attempt"] == attempt
        assert ct.coord.gangs[jid].awaited == set()
        log = "\n".join(client.logs(jid))
        assert f"gang member re-adopted on {other}" in log
        assert not [c for x in new.values() for c in x.commands if isinstance(c, s.KillJob)]
        new[chief].exit(jid, 0)              # the gang trains to its end as one
        assert client.job(jid)["state"] == "finished"
        new[other].wait_command(s.KillJob, jid)
        assert ct.coord.gangs == {} and not ct.coord.gang_ports.used["127.0.0.1"]
        assert ct.coord.store.load_gangs() == {}
    finally:
        client.close()
        ct.close()


def test_a_gang_member_not_back_after_a_restart_brings_the_gang_to_its_checkpoint(
        tmp_path, agents):
    jid, chief, other, attempt, _ = gang_before_restart(tmp_path, agents)
    ct, client = restarted(tmp_path, node_timeout=0.5)
    try:
        a = agents(ct.address, chief)
        a.register(jobs=[s.RunningJob(jid, pid=100, step=5, attempt=attempt)])
        a.wait_command(s.AdoptJob, jid)
        # the member's node never comes back: past the node timeout the gang is stopped
        # (the chief's node heartbeats meanwhile: it stays up, only the member is missing)
        deadline = time.monotonic() + 5
        while not any(isinstance(c, s.KillJob) for c in a.commands):
            assert time.monotonic() < deadline, "the chief was not stopped"
            a.heartbeat()
            time.sleep(0.05)
        a.wait_command(s.KillJob, jid)
        log = "\n".join(client.logs(jid))
        assert f"gang member on {other} not reported within 0.5s of the restart" in log
        assert client.job(jid)["state"] != "running" and ct.coord.gangs == {}
    finally:
        client.close()
        ct.close()


def held_gang(ct, client, agents, gpus=((0, 16384), (1, 16384))):
    """A 2-GPU job held before any node is up, then two nodes of two GPUs each."""
    (jid,) = client.submit([spec("lenet", num_gpus=2, memory_fraction=0.5,
                                 max_number_of_steps=50)])
    client.suspend(jid)
    a, b = agents(ct.address, "a", gpus), agents(ct.address, "b", gpus)
    a.register()
    b.register()
    return jid, a, b


def test_a_gang_migrated_by_its_user_moves_as_one_and_continues_from_its_checkpoint(
        make, agents):
    ct, client = make()
    jid, a, b = held_gang(ct, client, agents)
    with pytest.raises(Refused, match="uses 2 GPUs: name as many"):
        client.migrate(jid, "a:0")
    client.migrate(jid, ["a:0", "b:0"])                # placed across the nodes by hand
    first = {x.node: x.wait_command(s.StartJob, jid) for x in (a, b)}
    assert (first["a"].gang.task, first["b"].gang.task) == (0, 1)
    a.event(jid, "started", global_step=0, restored=False)
    a.event(jid, "progress", step=10, loss=1.0, step_time_s=0.1, images_per_sec=1.0,
            predicted_remaining_s=4.0)
    with pytest.raises(Refused, match="already holds"):
        client.migrate(jid, "a:1,b:0")                 # a gang moves as a whole
    client.migrate(jid, "b:1,a:1")                     # the chief moves to b
    for x in (a, b):
        x.wait_command(s.SuspendJob, jid)
    assert client.job(jid)["state"] == "migrating"
    # the target is held while the gang stops: a job needing most of a GPU waits
    (big,) = client.submit([spec("lenet", memory_fraction=0.9)])
    b.event(jid, "suspended", step=10)                 # the member stops after its step
    b.exit(jid, 75)
    assert client.job(jid)["state"] == "migrating"
    a.event(jid, "checkpoint", step=11, path="model.ckpt-11", seconds=0.2, size_mb=1.0)
    a.event(jid, "suspended", step=11)                 # the chief saves the one checkpoint
    a.exit(jid, 75)
    moved = {x.node: x.wait_command(s.StartJob, jid) for x in (a, b)}
    assert {m.attempt for m in moved.values()} == {first["a"].attempt + 1}
    assert (moved["b"].gang.task, moved["a"].gang.task) == (0, 1)
    assert [f.gpu_index for m in moved.values() for f in m.fragments] == [1, 1]
    assert moved["b"].gang.worker_hosts == moved["a"].gang.worker_hosts
    info = client.job(jid)
    assert info["state"] == "running" and info["node"] == "b" and info["migrations"] == 1
    assert [f[0] for f in info["fragments"]] == ["b:1", "a:1"]
    assert info["steps_done"] == 11
    # the newcomer takes the room the gang left, not its new GPUs
    deadline = time.monotonic() + 5
    while client.job(big)["state"] != "running":
        assert time.monotonic() < deadline, "the waiting job did not start"
        time.sleep(0.05)
    assert client.job(big)["fragments"][0][0] in ("a:0", "b:0")
    b.event(jid, "started", global_step=11, restored=True)
    assert client.job(jid)["steps_done"] == 11
    b.exit(jid, 0)
    assert client.job(jid)["state"] == "finished"
    assert client.metrics()["refused"] == {}


def test_a_late_exit_of_the_old_gang_does_not_touch_the_migrated_one(make, agents):
    ct, client = make()
    jid, a, b = held_gang(ct, client, agents)
    client.migrate(jid, "a:0,b:0")
    old = {x.node: x.wait_command(s.StartJob, jid) for x in (a, b)}
    client.migrate(jid, "a:1,b:1")
    for x in (a, b):
        x.wait_command(s.SuspendJob, jid)
    a.event(jid, "suspended", step=7)
    a.exit(jid, 75)                                    # the chief's exit comes first
    new = {x.node: x.wait_command(s.StartJob, jid) for x in (a, b)}
    assert new["a"].gang.task == 0
    for x in (a, b):
        x.wait_command(s.KillJob, jid)                 # the old gang's, sent before the starts
    # the old member's exit was on its way: it is stale
    reply = b.request(s.JobExit(node="b", job=jid, attempt=old["b"].attempt, exit_code=75))
    assert reply.fields.get("stale") is True
    b.pump(0.2)
    assert not [c for c in a.commands + b.commands if isinstance(c, s.KillJob)]
    info = client.job(jid)
    assert info["state"] == "running" and info["attempt"] == new["a"].attempt
    assert ct.coord.gangs[jid].attempt == new["a"].attempt


class Scripted(Policy):
    """A policy that plans what the test gives it, once each."""

    name = "scripted"

    def __init__(self) -> None:
        self.plans: list[list] = []

    def decide(self, now, cluster, jobs):
        return self.plans.pop(0) if self.plans else []


def test_a_gang_migrated_by_the_policy_is_checked_and_moved_as_one(tmp_path, agents):
    policy = Scripted()
    ct = CoordinatorThread(tmp_path / "state.db", policy=policy)
    try:
        two = ((0, 16384), (1, 16384))
        a, b = agents(ct.address, "a", two), agents(ct.address, "b", two)
        a.register()
        b.register()
        with Client(ct.address, timeout_s=5.0) as client:
            (jid,) = client.submit([spec("lenet", num_gpus=2, memory_fraction=0.5)])
            policy.plans.append([Start(jid, (Fragment("a:0", 0.5), Fragment("b:0", 0.5)))])
            first = {x.node: x.wait_command(s.StartJob, jid) for x in (a, b)}
            a.event(jid, "progress", step=10, loss=1.0, step_time_s=0.1,
                    images_per_sec=1.0, predicted_remaining_s=4.0)
            policy.plans.append([Migrate(jid, (Fragment("b:1", 0.5), Fragment("a:1", 0.5)))])
            for x in (a, b):
                x.wait_command(s.SuspendJob, jid)
            view = ct.coord.cluster.active[jid].view()   # what the policy sees meanwhile
            assert view.state.value == "suspending"
            assert {f.gpu for f in view.fragments} == {"a:0", "b:0", "a:1", "b:1"}
            b.exit(jid, 75)
            a.event(jid, "suspended", step=10)
            a.exit(jid, 75)
            moved = {x.node: x.wait_command(s.StartJob, jid) for x in (a, b)}
            assert (moved["b"].gang.task, moved["a"].gang.task) == (0, 1)
            assert {m.attempt for m in moved.values()} == {first["a"].attempt + 1}
            info = client.job(jid)
            assert info["node"] == "b" and info["migrations"] == 1
            assert client.metrics()["refused"] == {}
    finally:
        ct.close()


def test_a_gang_migrated_onto_one_node_runs_as_one_runner_there(make, agents):
    ct, client = make()
    jid, a, b = held_gang(ct, client, agents, gpus=((0, 16384), (1, 16384), (2, 16384)))
    client.migrate(jid, "a:0,b:0")
    for x in (a, b):
        x.wait_command(s.StartJob, jid)
    client.migrate(jid, "a:1,a:2")
    for x in (a, b):
        x.wait_command(s.SuspendJob, jid)
    b.exit(jid, 75)
    a.event(jid, "suspended", step=9)
    a.exit(jid, 75)
    b.wait_command(s.KillJob, jid)
    start = a.wait_command(s.StartJob, jid)
    assert start.gang is None and [f.gpu_index for f in start.fragments] == [1, 2]
    b.pump(0.2)
    assert not [c for c in b.commands if isinstance(c, s.StartJob)]
    assert ct.coord.gangs == {} and not any(ct.coord.gang_ports.used.values())
    info = client.job(jid)
    assert info["state"] == "running" and info["migrations"] == 1 and info["node"] == "a"
