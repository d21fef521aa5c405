"""The coordinator with fake agents: life cycle, sharing, manual moves, lost nodes."""

from __future__ import annotations

import time

import pytest

from coordinator_fakes import CoordinatorThread, FakeAgent
from tfgshare import schema as s
from tfgshare.client.api import Client, Refused
from tfgshare.policies.base import Policy
from tfgshare.policies.registry import POLICY_NAMES, get_policy

SHARING_POLICY = "fgs" if "fgs" in POLICY_NAMES else "gandiva"


@pytest.fixture
def make(tmp_path):
    """make(policy="fifo", **config) -> (coordinator thread, client); closed after the test."""
    opened = []

    def _make(policy="fifo", **config):
        ct = CoordinatorThread(tmp_path / "state.db", policy=get_policy(policy), **config)
        client = Client(ct.address, timeout_s=5.0)
        opened.append((ct, client))
        return ct, client

    yield _make
    for ct, client in opened:
        client.close()
        ct.close()


@pytest.fixture
def agents():
    made = []

    def _agent(address, node, gpus=((0, 16384),), **kw):
        a = FakeAgent(address, node, gpus, **kw)
        made.append(a)
        return a

    yield _agent
    for a in made:
        a.close()


def spec(model="inception_v3", **kw) -> s.JobSpec:
    kw.setdefault("max_number_of_steps", 100)
    return s.JobSpec(model, **kw)


def test_register_reply_tells_heartbeat_and_shared_checkpoint_root(make, agents, tmp_path):
    ct, client = make(node_timeout=8.0)
    reply = agents(ct.address, "n1").register()
    assert isinstance(reply, s.Ok)
    assert reply.fields["heartbeat_s"] == 2.0
    assert reply.fields["checkpoint_root"] == str(tmp_path / "checkpoints")
    (node,) = client.nodes()
    assert node["name"] == "n1" and node["state"] == "up" and len(node["gpus"]) == 1


def test_job_life_cycle_start_progress_finish_and_logs(make, agents, tmp_path):
    ct, client = make()
    agent = agents(ct.address, "n1")
    agent.register()
    (jid,) = client.submit([spec(max_number_of_steps=50)])
    start = agent.wait_command(s.StartJob, jid)
    assert start.attempt == 1 and not start.sample_only
    assert start.train_dir == str(tmp_path / "checkpoints" / jid)
    assert start.spec.model_name == "inception_v3" and start.fragments[0].gpu_index == 0
    assert client.job(jid)["state"] == "running"

    agent.event(jid, "started", global_step=0, restored=False, device="cpu",
                memory_fraction=start.fragments[0].fraction)
    agent.event(jid, "progress", step=20, loss=2.5, step_time_s=0.1, images_per_sec=320.0,
                predicted_remaining_s=3.0)
    info = client.job(jid)
    assert info["steps_done"] == 20 and info["predicted_remaining_s"] == 3.0
    assert info["fragments"] == [["n1:0", start.fragments[0].fraction]]

    agent.event(jid, "finished", step=50, loss=1.0)
    agent.exit(jid, 0)
    info = client.job(jid)
    assert info["state"] == "finished" and info["steps_done"] == 50
    assert info["fragments"] == [] and info["finish_time"] is not None
    lines = client.logs(jid)
    assert "submitted inception_v3" in lines[0]
    assert any("progress step=20" in ln for ln in lines)
    assert "finished" in lines[-1]
    assert client.logs(jid, tail=1) == lines[-1:]


