"""A load generator that sends the coordinator exactly what real node agents send.

``SimAgents`` plays many node agents (``tfgshare.agent.node.Agent``) in one process,
one DEALER socket each on one poller, and their runners, without TensorFlow:

- it registers every node with its GPUs, then heartbeats each node at the period
  the coordinator hands out in its Register reply (``heartbeat_s``), the first beat
  at a random point of that period (agents start at different times), each with the
  agent's fields: per-GPU telemetry for every GPU (utilisation, memory used) and
  per-job telemetry (step, memory per GPU index) for every runner on the node;
- it answers each command as the agent does (``ok``, with the runner's pid for a
  start; a cancel's runner exits -9, a kill's quietly) and plays each runner's
  events as ``tfgshare.runner`` writes them, with the fields of ``runner_wire.EVENTS``:
  ``started`` after the runner's start, ``start_phases`` after the first step,
  ``progress`` every ``LOG_EVERY`` steps (the runner's default
  ``--log_every_n_steps``), passed on as the agent does (paced if ``progress_every_s``),
  a ``sample`` after the warm-up and sampled steps of a
  job's first run and the checkpoint after it, a periodic checkpoint every
  ``SAVE_EVERY_S``, and at the end ``finished`` (at the job's
  ``max_number_of_steps``) or ``stop_phases`` and ``suspended`` (asked to suspend,
  or a sampling run ended), each after its final checkpoint, then the exit;
- a runner steps every ``step_s`` seconds times the runners on the most shared of its
  GPUs (a shared GPU's throughput is split, so a GPU's runners report progress at
  about one runner's rate), reckoned again at each of its events; a resumed job goes
  on from the step its last run saved.

``pump`` handles the waiting commands and then whatever is due by the clock
(heartbeats and runner events), so every caller that pumps keeps the agents alive.
It records each heartbeat's lag: from its send to the coordinator's reply, which
the coordinator sends once the heartbeat is handled and its turn committed.
"""

from __future__ import annotations

import heapq
import itertools
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import zmq

from tfgshare import keys, paths
from tfgshare import schema as s
from tfgshare.agent.config import DEFAULT_GANG_PORTS
from tfgshare.agent.pacer import PROGRESS_EVERY_S, ProgressPacer

LOG_EVERY = 10             # the runner's --log_every_n_steps default
SAVE_EVERY_S = 600.0       # the runner's --save_interval_secs default
WARMUP, SAMPLED = 5, 20    # steps a job's first run warms up and samples (the sample event's)
START_S = 1.0              # a warm runner's start to its "started" event
SAVE_S = 0.5               # one checkpoint save
GPU_MB = 16384


def sample_event(job: str, step: int = WARMUP + SAMPLED) -> dict:
    """A sample event with the real runner's fields (runner protocol ``EVENTS``), taken
    at global step ``step``."""
    return {"event": "sample", "time": time.time(), "step": step, "warmup_steps": WARMUP,
            "sampled_steps": SAMPLED, "step_time_mean_s": 0.2, "step_time_std_s": 0.01,
            "images_per_sec": 160.0, "peak_memory_mb": peak_mb(job),
            "memory_source": "gpu_allocator_peak", "predicted_remaining_s": 200.0,
            "predicted_total_s": 205.0, "window_start": time.time() - 4.0, "cpu_util": 0.3,
            "cpu_wait_s": 0.0, "cpu_run_s": 1.2,
            "cluster_runnable": 0.0}


def peak_mb(job: str) -> float:
    """The job's measured peak memory, MiB (3,000 to 6,900, fixed by its id)."""
    return 3000.0 + 100 * (sum(job.encode()) % 40)


