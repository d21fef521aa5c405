"""Test helpers: a coordinator in a thread, and fake agents speaking the agent protocol.

A ``FakeAgent`` is a DEALER socket in the test process: it registers, heartbeats
on demand, receives commands and answers them, and reports runner events and
exits as a real agent would, so coordinator tests are fast and deterministic.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import zmq

from tfgshare import keys
from tfgshare import schema as s
from tfgshare.coordinator.server import Coordinator, CoordinatorConfig


class CoordinatorThread:
    """A coordinator serving on a free loopback port in a background thread."""

    def __init__(self, state: Path, policy=None, clock=None, **config) -> None:
        config.setdefault("bind", "tcp://127.0.0.1:*")
        config.setdefault("tick", 0.05)
        config.setdefault("node_timeout", 5.0)
        self.coord = Coordinator(CoordinatorConfig(state=state, **config), policy=policy,
                                 **({"clock": clock} if clock is not None else {}))
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.coord.serve, args=(self.stop,), daemon=True)
        self.thread.start()
        assert self.coord.ready.wait(10), "coordinator did not start"
        self.address = self.coord.endpoint

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)


class Clock:
    """A wall clock that a test can move forward (``skip``), to pass policy time bounds."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset

    def skip(self, seconds: float) -> None:
        self.offset += seconds


class FakeAgent:
    """One node's agent, driven by the test."""

    def __init__(self, address: str, node: str, gpus=((0, 16384),), 
                 key: Path | None = None) -> None:
        self.node = node
        self.gpus = [s.GpuInfo(i, "virtual", mb, True) for i, mb in gpus]
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        keys.secure_client(self.sock, keys.client_files(key, None) if key else None)
        self.sock.connect(address)
        self.commands: list[s.Message] = []
        self.replies: dict[str, s.Message] = {}
        self.attempts: dict[str, int] = {}      # job -> attempt it runs under
        self.auto_ack = True                    # answer every command with ok

    def close(self) -> None:
        self.sock.close(0)
        self.ctx.term()

    def send(self, msg: s.Message) -> None:
        self.sock.send(s.encode(msg))

    def pump(self, timeout_s: float = 0.0) -> None:
        """Receive what is waiting (up to ``timeout_s`` for the first frame)."""
        wait = timeout_s
        while self.sock.poll(wait * 1000):
            msg = s.decode(self.sock.recv())
            wait = 0.0
            if isinstance(msg, (s.Ok, s.Error)):
                self.replies[msg.id] = msg
                continue
            self.commands.append(msg)
            if isinstance(msg, (s.StartJob, s.AdoptJob)):
                self.attempts[msg.job] = msg.attempt
            if self.auto_ack:
                self.send(s.reply_ok(msg))

    def request(self, msg: s.Message, timeout_s: float = 5.0) -> s.Message:
        """Send and wait for the reply with the same id."""
        self.send(msg)
        deadline = time.monotonic() + timeout_s
        while msg.id not in self.replies:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no reply to {msg.TYPE}")
            self.pump(0.05)
        return self.replies.pop(msg.id)

    def register(self, jobs=()) -> s.Message:
        # as a real agent's defaults: its gang members reachable on loopback
        return self.request(s.Register(node=self.node, gpus=self.gpus, jobs=list(jobs),
                                       address="127.0.0.1", ports=s.PortRange(47000, 47999)))

    def heartbeat(self, jobs=()) -> s.Message:
        return self.request(s.Heartbeat(
            node=self.node, gpus=[s.GpuTelemetry(g.index, 0.5, 100.0) for g in self.gpus],
            jobs=list(jobs)))

    def wait_command(self, kind: type, job: str | None = None, timeout_s: float = 5.0):
        """The first received command of this type (for this job), waiting for it."""
        deadline = time.monotonic() + timeout_s
        while True:
            for i, c in enumerate(self.commands):
                if isinstance(c, kind) and (job is None or getattr(c, "job", None) == job):
                    return self.commands.pop(i)
            if time.monotonic() > deadline:
                got = [type(c).__name__ for c in self.commands]
                raise TimeoutError(f"{self.node}: no {kind.__name__} for {job} (have {got})")
            self.pump(0.05)

    def event(self, job: str, event: str, **fields) -> s.Message:
        return self.request(s.JobEvent(node=self.node, job=job, attempt=self.attempts[job],
                                       event={"event": event, "time": time.time(), **fields}))

    def exit(self, job: str, code: int, reason: str = "") -> s.Message:
        return self.request(s.JobExit(node=self.node, job=job, attempt=self.attempts[job],
                                      exit_code=code, reason=reason))

    def sample(self, job: str, step_time: float = 0.1, peak_mb: float = 2000.0,
               cpu_util: float = 1.0, exit: bool = True) -> None:
        """Report a sampling record as the real runner writes it (see ``sample_event``),
        then the sample-only exit."""
        self.event(job, "sample", **sample_event(step_time, peak_mb, cpu_util))
        if exit:
            self.exit(job, 75, "sampled")


def sample_event(step_time: float = 0.1, peak_mb: float = 2000.0, cpu_util: float = 1.0,
                 remaining_steps: int = 10, step: int = 7) -> dict:
    """The fields of a real runner's ``sample`` event (runner protocol ``EVENTS``),
    taken at global step ``step`` (its warm-up and sampled steps from step 0)."""
    return dict(warmup_steps=2, sampled_steps=5, step=step, step_time_mean_s=step_time,
                step_time_std_s=0.0, images_per_sec=10.0, peak_memory_mb=peak_mb,
                memory_source="process_rss_peak",
                predicted_remaining_s=remaining_steps * step_time,
                predicted_total_s=(remaining_steps + 7) * step_time,
                window_start=time.time() - 5 * step_time, cpu_util=cpu_util,
                cpu_wait_s=0.0, cpu_run_s=5 * step_time, cluster_runnable=0.0)