def test_a_job_sampled_in_place_is_predicted_from_its_sample_step_and_not_when_done(
        make, agents):
    # fifo runs a job in place: its sampling run goes on training. The sample event
    # comes before the progress of the same step; the prediction counts the steps the
    # sample was taken at, and a job whose sampling run did every step has nothing
    # left to predict (its prediction error is not counted)
    from coordinator_fakes import sample_event
    ct, client = make(policy="fifo")
    agent = agents(ct.address, "n1")
    agent.register()

    def sampled_in_place(jid):
        assert not agent.wait_command(s.StartJob, jid).sample_only
        agent.event(jid, "started", global_step=0, restored=False, device="cpu",
                    memory_fraction=0.5)
        agent.event(jid, "sample", **sample_event(step_time=0.25, step=7))

    (done_job,) = client.submit([spec(max_number_of_steps=7)])
    sampled_in_place(done_job)
    agent.event(done_job, "finished", step=7, loss=1.0)
    agent.exit(done_job, 0)
    info = client.job(done_job)
    assert info["state"] == "finished"
    assert info["predicted_total_s"] is None and info["prediction_error"] is None
    (long_job,) = client.submit([spec()])
    sampled_in_place(long_job)
    assert client.job(long_job)["predicted_total_s"] == pytest.approx(93 * 0.25, abs=0.5)


def test_sampling_record_makes_the_job_sampled(make, agents):
    ct, client = make(policy="fifo")
    agent = agents(ct.address, "n1")
    agent.register()
    (jid,) = client.submit([spec()])
    agent.wait_command(s.StartJob, jid)
    # a sampling run that ends as the runner's sample_only run would
    ct.coord.cluster.jobs[jid].sample_only = True
    agent.sample(jid, step_time=0.25, peak_mb=3000.0)
    info = client.job(jid)
    assert info["sample"]["step_time_s"] == 0.25
    assert info["sample"]["peak_memory_mb"] == 3000.0
    assert info["sample"]["co_tenants"] == 0
    # the sample was taken at step 7: 93 of its 100 steps left at 0.25 s, plus its
    # measured restart and sampling tail (near 0 here)
    assert info["steps_done"] == 7
    assert info["predicted_remaining_s"] == pytest.approx(23.25, abs=0.5)
    # fifo starts it again at once as a full run from the sampling checkpoint
    restart = agent.wait_command(s.StartJob, jid)
    assert restart.attempt == 2 and not restart.sample_only
    assert "sampled" in "\n".join(client.logs(jid))


def test_two_jobs_share_one_gpu(make, agents):
    ct, client = make(policy=SHARING_POLICY)
    agent = agents(ct.address, "n1", gpus=((0, 16384),))
    agent.register()
    ids = client.submit([spec(memory_fraction=0.4), spec("resnet_v1_50", memory_fraction=0.4)])
    running: dict[str, s.StartJob] = {}
    deadline = time.monotonic() + 10
    while len(running) < 2 and time.monotonic() < deadline:
        agent.pump(0.05)
        for cmd in [c for c in agent.commands if isinstance(c, s.StartJob)]:
            agent.commands.remove(cmd)
            if cmd.sample_only:
                agent.sample(cmd.job, peak_mb=4000.0, cpu_util=0.4)
            else:
                running[cmd.job] = cmd
    assert set(running) == set(ids)
    for cmd in running.values():
        assert cmd.fragments[0].gpu_index == 0
    jobs = {j["id"]: j for j in client.jobs()}
    assert all(jobs[i]["state"] == "running" for i in ids)
    fractions = [jobs[i]["fragments"][0][1] for i in ids]
    assert all(0 < f < 1 for f in fractions) and sum(fractions) <= 1.0
    (node,) = client.nodes()
    assert {f["job"] for f in node["gpus"][0]["fragments"]} == set(ids)