@dataclass
class Runner:
    """One simulated runner: a job's attempt on some GPUs of one node."""

    node: str
    job: str
    attempt: int
    fractions: dict[int, float]        # GPU index -> its fraction of that GPU
    total: int                         # the job's max_number_of_steps
    step0: int                         # the step it started from (restored)
    samples: bool                      # its first run: samples after the warm-up
    sample_only: bool
    pid: int
    step: int = 0                      # the step of its last event ...
    at: float = 0.0                    # ... which came at this time
    step_s: float = 0.0                # its step time since then
    next_step: int = 0                 # the step of its next event
    saved_at: float = 0.0              # its last checkpoint's time
    phase: str = "start"               # start -> first -> train
    token: int = 0                     # its current timer (older ones are stale)

    def steps_at(self, now: float) -> int:
        """The step it has reached by ``now``."""
        if self.phase != "train":
            return self.step
        return min(self.total, self.step + max(0, int((now - self.at) / self.step_s)))

    def memory_mb(self) -> dict[int, float]:
        """Its real GPU memory per GPU index, within each fragment."""
        peak = peak_mb(self.job)
        return {i: min(peak, 0.95 * f * GPU_MB) for i, f in self.fractions.items()}


@dataclass
class Lags:
    """Heartbeat lags (send to reply, seconds) and counts since the last ``take``."""

    sent: int = 0
    answered: int = 0
    seconds: list[float] = field(default_factory=list)

    def take(self) -> list[float]:
        """The lags recorded since the last call."""
        out, self.seconds = self.seconds, []
        return out


