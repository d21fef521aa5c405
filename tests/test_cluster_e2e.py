"""The live cluster end to end: real coordinator, agents and TF runners on the CPU.

Each test starts its own coordinator and agents as processes on loopback (or
over a veth pair into a network namespace) and trains tiny lenet jobs with the
real runner. Runner events are read back from the agents' attempt files to
check step continuity across suspends, migrations and crashes.
"""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest

from tfgshare import netns as tfgnetns
from tfgshare.localcluster import LocalCluster
from tfgshare.schema import JobSpec

pytestmark = pytest.mark.timeout(300)

def lenet(steps: int, log_every: int = 1, save_every: int = 0, name: str = "") -> JobSpec:
    """A tiny lenet job that logs every ``log_every`` steps; its fraction is derived
    from its sample (``--memory_fraction auto``), its sampling is the default one."""
    extra = ["--log_every_n_steps", str(log_every), "--save_interval_secs", "0"]
    if save_every:
        extra += ["--save_interval_steps", str(save_every)]
    return JobSpec(model_name="lenet", name=name, batch_size=4, max_number_of_steps=steps,
                   memory_fraction="auto", extra=extra)


def no_refusals(client) -> None:
    """The coordinator carried out every action the policy planned."""
    assert client.metrics()["refused"] == {}


def attempts(cluster: LocalCluster, job: str) -> list[tuple[int, str, list[dict]]]:
    """(attempt, node, events) of every attempt of ``job`` on any agent, in order."""
    out = []
    for path in (cluster.root / "agents").glob(f"*/{job}/attempt-*.events.jsonl"):
        n = int(re.search(r"attempt-(\d+)", path.name).group(1))
        events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        out.append((n, path.parent.parent.name, events))
    return sorted(out)


def progress_steps(cluster: LocalCluster, job: str) -> list[int]:
    return [e["step"] for _, _, evs in attempts(cluster, job) for e in evs
            if e["event"] == "progress"]


def wait_until(what: str, pred, timeout: float = 150.0, every: float = 0.2):
    end = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(every)


def job_in(client, job: str, *states: str):
    info = client.job(job)
    if info["state"] in ("failed", "cancelled"):
        raise AssertionError(f"{job} {info['state']}: {info['reason']}")
    return info if info["state"].split(" ")[0] in states else None   # "suspended (held)"


@pytest.fixture
def make_cluster(tmp_path):
    clusters = []

    def make(**kw) -> LocalCluster:
        c = LocalCluster(tmp_path / f"cluster{len(clusters)}", **kw)
        clusters.append(c)
        return c
    yield make
    for c in clusters:
        c.stop_all(timeout_s=10)


@pytest.mark.timeout(450)   # two sampling runs one after the other (11.8 GB sampling fragment)
def test_two_jobs_share_one_gpu_from_submit_to_finish(make_cluster):
    cluster = make_cluster()
    cluster.start_coordinator()
    cluster.start_agent("n1", "1x16GiB")
    cluster.wait_nodes({"n1"})
    with cluster.client() as c:
        ids = c.submit([lenet(300, log_every=10), lenet(300, log_every=10)])
        most_together = 0

        def both_done():
            nonlocal most_together
            gpu = c.nodes()[0]["gpus"][0]
            running = [f for f in gpu["fragments"] if f["state"] == "running"]
            most_together = max(most_together, len(running))
            return all(job_in(c, j, "finished") for j in ids)
        wait_until("both jobs to finish", both_done, timeout=420)
        assert most_together == 2, "the two jobs never ran on the GPU at the same time"
        for j in ids:
            log = "\n".join(c.logs(j))
            marks = [log.find(s) for s in ("sample on n1:0", "sampled:", "resume on n1:0",
                                           "finished:")]
            assert -1 not in marks and marks == sorted(marks), log
            assert c.job(j)["steps_done"] == 300
        no_refusals(c)


def test_suspend_resume_on_other_gpu_and_live_migration_keep_every_step(make_cluster):
    cluster = make_cluster()
    cluster.start_coordinator()
    cluster.start_agent("n1", "2x16GiB")
    cluster.wait_nodes({"n1"})
    steps = 400
    with cluster.client() as c:
        (j,) = c.submit([lenet(steps)])

        def trained():
            # running, and its runner of this attempt has reported a step (the agent
            # passes progress on paced, so the coordinator's count may lag it)
            info = job_in(c, j, "running")
            runs = attempts(cluster, j)
            return info if info and runs and runs[-1][0] == info["attempt"] and any(
                e["event"] == "progress" for e in runs[-1][2]) else None
        info = wait_until("the job to run", trained)
        first_gpu = info["fragments"][0][0]
        other_gpu = "n1:1" if first_gpu == "n1:0" else "n1:0"
        c.suspend(j)
        held = wait_until("the suspend", lambda: job_in(c, j, "suspended"))
        assert held["state"] == "suspended (held)" and held["fragments"] == []
        c.migrate(j, other_gpu)                            # resume on the other GPU
        info = wait_until("the resume", lambda: job_in(c, j, "running"))
        assert info["fragments"][0][0] == other_gpu
        wait_until("progress after the resume", trained)
        c.migrate(j, first_gpu)                            # and back, while it runs
        wait_until("the job to finish", lambda: job_in(c, j, "finished"))
        final = c.job(j)
        assert final["migrations"] == 1 and final["suspends"] >= 1
        no_refusals(c)
    runs = attempts(cluster, j)
    assert len(runs) == 4                                  # sample, run, resume, migrated
    assert progress_steps(cluster, j) == list(range(1, steps + 1))   # none repeated or lost
    for (_, _, before), (_, _, after) in zip(runs, runs[1:]):
        last = [e["step"] for e in before if e["event"] == "suspended"][-1]
        started = next(e for e in after if e["event"] == "started")
        assert started["global_step"] == last and started["restored"]