def test_impossible_submits_are_refused_with_a_reason(make, agents):
    ct, client = make()
    agents(ct.address, "n1", gpus=((0, 16384), (1, 16384))).register()
    with pytest.raises(Refused, match="asks for 3 GPUs but the cluster.s nodes have 2") as refused:
        client.submit([spec(num_gpus=3)])
    assert refused.value.code is s.ErrorCode.INVALID
    with pytest.raises(Refused, match="nosuchnet") as refused:
        client.submit([spec("nosuchnet")])
    assert refused.value.code is s.ErrorCode.INVALID
    with pytest.raises(Refused, match=r"memory_fraction must be in \(0, 1\]") as refused:
        client.request(s.Submit(jobs=[spec(memory_fraction=1.5)]))
    assert refused.value.code is s.ErrorCode.INVALID
    with pytest.raises(Refused, match=r"memory_fraction must be in \(0, 1\]"):
        client.request(s.Submit(jobs=[spec(memory_fraction=0.0)]))
    with pytest.raises(Refused, match="job 2 .*nosuchnet"):
        client.submit([spec(), spec("nosuchnet")])
    with pytest.raises(Refused, match="at least one job") as refused:
        client.submit([])
    assert refused.value.code is s.ErrorCode.INVALID
    assert client.jobs() == []   # a refused batch queues nothing
    assert client.submit([spec(num_gpus=2)]) == ["j1"]


def test_node_timeout_requeues_its_jobs_elsewhere(make, agents):
    ct, client = make(node_timeout=0.5)
    a1 = agents(ct.address, "n1")
    a1.register()
    (jid,) = client.submit([spec()])
    a1.wait_command(s.StartJob, jid)
    a2 = agents(ct.address, "n2")
    a2.register()
    a1.event(jid, "progress", step=7, loss=1.0, step_time_s=0.1, images_per_sec=1.0,
             predicted_remaining_s=9.3)
    # n1 goes silent; n2 keeps heartbeating
    deadline = time.monotonic() + 5
    moved = None
    while moved is None and time.monotonic() < deadline:
        a2.heartbeat()
        a2.pump(0.1)
        moved = next((c for c in a2.commands if isinstance(c, s.StartJob)), None)
    assert moved is not None and moved.job == jid and moved.attempt == 2
    assert moved.train_dir.endswith(jid)   # resumes from the same shared checkpoint dir
    info = client.job(jid)
    assert info["state"] == "running" and info["node"] == "n2" and info["steps_done"] == 7
    assert any("node n1 lost" in ln for ln in client.logs(jid))
    nodes = {n["name"]: n for n in client.nodes()}
    assert nodes["n1"]["state"] == "lost"
    # the lost agent's late reports are refused until it registers again
    reply = a1.request(s.Heartbeat(node="n1"))
    assert isinstance(reply, s.Error) and "registered" in reply.reason
    assert reply.code is s.ErrorCode.NOT_REGISTERED


def test_a_backlog_in_the_coordinator_is_not_a_nodes_silence(tmp_path):
    from tfgshare.coordinator.config import CoordinatorConfig
    from tfgshare.coordinator.server import Coordinator
    clock = [0.0]
    coord = Coordinator(CoordinatorConfig(state=tmp_path / "state.db", node_timeout=10.0),
                        clock=lambda: clock[0])
    for node in ("n1", "n2"):
        coord.handle([node.encode()], s.encode(s.Register(
            node=node, gpus=[s.GpuInfo(0, "virtual", 16384, True)])))
    coord.step()

    def lost_at(t, caught_up):
        clock[0], coord.caught_up_at = t, caught_up
        coord.tick(t)
        return sorted(n.name for n in coord.cluster.nodes.values() if n.lost)

    # the loop last read all it was sent at 1 s: a node silent 15 s by the clock may
    # have sent a heartbeat still waiting to be read
    assert lost_at(15.0, caught_up=1.0) == []
    coord.handle([b"n2"], s.encode(s.Heartbeat(node="n2")))   # read at last
    # silent twice its timeout: lost even so; n2 was heard at 15 s
    assert lost_at(20.5, caught_up=1.0) == ["n1"]
    # caught up, a node silent past its timeout is lost, as without a backlog
    assert lost_at(25.5, caught_up=25.5) == ["n1", "n2"]


