"""A coordinator process killed with SIGKILL and restarted on its database loses nothing."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from coordinator_fakes import FakeAgent
from tfgshare import schema as s
from tfgshare.client.api import Client, Unreachable

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class CoordinatorProcess:
    """``tfgshare coordinator`` as a child process."""

    def __init__(self, state: Path, port: int, node_timeout: float = 1.5) -> None:
        self.address = f"tcp://127.0.0.1:{port}"
        self.log = open(state.with_suffix(f".{time.monotonic_ns()}.log"), "w")
        env = dict(os.environ, PYTHONPATH=str(REPO))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tfgshare.cli", "coordinator", "--bind", self.address,
             "--state", str(state), "--policy", "fifo", "--tick", "0.05",
             "--node-timeout", str(node_timeout)],
            stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        with Client(self.address, timeout_s=0.5) as client:
            deadline = time.monotonic() + 30
            while True:
                try:
                    client.jobs()
                    return
                except Unreachable:
                    if self.proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"coordinator did not start: {self.output()}")

    def output(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text()

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.log.close()


@pytest.fixture
def cleanup():
    things = []
    yield things.append
    for t in things:
        if isinstance(t, CoordinatorProcess):
            if t.proc.poll() is None:
                t.proc.kill()
                t.proc.wait(10)
        else:
            t.close()


def test_sigkill_and_restart_keeps_jobs_and_readopts_running_ones(tmp_path, cleanup):
    state, port = tmp_path / "state.db", free_port()
    first = CoordinatorProcess(state, port)
    cleanup(first)
    n1 = FakeAgent(first.address, "n1", gpus=((0, 16384), (1, 16384)))
    n2 = FakeAgent(first.address, "n2", gpus=((0, 16384),))
    client = Client(first.address, timeout_s=3.0)
    for x in (n1, n2, client):
        cleanup(x)
    n1.register()
    n2.register()
    ids = client.submit([s.JobSpec("inception_v3", max_number_of_steps=100) for _ in range(5)])
    starts = {}
    for agent in (n1, n1, n2):
        start = agent.wait_command(s.StartJob)
        starts[start.job] = (agent, start)
    assert len(starts) == 3            # fifo, exclusive: three GPUs, five jobs
    on_n1 = [j for j, (a, _) in starts.items() if a is n1]
    (on_n2,) = [j for j, (a, _) in starts.items() if a is n2]
    n1.event(on_n1[0], "progress", step=40, loss=1.0, step_time_s=0.1, images_per_sec=1.0,
             predicted_remaining_s=6.0)
    # acknowledged means on disk: kill it the moment the answer arrives
    ids += client.submit([s.JobSpec("vgg_16", max_number_of_steps=10)])
    first.kill()

    second = CoordinatorProcess(state, port)
    cleanup(second)
    jobs = {j["id"]: j for j in client.jobs()}
    assert sorted(jobs) == sorted(ids)
    assert {jobs[j]["state"] for j in starts} == {"unknown"}
    assert {jobs[j]["state"] for j in ids if j not in starts} == {"queued"}
    assert jobs[on_n1[0]]["steps_done"] == 40

    # n1's agent comes back (a new socket, as after a reconnect) with one runner still
    # alive, plus one the coordinator does not want; n2 never comes back
    n1.close()
    n1b = FakeAgent(second.address, "n1", gpus=((0, 16384), (1, 16384)))
    cleanup(n1b)
    kept = s.RunningJob(on_n1[0], pid=1234, step=45, attempt=starts[on_n1[0]][1].attempt)
    stray = s.RunningJob("j999", pid=999, step=1)
    assert isinstance(n1b.register(jobs=[kept, stray]), s.Ok)
    assert n1b.wait_command(s.AdoptJob, on_n1[0]).attempt == kept.attempt
    assert n1b.wait_command(s.KillJob, "j999")
    info = client.job(on_n1[0])
    assert info["state"] == "running" and info["node"] == "n1" and info["steps_done"] == 45
    assert any("re-adopted on n1" in ln for ln in client.logs(on_n1[0]))
    # the runner n1 did not report goes back to the queue from its checkpoint
    assert client.job(on_n1[1])["state"] in ("suspended", "running")
    # ... and n2's job is re-queued once the node timeout passes
    deadline = time.monotonic() + 10
    while client.job(on_n2)["state"] == "unknown" and time.monotonic() < deadline:
        n1b.heartbeat()
        time.sleep(0.1)
    info = client.job(on_n2)
    assert info["state"] == "suspended", info
    assert "did not report it" in info["reason"]
    # the re-adopted job's reports are accepted under its attempt
    n1b.event(on_n1[0], "finished", step=100, loss=0.5)
    n1b.exit(on_n1[0], 0)
    assert client.job(on_n1[0])["state"] == "finished"
    assert len(client.jobs()) == 6