def test_killed_agent_job_resumes_on_another_agent_from_its_checkpoint(make_cluster):
    cluster = make_cluster(node_timeout=4.0)
    cluster.start_coordinator()
    cluster.start_agent("n1", "1x16GiB")
    cluster.start_agent("n2", "1x16GiB")
    cluster.wait_nodes({"n1", "n2"})
    steps = 250
    with cluster.client() as c:
        (j,) = c.submit([lenet(steps, save_every=50)])

        def checkpointed_run():
            info = job_in(c, j, "running")
            if not info:
                return None
            runs = attempts(cluster, j)
            saved = [e["step"] for e in runs[-1][2] if e["event"] == "checkpoint"]
            return info if runs[-1][0] == info["attempt"] and saved else None
        info = wait_until("a checkpoint of the running job", checkpointed_run)
        victim = info["node"]
        cluster.kill(f"agent-{victim}")                     # SIGKILL: the runner dies too
        killed = attempts(cluster, j)[-1]
        last_saved = [e["step"] for e in killed[2] if e["event"] == "checkpoint"][-1]
        last_step = max(e["step"] for e in killed[2] if e["event"] == "progress")
        wait_until("the job to finish elsewhere", lambda: job_in(c, j, "finished"))
        final = c.job(j)
    survivor = ({"n1", "n2"} - {victim}).pop()
    after = [r for r in attempts(cluster, j) if r[0] > killed[0]]
    assert after and all(node == survivor for _, node, _ in after)
    started = next(e for e in after[0][2] if e["event"] == "started")
    assert started["restored"] and last_saved <= started["global_step"] <= last_step
    resumed = [e["step"] for _, _, evs in after for e in evs if e["event"] == "progress"]
    assert resumed == list(range(started["global_step"] + 1, steps + 1))
    assert final["steps_done"] == steps


def test_coordinator_killed_and_restarted_loses_no_job_and_readopts_runners(make_cluster):
    # agents kill their runners after half the node timeout without the coordinator:
    # give the restart (a loaded machine's Python start-up) more than that
    cluster = make_cluster(node_timeout=30.0)
    cluster.start_coordinator()
    cluster.start_agent("n1", "2x16GiB")
    cluster.wait_nodes({"n1"})
    steps = {0: 1000, 1: 1000, 2: 100}   # 50-55 s of lenet steps on this 2-core VM
    with cluster.client() as c:
        ids = c.submit([lenet(n) for n in steps.values()])
        total = dict(zip(ids, steps.values()))

        def some_running():
            # the policy decides how many share the node (it weighs CPU contention
            # here): kill the coordinator while whichever it runs are mid-job
            jobs = [c.job(j) for j in ids]
            return [x for x in jobs if x["state"] == "running"
                    and 50 < x["steps_done"] < total[x["id"]] // 2]
        before = {x["id"]: x for x in wait_until("a job running past sampling", some_running)}
    cluster.kill("coordinator")
    cluster.start_coordinator()
    with cluster.client() as c:
        assert sorted(x["id"] for x in c.jobs()) == sorted(ids)      # no job lost

        def readopted():
            return all("re-adopted on n1" in "\n".join(c.logs(j)) for j in before)
        wait_until("the running jobs to be re-adopted", readopted, timeout=30)
        for j in before:
            now = c.job(j)
            assert now["state"] in ("running", "finished")
            assert now["attempt"] == before[j]["attempt"]            # the same runner
        wait_until("every job to finish",
                   lambda: all(job_in(c, j, "finished") for j in ids), timeout=240)
        no_refusals(c)
    for j in ids:   # every step once, across the restart too
        assert progress_steps(cluster, j) == list(range(1, total[j] + 1))


@pytest.fixture
def netns():
    """A network namespace joined to this one by a veth pair on link-local addresses."""
    why = tfgnetns.unavailable()
    if why:
        pytest.skip(f"cannot create a network namespace here: {why}")
    with tfgnetns.namespace() as ns:
        yield ns.name, ns.host_ip


def test_agent_in_another_network_namespace_joins_over_tcp_and_runs_a_job(make_cluster, netns):
    ns, host_ip = netns
    cluster = make_cluster(host=host_ip)               # bound on the host end of the veth
    cluster.start_coordinator()
    cluster.start_agent("far", "1x16GiB", prefix=["ip", "netns", "exec", ns])
    cluster.wait_nodes({"far"})
    with cluster.client() as c:
        (j,) = c.submit([lenet(200, log_every=10)])
        wait_until("the job to finish", lambda: job_in(c, j, "finished"))
        assert c.job(j)["steps_done"] == 200
    agent_log = cluster.log("agent-far").read_text()
    assert f"coordinator tcp://{host_ip}:" in agent_log
    # the agent really is elsewhere: its namespace has no route to this one's loopback
    seen = subprocess.run(["ip", "netns", "exec", ns, "ip", "-o", "addr"],
                          capture_output=True, text=True).stdout
    assert host_ip not in seen and "127.0.0.1" in seen