def test_a_node_back_without_a_gpu_requeues_the_job_there_and_readopts_the_other(make, agents):
    ct, client = make()
    a1 = agents(ct.address, "n1", gpus=((0, 16384), (1, 16384)))
    a1.register()
    jobs = client.submit([spec(), spec()])
    starts = {c.job: c for c in (a1.wait_command(s.StartJob, j) for j in jobs)}
    on = {starts[j].fragments[0].gpu_index: j for j in jobs}
    assert set(on) == {0, 1}
    # its agent restarts offering GPU 0 only, and reports both runners
    a1.gpus = a1.gpus[:1]
    a1.register([s.RunningJob(job=j, pid=100 + n, step=3, attempt=1)
                 for n, j in enumerate(jobs)])
    a1.wait_command(s.KillJob, on[1])       # its runner there is not wanted
    kept, gone = client.job(on[0]), client.job(on[1])
    assert kept["state"] == "running" and kept["node"] == "n1"
    assert gone["state"] == "suspended" and not gone["node"]   # back in the queue
    assert any("re-registered without it" in ln for ln in client.logs(on[1]))
    assert any("re-adopted" in ln for ln in client.logs(on[0]))


def test_a_running_jobs_time_left_follows_the_heartbeats_between_its_reports(make, agents):
    ct, client = make()
    a = agents(ct.address, "n1")
    a.register()
    (jid,) = client.submit([spec(max_number_of_steps=100)])
    a.wait_command(s.StartJob, jid)
    a.event(jid, "started", global_step=0, restored=False, device="cpu", memory_fraction=0.5)
    a.event(jid, "progress", step=10, loss=1.0, step_time_s=0.5, images_per_sec=1.0,
            predicted_remaining_s=45.0)
    assert client.job(jid)["predicted_remaining_s"] == pytest.approx(45.0)
    # its agent holds the next reports (paced); its heartbeat says step 60
    a.heartbeat([s.JobTelemetry(job=jid, step=60)])
    info = client.job(jid)
    assert info["steps_done"] == 60 and info["predicted_remaining_s"] == pytest.approx(20.0)


def test_stale_attempt_reports_are_ignored(make, agents):
    ct, client = make()
    agent = agents(ct.address, "n1")
    agent.register()
    (jid,) = client.submit([spec()])
    agent.wait_command(s.StartJob, jid)
    reply = agent.request(s.JobExit(node="n1", job=jid, attempt=99, exit_code=0))
    assert isinstance(reply, s.Ok) and reply.fields["stale"] is True
    assert client.job(jid)["state"] == "running"


def test_manual_suspend_resume_and_migrate(make, agents):
    ct, client = make(policy="fifo")
    agent = agents(ct.address, "n1", gpus=((0, 16384), (1, 16384)))
    agent.register()
    (jid,) = client.submit([spec()])
    start = agent.wait_command(s.StartJob, jid)
    gpu_from = start.fragments[0].gpu_index

    client.suspend(jid)
    agent.wait_command(s.SuspendJob, jid)
    assert client.job(jid)["state"] == "suspending"
    agent.event(jid, "suspended", step=12)
    agent.exit(jid, 75)
    info = client.job(jid)
    assert info["state"] == "suspended (held)" and info["suspends"] == 1
    time.sleep(0.2)   # several policy ticks: a held job is not restarted
    assert not any(isinstance(c, s.StartJob) for c in agent.commands)

    client.resume(jid)
    resumed = agent.wait_command(s.StartJob, jid)
    assert resumed.attempt == 2 and client.job(jid)["resumes"] == 1

    other = f"n1:{1 - resumed.fragments[0].gpu_index}"
    client.migrate(jid, other)
    agent.wait_command(s.SuspendJob, jid)
    assert client.job(jid)["state"] == "migrating"
    agent.exit(jid, 75)
    moved = agent.wait_command(s.StartJob, jid)
    assert f"n1:{moved.fragments[0].gpu_index}" == other and moved.attempt == 3
    info = client.job(jid)
    assert info["migrations"] == 1 and info["fragments"][0][0] == other
    assert gpu_from in (0, 1)

    with pytest.raises(Refused, match="no up GPU 'n9:0'") as refused:
        client.migrate(jid, "n9:0")
    assert refused.value.code is s.ErrorCode.INVALID
    with pytest.raises(Refused, match="NODE:INDEX") as refused:
        client.migrate(jid, "garbage")
    assert refused.value.code is s.ErrorCode.INVALID
    with pytest.raises(Refused, match="already runs on") as refused:
        client.migrate(jid, other)
    assert refused.value.code is s.ErrorCode.CONFLICT

    client.cancel(jid)
    agent.wait_command(s.CancelJob, jid)
    agent.exit(jid, -9, "killed")
    assert client.job(jid)["state"] == "cancelled"
    with pytest.raises(Refused, match="already cancelled") as refused:
        client.cancel(jid)
    assert refused.value.code is s.ErrorCode.CONFLICT
    with pytest.raises(Refused, match="no job 'j42'") as refused:
        client.job("j42")
    assert refused.value.code is s.ErrorCode.NOT_FOUND


