"""A job across nodes with fake agents: its members start, stop and are lost as one gang."""

from __future__ import annotations

import time

from coordinator_fakes import CoordinatorThread
from tfgshare import schema as s
from tfgshare.client.api import Client
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
