"""The node agent against a scripted coordinator socket, with a fake runner."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import zmq

from agent_fakes import write_fake_runner
from tfgshare import schema
from tfgshare.agent.node import Agent, AgentConfig
from tfgshare.agent.gpus import VirtualGpus, parse_virtual_gpus
from tfgshare.agent.supervisor import Supervisor

NOT_REGISTERED = schema.ErrorCode.NOT_REGISTERED


class FakeCoordinator:
    """A ROUTER that records what agents send and answers ``ok`` unless told otherwise."""

    def __init__(self, ctx: zmq.Context, address: str | None = None) -> None:
        self.sock = ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        if address:
            self.sock.bind(address)
        else:
            address = f"tcp://127.0.0.1:{self.sock.bind_to_random_port('tcp://127.0.0.1')}"
        self.address = address
        self.peer: bytes | None = None
        self.got: list[schema.Message] = []
        self.refuse: dict[str, tuple[schema.ErrorCode, str]] = {}   # type -> (code, reason)

    def drain(self) -> None:
        while self.sock.poll(0, zmq.POLLIN):
            peer, frame = self.sock.recv_multipart()
            msg = schema.decode(frame)
            self.got.append(msg)
            if isinstance(msg, (schema.Ok, schema.Error)):
                continue
            self.peer = peer
            refusal = self.refuse.get(msg.TYPE)
            reply = (schema.reply_error(msg, refusal[1], code=refusal[0]) if refusal else
                     schema.reply_ok(msg, heartbeat_s=0.2, checkpoint_root="/tmp")
                     if msg.TYPE == "register" else schema.reply_ok(msg))
            self.sock.send_multipart([peer, schema.encode(reply)])

    def send(self, msg: schema.Message) -> None:
        self.sock.send_multipart([self.peer, schema.encode(msg)])

    def of_type(self, kind: str) -> list:
        return [m for m in self.got if m.TYPE == kind]

    def reply_to(self, msg: schema.Message):
        return next((m for m in self.got if m.TYPE in ("ok", "error") and m.id == msg.id), None)


def pump(agent: Agent, coord: FakeCoordinator, until, timeout: float = 20.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        agent.step(timeout_ms=10)
        coord.drain()
        result = until()
        if result:
            return result
    raise AssertionError("timed out waiting for the agent")


def step_of(agent: Agent, job: str) -> int:
    """The step the agent's runner for ``job`` reached (-1: no runner yet, the start
    not received: a loaded machine can deliver it after the first pumps)."""
    runner = agent.sup.runners.get(job)
    return -1 if runner is None else runner.step


@pytest.fixture
def ctx():
    c = zmq.Context()
    yield c
    c.destroy(linger=0)


@pytest.fixture
def setup(ctx, tmp_path):
    coord = FakeCoordinator(ctx)
    sup = Supervisor(tmp_path / "work", runner_cmd=write_fake_runner(tmp_path),
                     suspend_timeout_s=5.0)
    cfg = AgentConfig(coordinator=coord.address, node="n1", work_dir=tmp_path / "work",
                      register_retry_s=0.2)
    agent = Agent(cfg, VirtualGpus(parse_virtual_gpus("2x16GiB")), sup, ctx)
    yield agent, coord
    agent.shutdown(timeout_s=2)


def start_msg(tmp_path, job="j1", attempt=1, steps=5, gpu=1, fraction=0.4, **kw):
    spec = schema.JobSpec(model_name="lenet", max_number_of_steps=steps)
    return schema.StartJob(job=job, attempt=attempt, spec=spec,
                           fragments=[schema.FragmentSpec(gpu_index=gpu, fraction=fraction)],
                           train_dir=str(tmp_path / "ckpt" / job), **kw)


def exits(coord):
    return coord.of_type("job_exit")


def test_registers_then_heartbeats_with_gpu_telemetry(setup):
    agent, coord = setup
    pump(agent, coord, lambda: len(coord.of_type("heartbeat")) >= 2)
    reg = coord.of_type("register")[0]
    assert reg.node == "n1" and reg.jobs == []
    assert [(g.index, g.memory_mb, g.virtual) for g in reg.gpus] == [(0, 16384, True),
                                                                     (1, 16384, True)]
    assert agent.heartbeat_s == 0.2          # the coordinator's choice
    hb = coord.of_type("heartbeat")[-1]
    assert [g.index for g in hb.gpus] == [0, 1] and hb.jobs == []


def test_start_job_runs_forwards_events_and_reports_exit(setup, tmp_path):
    agent, coord = setup
    pump(agent, coord, lambda: agent.registered)
    msg = start_msg(tmp_path)
    coord.send(msg)
    pump(agent, coord, lambda: exits(coord))
    ack = coord.reply_to(msg)
    assert ack.TYPE == "ok" and ack.fields["pid"] > 0
    events = [m for m in coord.of_type("job_event") if m.job == "j1"]
    assert all(m.attempt == 1 and m.node == "n1" for m in events)
    assert events[0].event["event"] == "started"
    env = json.loads((tmp_path / "ckpt" / "j1" / "env.json").read_text())
    assert env["cuda_visible_devices"] == ""                    # virtual GPU: CPU
    assert events[0].event["memory_fraction"] == 0.4
    # every report by default (pacing, tfgshare.agent.pacer, is a setting)
    assert [m.event["step"] for m in events if m.event["event"] == "progress"] == [1, 2, 3, 4, 5]
    (ex,) = exits(coord)
    assert (ex.job, ex.attempt, ex.exit_code, ex.reason) == ("j1", 1, 0, "finished")


def test_heartbeat_carries_each_jobs_step_and_memory(setup, tmp_path):
    agent, coord = setup
    pump(agent, coord, lambda: agent.registered)
    coord.send(start_msg(tmp_path, steps=100000))

    def busy_beat():
        for hb in coord.of_type("heartbeat"):
            if hb.jobs and hb.jobs[0].step > 0 and hb.jobs[0].gpu_memory_mb:
                return hb
    hb = pump(agent, coord, busy_beat)
    assert hb.jobs[0].job == "j1"
    assert set(hb.jobs[0].gpu_memory_mb) == {1} and hb.jobs[0].gpu_memory_mb[1] > 1


def test_suspend_checkpoints_and_wrong_attempt_is_refused(setup, tmp_path):
    agent, coord = setup
    pump(agent, coord, lambda: agent.registered)
    coord.send(start_msg(tmp_path, steps=100000))
    pump(agent, coord, lambda: step_of(agent, "j1") >= 2)
    stale = schema.SuspendJob(job="j1", attempt=7)
    coord.send(stale)
    pump(agent, coord, lambda: coord.reply_to(stale))
    assert "attempt 1" in coord.reply_to(stale).reason
    assert coord.reply_to(stale).code is schema.ErrorCode.INVALID
    unknown = schema.CancelJob(job="nope", attempt=1)
    coord.send(unknown)
    pump(agent, coord, lambda: coord.reply_to(unknown))
    assert coord.reply_to(unknown).reason == "no runner for job nope on node n1"
    assert coord.reply_to(unknown).code is schema.ErrorCode.NOT_FOUND
    coord.send(schema.SuspendJob(job="j1", attempt=1))
    (ex,) = pump(agent, coord, lambda: exits(coord))
    assert (ex.exit_code, ex.reason) == (75, "suspended")
    kinds = [m.event["event"] for m in coord.of_type("job_event")]
    assert kinds[-2:] == ["checkpoint", "suspended"]


def test_start_on_a_gpu_the_node_lacks_is_refused(setup, tmp_path):
    agent, coord = setup
    pump(agent, coord, lambda: agent.registered)
    msg = start_msg(tmp_path, gpu=5)
    coord.send(msg)
    pump(agent, coord, lambda: coord.reply_to(msg))
    assert coord.reply_to(msg).TYPE == "error"
    assert "GPU 5 is not on node n1" in coord.reply_to(msg).reason
    assert coord.reply_to(msg).code is schema.ErrorCode.INVALID


def test_forgotten_agent_reregisters_with_live_runners_and_is_adopted(setup, tmp_path):
    """A restarted coordinator answers 'not registered': the agent re-joins."""
    agent, coord = setup
    pump(agent, coord, lambda: agent.registered)
    coord.send(start_msg(tmp_path, steps=100000))
    pump(agent, coord, lambda: step_of(agent, "j1") >= 1)
    coord.refuse["heartbeat"] = (NOT_REGISTERED, "node is not registered")
    pump(agent, coord, lambda: len(coord.of_type("register")) >= 2)
    del coord.refuse["heartbeat"]
    rejoin = coord.of_type("register")[-1]
    (running,) = rejoin.jobs
    assert (running.job, running.attempt) == ("j1", 1) and running.pid > 0
    adopt = schema.AdoptJob(job="j1", attempt=3)
    coord.send(adopt)
    pump(agent, coord, lambda: coord.reply_to(adopt))
    n = len(coord.got)
    pump(agent, coord, lambda: any(m.TYPE == "job_event" for m in coord.got[n:]))
    assert {m.attempt for m in coord.got[n:] if m.TYPE == "job_event"} == {3}


def test_exit_while_coordinator_forgot_us_is_resent_after_rejoin(setup, tmp_path):
    agent, coord = setup
    pump(agent, coord, lambda: agent.registered)
    coord.refuse["job_exit"] = (NOT_REGISTERED, "node is not registered")
    coord.refuse["job_event"] = (NOT_REGISTERED, "node is not registered")
    coord.send(start_msg(tmp_path, steps=3))
    pump(agent, coord, lambda: exits(coord))
    del coord.refuse["job_exit"], coord.refuse["job_event"]
    pump(agent, coord, lambda: len(exits(coord)) >= 2)     # resent once we re-joined
    assert exits(coord)[0].id == exits(coord)[1].id
    assert exits(coord)[1].exit_code == 0
    pump(agent, coord, lambda: not agent.unacked)      # all acknowledged now


def test_kill_is_quiet(setup, tmp_path):
    agent, coord = setup
    pump(agent, coord, lambda: agent.registered)
    coord.send(start_msg(tmp_path, steps=100000))
    pump(agent, coord, lambda: step_of(agent, "j1") >= 1)
    coord.send(schema.KillJob(job="j1"))
    pump(agent, coord, lambda: not agent.sup.runners)
    pump(agent, coord, lambda: len(coord.of_type("heartbeat")) >= 3)
    assert exits(coord) == []


def test_refused_key_stops_the_agent(setup):
    agent, coord = setup
    coord.refuse["register"] = (schema.ErrorCode.UNKNOWN_KEY, "unknown key: ask its admin")
    assert agent.run(should_stop=lambda: coord.drain() or False) == 1
    assert "unknown key" in agent.fatal


def test_the_agent_decides_by_the_code_never_by_the_reason_text(setup):
    """Words like 'registered' or 'key' in a reason change nothing; the code does."""
    agent, coord = setup
    coord.refuse["register"] = (schema.ErrorCode.INVALID, "no GPUs; is the key registered?")
    pump(agent, coord, lambda: len(coord.of_type("register")) >= 2)   # retried, not fatal
    assert agent.fatal is None
    del coord.refuse["register"]
    pump(agent, coord, lambda: agent.registered)
    coord.refuse["heartbeat"] = (schema.ErrorCode.UNKNOWN, "node is not registered")
    n, joins = len(coord.of_type("heartbeat")), len(coord.of_type("register"))
    pump(agent, coord, lambda: len(coord.of_type("heartbeat")) >= n + 3)
    assert agent.registered and len(coord.of_type("register")) == joins   # no re-join
    coord.refuse["heartbeat"] = (NOT_REGISTERED, "words that say nothing")
    pump(agent, coord, lambda: len(coord.of_type("register")) > joins)   # the code: re-join
    coord.refuse["register"] = (schema.ErrorCode.FORBIDDEN, "refused")
    pump(agent, coord, lambda: agent.fatal)
    assert agent.fatal == "coordinator refused registration: refused"


def test_silent_coordinator_makes_the_agent_kill_its_runners_and_reconnect(ctx, tmp_path):
    coord = FakeCoordinator(ctx)
    cfg = AgentConfig(coordinator=coord.address, node="n1", work_dir=tmp_path,
                      heartbeat_s=0.05, register_retry_s=0.2, lost_after_s=0.5)
    agent = Agent(cfg, VirtualGpus(parse_virtual_gpus("1x1GiB")),
                  Supervisor(tmp_path, runner_cmd=write_fake_runner(tmp_path)), ctx)
    try:
        pump(agent, coord, lambda: agent.registered)
        coord.send(start_msg(tmp_path, steps=100000, gpu=0))
        pump(agent, coord, lambda: step_of(agent, "j1") > 0)
        coord.sock.close(linger=0)              # the coordinator vanishes (or the network)
        end = time.monotonic() + 10
        while agent.registered and time.monotonic() < end:
            agent.step(timeout_ms=10)
        assert not agent.registered
        while agent.sup.runners and time.monotonic() < end:   # fenced: its job may move
            agent.step(timeout_ms=10)
        assert not agent.sup.runners
        coord2 = FakeCoordinator(ctx, coord.address)   # back on the same address
        pump(agent, coord2, lambda: agent.registered and exits(coord2))
        assert coord2.of_type("register")[0].node == "n1"
        assert coord2.of_type("register")[0].jobs == []
        (ex,) = exits(coord2)                   # the kill is reported once re-joined
        assert ex.exit_code == 137 and "coordinator silent" in ex.reason
    finally:
        agent.shutdown(timeout_s=1)


@pytest.mark.parametrize("gpus, given, kept", [("1x1GiB", None, 2), ("2x16GiB", None, 3),
                                               ("8x16GiB", None, 3), ("2x16GiB", 1, 1)])
def test_an_agent_keeps_a_spare_runner_more_than_its_gpus(ctx, tmp_path, gpus, given, kept):
    """A sampled job resumes soon after its sampling run: a node's starts come in bursts
    of more than its GPUs, so by default it keeps one spare more, at most three;
    ``--spare-runners`` sets the number."""
    coord = FakeCoordinator(ctx)
    cfg = AgentConfig(coordinator=coord.address, node="n1", work_dir=tmp_path,
                      spare_runners=given)
    agent = Agent(cfg, VirtualGpus(parse_virtual_gpus(gpus)), context=ctx)
    try:
        assert agent.sup.spares == kept
    finally:
        agent.shutdown(timeout_s=2)

@pytest.mark.parametrize("args, words", [
    (["--coordinator", "tcp://127.0.0.1:1", "--virtual-gpus", "2xlots", "--force-virtual"],
     "bad virtual GPU spec"),
    (["--coordinator", "localhost:5555", "--virtual-gpus", "1x1GiB"], "tcp://HOST:PORT"),
    (["--coordinator", "tcp://127.0.0.1:1", "--virtual-gpus", "1x1GiB", "--heartbeat", "0"],
     "--heartbeat must be > 0"),
])
def test_agent_command_line_errors_are_clear(args, words):
    done = subprocess.run([sys.executable, "-m", "tfgshare.cli", "agent", *args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert words in done.stderr


def test_agent_and_cluster_code_never_import_tensorflow():
    code = ("import sys, tfgshare.agent.node, tfgshare.agent.gpus, tfgshare.agent.supervisor, "
            "tfgshare.localcluster, tfgshare.demo; "
            "assert 'tensorflow' not in sys.modules, 'tensorflow was imported'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_runner_understands_every_flag_the_agent_passes_for_a_spec(tmp_path):
    from tfgshare.runner.config import parse_args
    spec = schema.JobSpec(model_name="mobilenet_v1", batch_size=8, max_number_of_steps=50,
                          optimizer="sgd", learning_rate=0.05,
                          learning_rate_decay_type="fixed", weight_decay=0.0001,
                          image_size=32, num_classes=10, extra=["--log_every_n_steps", "5"])
    config = parse_args(spec.runner_args() + ["--train_dir", str(tmp_path)])
    assert (config.model_name, config.batch_size, config.max_number_of_steps) == (
        "mobilenet_v1", 8, 50)
    assert (config.optimizer, config.learning_rate, config.learning_rate_decay_type,
            config.weight_decay) == ("sgd", 0.05, "fixed", 0.0001)
    assert (config.image_size, config.num_classes, config.log_every_n_steps) == (32, 10, 5)


@pytest.mark.parametrize("where", ["outside", "root itself", "symlink", "dataset"])
def test_paths_from_the_wire_are_confined_to_the_roots(setup, tmp_path, where):
    agent, coord = setup
    pump(agent, coord, lambda: agent.registered)
    agent.checkpoint_root = str(tmp_path / "ckpt")
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "elsewhere").mkdir()
    msg = start_msg(tmp_path)
    if where == "outside":
        msg.train_dir = str(tmp_path / "elsewhere" / "j1")
    elif where == "root itself":
        msg.train_dir = str(tmp_path / "ckpt" / "j1" / "..")
    elif where == "symlink":
        (tmp_path / "ckpt" / "j1").symlink_to(tmp_path / "elsewhere")
    else:
        agent.cfg.data_roots = [tmp_path / "data"]
        msg.spec.dataset_dir = str(tmp_path / "data" / ".." / "elsewhere")
    coord.send(msg)
    reply = pump(agent, coord, lambda: coord.reply_to(msg))
    what = "dataset dir" if where == "dataset" else "train dir"
    assert reply.TYPE == "error" and f"{what} " in reply.reason
    assert "outside the allowed roots" in reply.reason and reply.code is schema.ErrorCode.INVALID
    assert not agent.sup.runners and not (tmp_path / "elsewhere" / "j1").exists()