def test_migrate_refused_when_the_fragment_does_not_fit(make, agents):
    ct, client = make(policy="fifo")
    agent = agents(ct.address, "n1", gpus=((0, 16384), (1, 16384)))
    agent.register()
    a, b = client.submit([spec(), spec()])
    agent.wait_command(s.StartJob, a)
    gpu_b = agent.wait_command(s.StartJob, b).fragments[0].gpu_index
    with pytest.raises(Refused, match="does not fit on n1:") as refused:
        client.migrate(a, f"n1:{gpu_b}")
    assert refused.value.code is s.ErrorCode.INVALID


def test_crash_retries_then_fails_and_bad_input_fails_at_once(make, agents):
    ct, client = make(max_retries=1)
    agent = agents(ct.address, "n1")
    agent.register()
    jid, bad = client.submit([spec(), spec()])
    agent.wait_command(s.StartJob, jid)
    agent.exit(jid, 1, "segfault")
    assert agent.wait_command(s.StartJob, jid).attempt == 2
    agent.exit(jid, 1, "segfault")
    info = client.job(jid)
    assert info["state"] == "failed" and "giving up" in info["reason"]

    agent.wait_command(s.StartJob, bad)
    agent.event(bad, "error", message="dataset_dir /nope does not exist")
    agent.exit(bad, 2)
    info = client.job(bad)
    assert info["state"] == "failed" and "dataset_dir /nope" in info["reason"]


def test_retries_count_only_failures_without_progress(make, agents):
    ct, client = make(max_retries=1)
    agent = agents(ct.address, "n1")
    agent.register()
    (jid,) = client.submit([spec()])
    start = agent.wait_command(s.StartJob, jid)
    for step in (10, 20, 30):          # each attempt trains further before it crashes
        agent.event(jid, "progress", step=step, loss=1.0, step_time_s=0.1,
                    images_per_sec=1.0, predicted_remaining_s=5.0)
        agent.exit(jid, 1, "segfault")
        again = agent.wait_command(s.StartJob, jid)
        assert again.attempt == start.attempt + 1, client.job(jid)
        start = again
        assert client.job(jid)["state"] == "running"
    # no progress since the last crash: the count goes on, and past --max-retries it fails
    agent.event(jid, "started", global_step=25)
    agent.exit(jid, 1, "segfault")
    info = client.job(jid)
    assert info["state"] == "failed" and "2 times without progress" in info["reason"], info


def test_register_reply_names_the_node_timeout(make, agents):
    ct, client = make(node_timeout=7.5)
    reply = agents(ct.address, "n1").register()
    assert reply.fields["node_timeout"] == 7.5


def test_agent_refusing_a_start_requeues_the_job(make, agents):
    ct, client = make(max_retries=5)
    agent = agents(ct.address, "n1")
    agent.register()
    agent.auto_ack = False
    (jid,) = client.submit([spec()])
    start = agent.wait_command(s.StartJob, jid)
    agent.send(s.reply_error(start, "no such GPU", code=s.ErrorCode.INVALID))
    again = agent.wait_command(s.StartJob, jid)
    assert again.attempt == 2
    assert any("agent refused to start it: no such GPU" in ln for ln in client.logs(jid))


