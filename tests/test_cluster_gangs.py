"""Jobs across nodes, live: a 2-GPU lenet job on two agents (one or two virtual GPUs each).

It trains as TF-Slim trains across machines (between-graph replication with a
parameter server and synchronous replicas, ``tfgshare.runner.replicas``): one
runner per node, the chief on the node of its first GPU owning the checkpoint.
The policy (fgs, defaults) places it; the tests check it runs to its last step
through a suspend and resume, through the loss of one member's runner, and
through a migration of the whole gang to other GPUs (its chief to the other node).
"""

from __future__ import annotations

import os
import re
import signal

import msgspec
import pytest

from test_cluster_e2e import make_cluster  # noqa: F401 (the fixture)
from test_cluster_e2e import attempts, job_in, lenet, no_refusals, wait_until

pytestmark = pytest.mark.timeout(900)   # TensorFlow start-ups on a loaded 2-core machine


def two_nodes(make_cluster):
    cluster = make_cluster()
    cluster.start_coordinator()
    cluster.start_agent("a", "1x16GiB")
    cluster.start_agent("b", "1x16GiB")
    cluster.wait_nodes({"a", "b"})
    return cluster


def gang_job(steps: int, save_every: int = 0):
    return msgspec.structs.replace(lenet(steps, save_every=save_every), num_gpus=2)


def finished_at(step: int, steps: int, workers: int = 2) -> bool:
    """Whether a gang finished where its workers can leave it: they step asynchronously, as
    TF-Slim's between-graph replicas do, so each may apply one step read before the global
    step reached ``steps``: ``steps`` to ``steps + workers - 1`` (seen once: 81 of 80)."""
    return steps <= step <= steps + workers - 1


def training(c, j: str, at_least: int):
    info = job_in(c, j, "running")
    return info if info and info["steps_done"] >= at_least else None


def test_a_gang_on_two_nodes_comes_back_from_its_checkpoints_after_a_lost_member_and_a_suspend(
        make_cluster):
    cluster = two_nodes(make_cluster)
    steps = 120
    with cluster.client() as c:
        (j,) = c.submit([gang_job(steps, save_every=20)])
        info = wait_until("the gang past a checkpoint", lambda: training(c, j, 25),
                          timeout=600)
        assert sorted(f[0] for f in info["fragments"]) == ["a:0", "b:0"]
        killed = info["attempt"]
        member = ({"a", "b"} - {info["node"]}).pop()
        started = re.findall(rf"started {j} attempt {killed} .*\(pid (\d+)\) as gang "
                             r"worker 1", cluster.log(f"agent-{member}").read_text())
        os.kill(int(started[-1]), signal.SIGKILL)             # the member's runner dies
        again = wait_until("the gang to train again", lambda: (
            (x := training(c, j, 45)) and x["attempt"] > killed and x), timeout=600)
        assert "gang member on" in "\n".join(c.logs(j))
        c.suspend(j)
        held = wait_until("the gang to suspend", lambda: job_in(c, j, "suspended"), timeout=120)
        assert held["fragments"] == [] and held["steps_done"] < steps
        c.resume(j)
        wait_until("the job to finish", lambda: job_in(c, j, "finished"), timeout=600)
        assert finished_at(c.job(j)["steps_done"], steps)
        no_refusals(c)
    runs = attempts(cluster, j)
    # after the lost member: the attempt after continues from the chief's last checkpoint
    saved = [e["step"] for n, _, evs in runs if n <= killed for e in evs
             if e["event"] == "checkpoint"]          # only the chief saves
    restored = {n: e["global_step"] for n, _, evs in runs for e in evs
                if e["event"] == "started" and e["restored"]}   # the chief's, one an attempt
    assert restored[killed + 1] == saved[-1] > 0
    # after the suspend: the last attempt continues where the suspended one stopped
    suspended = [e["step"] for n, node, evs in runs if n == again["attempt"]
                 and node == again["node"] for e in evs if e["event"] == "suspended"]
    last = max(n for n, _, _ in runs)
    assert last > again["attempt"] and restored[last] == suspended[-1] > saved[-1]
    finished = {node: e["step"] for n, node, evs in runs if n == last for e in evs
                if e["event"] == "finished"}    # each worker once
    assert set(finished) == {"a", "b"} and all(finished_at(s, steps) for s in finished.values())
    # every attempt ran on both nodes, the same attempt numbers on each
    assert {n for n, node, _ in runs if node == "a"} == {n for n, node, _ in runs if node == "b"}


def test_a_gang_migrated_to_other_gpus_moves_as_one_and_continues_from_its_checkpoint(
        make_cluster):
    cluster = make_cluster()
    cluster.start_coordinator()
    steps = 80
    with cluster.client() as c:
        # held before any node is up, then placed across the nodes by hand: the policy
        # would put a 2-GPU job on one node of two GPUs
        (j,) = c.submit([gang_job(steps)])
        c.suspend(j)
        cluster.start_agent("a", "2x16GiB")
        cluster.start_agent("b", "2x16GiB")
        cluster.wait_nodes({"a", "b"})
        c.migrate(j, "a:0,b:0")
        info = wait_until("the gang to train", lambda: training(c, j, 30), timeout=600)
        assert [f[0] for f in info["fragments"]] == ["a:0", "b:0"] and info["node"] == "a"
        assert c.migrate(j, ["b:1", "a:1"])["state"] == "migrating"   # the chief to b
        moved = wait_until("the gang to start again", lambda: (
            (x := job_in(c, j, "running")) and x["attempt"] > info["attempt"] and x),
            timeout=600)
        assert [f[0] for f in moved["fragments"]] == ["b:1", "a:1"] and moved["node"] == "b"
        wait_until("the job to finish", lambda: job_in(c, j, "finished"), timeout=600)
        final = c.job(j)
        assert finished_at(final["steps_done"], steps) and final["migrations"] == 1
        no_refusals(c)
    runs = {(n, node): evs for n, node, evs in attempts(cluster, j)}
    before, after = info["attempt"], info["attempt"] + 1
    assert set(runs) == {(before, "a"), (before, "b"), (after, "a"), (after, "b")}
    suspended = [e["step"] for e in runs[before, "a"] if e["event"] == "suspended"]
    saved = [e["step"] for e in runs[before, "a"] if e["event"] == "checkpoint"]
    started = next(e for e in runs[after, "b"] if e["event"] == "started")
    # one checkpoint, by the old chief; the new chief continues at its global step
    assert started["restored"] and started["global_step"] == suspended[-1] == saved[-1] > 0
    assert not [e for e in runs[before, "b"] + runs[after, "a"] if e["event"] == "checkpoint"]
    assert [e["step"] for e in runs[after, "b"] if e["event"] == "finished"] == [steps]