class SimAgents:
    """Many fake node agents on one poller: they ack commands and play the runners."""

    def __init__(self, address: str, nodes: int, gpus_per_node: int,
                 keys_dir: Path | None = None, virtual: bool = True, step_s: float = 0.2,
                 seed: int = 1, progress_every_s: float = PROGRESS_EVERY_S) -> None:
        """``keys_dir``: a keys folder with an agent key per node (``nodeNNNN``): CurveZMQ.
        ``virtual``: offer virtual GPUs (else real ones, named as NVML names a V100).
        ``progress_every_s``: the agents' progress pacing (``AgentConfig.progress_every_s``)."""
        self.ctx = zmq.Context()
        self.ctx.set(zmq.MAX_SOCKETS, nodes + 64)        # libzmq's default is 1,023
        self.sent = 0                                    # messages sent to the coordinator
        self.sent_by_type: dict[str, int] = {}
        self.events_by_name: dict[str, int] = {}         # job events sent, by runner event
        self.poller = zmq.Poller()
        self.socks: dict[str, zmq.Socket] = {}
        self.by_sock: dict[zmq.Socket, str] = {}
        self.runners: dict[str, Runner] = {}             # job -> its runner
        self.by_node: dict[str, dict[str, Runner]] = {}  # node -> job -> its runner
        self.tenants: dict[tuple[str, int], int] = {}    # (node, GPU) -> runners on it
        self.saved: dict[str, int] = {}                  # job -> step of its last checkpoint
        self.sampled: set[str] = set()                   # jobs whose sample file exists
        self.gpus = gpus_per_node
        self.virtual = virtual
        self.step_s = step_s
        self.heartbeat_s: float | None = None            # told by the coordinator
        self.lags = Lags()
        self.errors: dict[str, int] = {}                 # error replies by code
        self._rejoining: set[str] = set()                # nodes registering again
        self.finished = 0                                # runners that reached their last step
        self._beats: dict[str, float] = {}               # heartbeat id -> send time
        self._timers: list[tuple[float, int, str, object, int]] = []
        self._seq = itertools.count()
        self._rng = random.Random(seed)
        self.pacer: ProgressPacer[tuple[Runner, dict]] = ProgressPacer(progress_every_s)
        self._pid = itertools.count(10_000)
        for n in range(nodes):
            name = f"node{n:04d}"
            sock = self.ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.SNDHWM, 0)
            sock.setsockopt(zmq.RCVHWM, 0)
            if keys_dir is not None:
                issued = keys_dir / "issued" / name
                keys.secure_client(sock, (issued / f"{name}.key_secret",
                                          issued / "coordinator.key"))
            sock.connect(address)
            self.socks[name] = sock
            self.by_node[name] = {}
            self.by_sock[sock] = name
            self.poller.register(sock, zmq.POLLIN)

    def register(self) -> None:
        """Register every node; then each heartbeats at the period the coordinator told."""
        for node in self.socks:
            self._rejoin(node)
        waiting = set(self.socks)
        deadline = time.monotonic() + 180   # CurveZMQ handshakes on a loaded machine
        while waiting and time.monotonic() < deadline:
            for sock, _ in self.poller.poll(100):
                msg = s.decode(sock.recv())
                node = self.by_sock[sock]
                if isinstance(msg, s.Ok) and "heartbeat_s" in msg.fields:
                    waiting.discard(node)
                    self._rejoining.discard(node)
                    self.heartbeat_s = float(msg.fields["heartbeat_s"])
                    self._at(time.monotonic() + self._rng.uniform(0, self.heartbeat_s),
                             "beat", node)
                else:
                    self._on(node, sock, msg)
        if waiting:
            raise RuntimeError(f"{len(waiting)} agents did not register")

    def pump(self, timeout_ms: int = 0, limit: int = 5000) -> int:
        """Handle waiting commands, then what is due; return how many commands."""
        n = 0
        for sock, _ in self.poller.poll(timeout_ms):
            node = self.by_sock[sock]
            while n < limit:
                try:
                    data = sock.recv(zmq.NOBLOCK)
                except zmq.Again:
                    break
                self._on(node, sock, s.decode(data))
                n += 1
        self.run_due(time.monotonic())
        return n

    def run_due(self, now: float) -> None:
        """Send the heartbeats and runner events due by ``now``."""
        for (r, event), held_s in self.pacer.due(time.monotonic()):   # the agent's clock
            self._send_event(r, event, held_s)
        timers = self._timers
        while timers and timers[0][0] <= now:
            due, _, kind, obj, token = heapq.heappop(timers)
            if kind == "beat":
                self.heartbeat(obj, now)
                self._at(due + self.heartbeat_s, "beat", obj)
            elif obj.token == token and self.runners.get(obj.job) is obj:
                self._advance(obj, due) if kind == "run" else self._stop(obj, due)

    def _rejoin(self, node: str) -> None:
        """Register (again, as an agent the coordinator forgot does) with its runners."""
        name = "virtual" if self.virtual else "Tesla V100-SXM2-16GB"
        gpus = [s.GpuInfo(i, name, GPU_MB, self.virtual) for i in range(self.gpus)]
        jobs = [s.RunningJob(r.job, r.pid, r.step, r.attempt)
                for r in self.by_node[node].values()]
        self._rejoining.add(node)
        self._send(self.socks[node], s.Register(
            node=node, gpus=gpus, jobs=jobs, address="127.0.0.1",
            ports=s.PortRange(*DEFAULT_GANG_PORTS), data_in_checkpoint_root=True,
            data_roots=[str(r) for r in paths.data_roots(None, None)]))

    def _at(self, due: float, kind: str, obj, token: int = 0) -> None:
        heapq.heappush(self._timers, (due, next(self._seq), kind, obj, token))

    # ---- commands --------------------------------------------------------------

    def _on(self, node: str, sock: zmq.Socket, msg: s.Message) -> None:
        if isinstance(msg, (s.Ok, s.Error)):
            sent = self._beats.pop(msg.id, None)
            if sent is not None:
                self.lags.answered += 1
                self.lags.seconds.append(time.monotonic() - sent)
            if isinstance(msg, s.Error):
                self.errors[msg.code.value] = self.errors.get(msg.code.value, 0) + 1
                if msg.code is s.ErrorCode.NOT_REGISTERED and node not in self._rejoining:
                    self._rejoin(node)
            elif "heartbeat_s" in msg.fields:
                self._rejoining.discard(node)
            return
        if isinstance(msg, s.StartJob):
            self._start(node, msg)
            self._send(sock, s.reply_ok(msg, pid=self.runners[msg.job].pid))
            return
        self._send(sock, s.reply_ok(msg))
        runner = self.runners.get(getattr(msg, "job", ""))
        if runner is None or runner.node != node:
            return
        if isinstance(msg, s.SuspendJob):      # after the step in flight and a save
            runner.token += 1
            self._at(time.monotonic() + (runner.step_s or self.step_s) + SAVE_S, "stop",
                     runner, runner.token)
        elif isinstance(msg, s.CancelJob):     # SIGKILL: no events, exit -9
            self._exit(runner, -9)
        elif isinstance(msg, s.KillJob):       # killed quietly: nothing reported
            self._drop(runner)
        elif isinstance(msg, s.AdoptJob):
            runner.attempt = msg.attempt

    def _start(self, node: str, msg: s.StartJob) -> None:
        now = time.monotonic()
        step0 = self.saved.get(msg.job, 0)
        runner = Runner(node=node, job=msg.job, attempt=msg.attempt,
                        fractions={f.gpu_index: f.fraction for f in msg.fragments},
                        total=msg.spec.max_number_of_steps or 1000, step0=step0,
                        samples=msg.job not in self.sampled, sample_only=msg.sample_only,
                        pid=next(self._pid), step=step0, saved_at=now)
        self.runners[msg.job] = self.by_node[node][msg.job] = runner
        for i in runner.fractions:
            self.tenants[node, i] = self.tenants.get((node, i), 0) + 1
        self._at(now + START_S, "run", runner)

    # ---- runners ---------------------------------------------------------------

    def _event(self, r: Runner, name: str, **fields) -> None:
        """One runner event, forwarded as the agent does (its progress paced)."""
        now, key = time.monotonic(), r.job
        event = {"event": name, "time": time.time(), **fields}
        if name == "progress":
            beside = any(o.sample_only and o is not r and o.fractions.keys() & r.fractions.keys()
                         for o in self.by_node[r.node].values())
            if self.pacer.offer(key, (r, event), now, beside):
                self._send_event(r, event)
            return
        held = self.pacer.flush(key, now)   # a job's events keep their order
        if held is not None:
            self._send_event(*held[0], held_s=held[1])
        self._send_event(r, event)

    def _send_event(self, r: Runner, event: dict, held_s: float = 0.0) -> None:
        self.events_by_name[event["event"]] = self.events_by_name.get(event["event"], 0) + 1
        self._send(self.socks[r.node], s.JobEvent(node=r.node, job=r.job, attempt=r.attempt,
                                                  event=event, held_s=held_s))

    def _advance(self, r: Runner, now: float) -> None:
        """The runner's next milestone: its start, first step, a logged step, its sample."""
        if r.phase == "start":
            first = sorted(r.fractions)[0]
            self._event(r, "started", global_step=r.step0, restored=r.step0 > 0,
                        device=f"/gpu:{first}", memory_fraction=r.fractions[first])
            r.phase, r.next_step = "first", r.step0 + 1
        else:
            r.step, r.at = r.next_step, now
            if r.phase == "first":
                self._event(r, "start_phases", start_s=START_S, graph_s=0.3,
                            graph_source="imported" if r.step0 else "built",
                            restore_s=0.2 if r.step0 else 0.0,
                            restored_from=f"ckpt-{r.step0}" if r.step0 else None,
                            first_step_s=r.step_s, init_s=0.0 if r.step0 else 0.1,
                            input_s=0.0 if r.step0 else 0.05, runner_wait_s=0.0)
                r.phase = "train"
            if r.samples and r.step - r.step0 == WARMUP + SAMPLED:
                self._event(r, "sample", **{k: v for k, v in sample_event(r.job, r.step).items()
                                            if k != "event"})
                self.sampled.add(r.job)
                if r.sample_only:           # the run ends with its sample, saved
                    self._stop(r, now)
                    return
                self._save(r, now)
            if r.step % LOG_EVERY == 0 or r.step == r.total:
                self._event(r, "progress", step=r.step, loss=2.0, step_time_s=r.step_s,
                            images_per_sec=32 / r.step_s,
                            predicted_remaining_s=(r.total - r.step) * r.step_s)
            if r.step >= r.total:
                self._save(r, now)
                self._event(r, "finished", step=r.step, loss=2.0)
                self.finished += 1
                self._exit(r, 0)
                return
            if now - r.saved_at >= SAVE_EVERY_S:
                self._save(r, now)
            r.next_step = min((r.step // LOG_EVERY + 1) * LOG_EVERY, r.total)
            if r.samples and r.step - r.step0 < WARMUP + SAMPLED:
                r.next_step = min(r.next_step, r.step0 + WARMUP + SAMPLED)
        r.at = now
        r.step_s = self.step_s * max(self.tenants[r.node, i] for i in r.fractions)
        self._at(now + (r.next_step - r.step) * r.step_s, "run", r, r.token)

    def _save(self, r: Runner, now: float) -> None:
        if self.saved.get(r.job) != r.step:
            self._event(r, "checkpoint", step=r.step, path=f"ckpt-{r.step}", seconds=SAVE_S,
                        size_mb=90.0)
        self.saved[r.job] = r.step
        r.saved_at = now

    def _stop(self, r: Runner, now: float) -> None:
        """Suspended (asked, or its sampling ended): its final save, then exit 75."""
        r.step = r.steps_at(now)
        self._save(r, now)
        self._event(r, "stop_phases", stop_wait_s=r.step_s, save_s=SAVE_S)
        self._event(r, "suspended", step=r.step)
        self._exit(r, 75)

    def _drop(self, r: Runner) -> None:
        self.pacer.forget(r.job)
        del self.runners[r.job]
        del self.by_node[r.node][r.job]
        for i in r.fractions:
            self.tenants[r.node, i] -= 1

    def _exit(self, r: Runner, code: int) -> None:
        held = self.pacer.flush(r.job, time.monotonic())
        if held is not None:
            self._send_event(*held[0], held_s=held[1])
        self._drop(r)
        self._send(self.socks[r.node], s.JobExit(node=r.node, job=r.job, attempt=r.attempt,
                                                 exit_code=code))

    def finish_one(self, rng: random.Random) -> bool:
        """A random training runner reaches its last step now; False if none trains."""
        training = [r for r in self.runners.values() if not r.sample_only and r.phase == "train"]
        if not training:
            return False
        r = rng.choice(training)
        now = time.monotonic()
        r.total = r.next_step = max(r.steps_at(now), r.step + 1)
        r.token += 1
        self._advance(r, now)
        return True

    def heartbeat(self, node: str, now: float | None = None) -> None:
        """The agent's heartbeat: every GPU's telemetry and every runner's (its steps as
        of ``now``, default: the clock's now)."""
        sent = time.monotonic()
        now = sent if now is None else now
        mine = self.by_node[node].values()
        used = dict.fromkeys(range(self.gpus), 0.0)
        busy = dict.fromkeys(range(self.gpus), 0)
        jobs = []
        for r in mine:
            memory = r.memory_mb()
            for i, mb in memory.items():
                used[i] += mb
                busy[i] += 1
            jobs.append(s.JobTelemetry(r.job, r.steps_at(now), memory))
        msg = s.Heartbeat(node=node, jobs=jobs, gpus=[
            s.GpuTelemetry(i, min(1.0, 0.45 * busy[i]), used[i]) for i in range(self.gpus)])
        self._beats[msg.id] = sent
        self.lags.sent += 1
        self._send(self.socks[node], msg)

    def _send(self, sock: zmq.Socket, msg: s.Message) -> None:
        sock.send(s.encode(msg))
        self.sent += 1
        self.sent_by_type[msg.TYPE] = self.sent_by_type.get(msg.TYPE, 0) + 1

    def close(self) -> None:
        for sock in self.socks.values():
            sock.close(0)
        self.ctx.term()