def test_job_over_its_fragment_is_flagged_in_status_and_metrics(make, agents):
    ct, client = make()
    agent = agents(ct.address, "n1", gpus=((0, 1000),))
    agent.register()
    (jid,) = client.submit([spec(memory_fraction=0.5)])
    agent.wait_command(s.StartJob, jid)
    frac = client.job(jid)["fragments"][0][1]
    agent.heartbeat(jobs=[s.JobTelemetry(jid, 3, {0: frac * 1000 + 50})])
    info = client.job(jid)
    assert "on n1:0" in info["over_memory"] and info["gpu_memory_mb"] == {"0": frac * 1000 + 50}
    assert info["steps_done"] == 3
    value = ct.coord.metrics.registry.get_sample_value("tfgshare_jobs_over_fragment")
    deadline = time.monotonic() + 2
    while value != 1.0 and time.monotonic() < deadline:
        time.sleep(0.05)
        value = ct.coord.metrics.registry.get_sample_value("tfgshare_jobs_over_fragment")
    assert value == 1.0
    agent.heartbeat(jobs=[s.JobTelemetry(jid, 4, {0: 10.0})])
    assert client.job(jid)["over_memory"] == ""


def test_metrics_report_and_prometheus_endpoint(make, agents):
    import urllib.request
    ct, client = make(metrics_port=0)
    agent = agents(ct.address, "n1")
    agent.register()
    (jid,) = client.submit([spec()])
    agent.wait_command(s.StartJob, jid)
    agent.exit(jid, 0)
    report = client.metrics()
    assert report["summary"]["finished"] == 1 and report["summary"]["jobs"] == 1
    assert "fifo" in report["report"] and jid in report["report"]
    assert report["jobs"][0]["job"] == jid
    # the rounds that started the job, and where their time went
    rounds, parts = report["rounds"], report["round_parts"]
    assert rounds["count"] >= 1 and set(parts) == {"plan", "wait", "apply", "loop_cpu", "cpu"}
    assert all(parts[k]["count"] == rounds["count"] for k in parts)
    assert parts["apply"]["max_ms"] <= rounds["max_ms"]
    port = ct.coord.metrics.port
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'tfgshare_jobs{state="finished"} 1.0' in body
    assert "tfgshare_utilisation_allocated" in body and "tfgshare_migrations_total" in body


def test_messages_handled_and_database_commits_are_counted(make, agents):
    ct, client = make()
    registry = ct.coord.metrics.registry

    def handled(kind):
        return registry.get_sample_value("tfgshare_messages_handled_total", {"type": kind})

    assert handled("heartbeat") == 0.0          # every type shows before one comes
    agent = agents(ct.address, "n1")
    agent.register()
    for _ in range(3):
        agent.heartbeat()
    commits = registry.get_sample_value("tfgshare_db_commit_seconds_count")
    rows = registry.get_sample_value("tfgshare_db_rows_written_total")
    client.submit([spec(), spec()])
    assert handled("heartbeat") == 3.0 and handled("register") == 1.0
    assert handled("submit") == 1.0
    # the submit's turn commits its two job rows and two log lines at least
    assert registry.get_sample_value("tfgshare_db_commit_seconds_count") > commits
    assert registry.get_sample_value("tfgshare_db_rows_written_total") >= rows + 4
    assert registry.get_sample_value("tfgshare_db_write_seconds_total") > 0


def test_exit_reported_after_the_job_was_requeued_still_finishes_it(make, agents):
    ct, client = make(node_timeout=0.3)
    agent = agents(ct.address, "n1")
    agent.register()
    done, sampled = client.submit([spec(), spec()])
    agent.wait_command(s.StartJob, done)
    time.sleep(0.6)                      # silent past the node timeout: both re-queued
    assert client.job(done)["state"] == "suspended"
    assert "lost" in client.job(done)["reason"]
    client.suspend(done)                 # held, so that it is not restarted meanwhile
    assert isinstance(agent.register(), s.Ok)   # back, its runner ended while away
    reply = agent.request(s.JobExit(node="n1", job=done, attempt=1, exit_code=0))
    assert isinstance(reply, s.Ok) and "stale" not in reply.fields
    info = client.job(done)
    assert info["state"] == "finished" and "after it was re-queued" in info["reason"]
    # an exit from an attempt that was restarted since is ignored
    restart = agent.wait_command(s.StartJob, sampled)
    reply = agent.request(s.JobExit(node="n1", job=sampled, attempt=restart.attempt - 1,
                                    exit_code=0))
    assert reply.fields.get("stale") is True and client.job(sampled)["state"] == "running"


def test_multi_gpu_job_gets_one_fragment_per_gpu_on_one_node(make, agents):
    ct, client = make(policy="fifo")
    small = agents(ct.address, "small", gpus=((0, 16384),))
    small.register()
    big = agents(ct.address, "big", gpus=((0, 16384), (1, 16384), (2, 16384)))
    big.register()
    (jid,) = client.submit([spec(num_gpus=2)])
    start = big.wait_command(s.StartJob, jid)
    assert sorted(f.gpu_index for f in start.fragments) in ([0, 1], [0, 2], [1, 2])
    assert client.job(jid)["node"] == "big" and len(client.job(jid)["fragments"]) == 2
    assert not any(isinstance(c, s.StartJob) for c in small.commands)


def test_prediction_error_reaches_the_report(make, agents):
    ct, client = make(policy="fifo")
    agent = agents(ct.address, "n1")
    agent.register()
    (jid,) = client.submit([spec()])
    agent.wait_command(s.StartJob, jid)
    ct.coord.cluster.jobs[jid].sample_only = True
    agent.sample(jid, step_time=0.001)          # 100 steps left: predicts about 0.1 s
    agent.wait_command(s.StartJob, jid)
    time.sleep(0.2)
    agent.exit(jid, 0)
    (row,) = client.metrics()["jobs"]
    assert row["predicted_s"] == pytest.approx(0.1, abs=0.05)
    assert row["actual_s"] is not None and row["actual_s"] >= 0.2
    report_error = client.metrics()["summary"]["pred_error_mean"]
    assert report_error > 0
    time.sleep(0.2)                                  # a tick refreshes the gauges
    gauge = ct.coord.metrics.registry.get_sample_value("tfgshare_prediction_error_mean")
    assert gauge == pytest.approx(report_error)
    registry = ct.coord.metrics.registry
    assert registry.get_sample_value("tfgshare_jobs", {"state": "finished"}) == 1.0
    assert registry.get_sample_value("tfgshare_jobs", {"state": "running"}) == 0.0


def test_bad_coordinator_flags_and_state_file_are_named(tmp_path, capsys):
    from tfgshare.coordinator.server import config_from_args, main
    for argv, words in [(["--state", "x", "--tick", "0"], "--tick must be > 0"),
                        (["--state", "x", "--node-timeout", "-1"], "--node-timeout must be > 0"),
                        (["--state", "x", "--policy-param", "oops"], "KEY=VALUE"),
                        ([], "--state")]:
        with pytest.raises(SystemExit):
            config_from_args(argv)
        assert words in capsys.readouterr().err
    not_db = tmp_path / "not.db"
    not_db.write_text("this is not a database " * 100)
    assert main(["--state", str(not_db), "--policy", "fifo"]) == 2
    assert "cannot use" in capsys.readouterr().err
    assert main(["--state", str(tmp_path / "s.db"), "--policy", "nosuch"]) == 2
    assert "unknown policy 'nosuch'" in capsys.readouterr().err


def test_a_failing_policy_does_not_stop_the_coordinator(tmp_path, agents):
    class Broken(Policy):
        name = "broken"

        def decide(self, now, cluster, jobs):
            raise RuntimeError("policy bug")

    ct = CoordinatorThread(tmp_path / "state.db", policy=Broken())
    try:
        agents(ct.address, "n1").register()
        with Client(ct.address, timeout_s=5) as client:
            (jid,) = client.submit([spec()])
            time.sleep(0.2)               # several rounds, each failing
            assert client.job(jid)["state"] == "queued"
        assert ct.thread.is_alive()
    finally:
        ct.close()


def test_agent_that_cannot_suspend_a_job_sends_it_back_to_the_queue(make, agents):
    ct, client = make(policy="fifo")
    agent = agents(ct.address, "n1")
    agent.register()
    a, b = client.submit([spec(), spec()])
    agent.wait_command(s.StartJob, a)
    agent.auto_ack = False
    client.suspend(a)
    cmd = agent.wait_command(s.SuspendJob, a)
    agent.send(s.reply_error(cmd, f"no runner for {a}", code=s.ErrorCode.NOT_FOUND))
    deadline = time.monotonic() + 5
    while client.job(a)["state"] != "suspended (held)" and time.monotonic() < deadline:
        time.sleep(0.05)
    info = client.job(a)
    assert info["state"] == "suspended (held)" and "has no runner for it" in info["reason"]
    agent.auto_ack = True
    assert agent.wait_command(s.KillJob, a)
    assert agent.wait_command(s.StartJob, b).attempt == 1   # its GPU is free again


def test_malformed_runner_event_is_refused_and_the_job_keeps_running(make, agents):
    ct, client = make()
    agent = agents(ct.address, "n1")
    agent.register()
    (jid,) = client.submit([spec()])
    agent.wait_command(s.StartJob, jid)
    reply = agent.event(jid, "progress", step="seven")
    assert isinstance(reply, s.Error) and "step must be a number" in reply.reason
    assert reply.code is s.ErrorCode.INVALID
    reply = agent.event(jid, "sample", step_time_mean_s=None, peak_memory_mb=1.0)
    assert isinstance(reply, s.Error) and "step_time_mean_s" in reply.reason
    agent.event(jid, "progress", step=8, predicted_remaining_s=1.5)
    info = client.job(jid)
    assert info["state"] == "running" and info["steps_done"] == 8


def test_requests_are_answered_while_a_slow_policy_decides(tmp_path, agents):
    import threading

    class Slow(Policy):
        name = "slow"
        deciding = threading.Event()

        def decide(self, now, cluster, jobs):
            self.deciding.set()
            time.sleep(1.5)
            return []

    policy = Slow()
    ct = CoordinatorThread(tmp_path / "state.db", policy=policy)
    try:
        agents(ct.address, "n1").register()
        with Client(ct.address, timeout_s=1.0) as client:
            (jid,) = client.submit([spec()])
            assert policy.deciding.wait(5)
            assert client.job(jid)["state"] == "queued"   # answered mid-round
            assert client.submit([spec()]) == ["j2"]
    finally:
        ct.close()


def test_report_of_jobs_left_in_the_database_matches_the_report_of_their_records(make, agents):
    from tfgshare.coordinator.exporter import job_record
    from tfgshare.metrics import compute_report
    ct, client = make()
    ct.coord.cluster.keep_done = 1                 # done jobs leave memory at once
    agent = agents(ct.address, "n1")
    agent.register()
    ids = client.submit([spec(), spec(), spec(), spec()])
    client.cancel(ids[3])     # while it waits: cancelled at once, so no job is left active
    for jid in ids[:3]:
        agent.wait_command(s.StartJob, jid)
        time.sleep(0.05)
        agent.exit(jid, 0)
    got = client.metrics()["summary"]
    records = [job_record(ct.coord.life.job(j), ct.coord.clock()) for j in ids]
    want = compute_report(records, ct.coord.metrics.timeline, 1).as_dict()
    assert got["finished"] == 3 and got["jobs"] == 4
    assert set(got) == set(want)
    for key, value in want.items():
        assert got[key] == (value if isinstance(value, dict) or value is None
                            else pytest.approx(value, rel=1e-9)), key
