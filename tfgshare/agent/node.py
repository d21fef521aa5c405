"""The node agent: offers a node's GPUs to the coordinator and runs its jobs there.

``tfgshare agent --coordinator tcp://HOST:5555`` discovers the GPUs (NVML, or the
``--virtual-gpus`` where there is no driver), registers, and then in one loop:
carries out the coordinator's commands (start / suspend / cancel / adopt / kill),
forwards each runner's events (progress paced if set: ``tfgshare.agent.pacer``) and exit,
and sends heartbeats with telemetry.

Checkpoints live in a shared directory: the coordinator names each job's
``train_dir`` under its checkpoint root, the same path on every node, so a job
resumed elsewhere restores from it. If the coordinator forgets the agent (a
restart), the agent registers again and reports the runners it still has, so
they are adopted; the exits it could not deliver are resent.

Fencing: if the coordinator goes silent for ``FENCE_SHARE`` (one half) of the
node timeout it announced at registration, the agent kills its runners, well
before the coordinator declares the node lost and starts their jobs elsewhere,
then reconnects. The margin (the other half of the node timeout) covers a
runner's kill and a slow clock; should a runner outlive it anyway (a stalled
node), its checkpoints are fenced too: each attempt writes under its own epoch
and cannot replace a newer attempt's (see ``tfgshare.runner.checkpoint``).

A job whose GPUs span nodes arrives as one ``StartJob`` per node with its
``gang`` part (worker index, parameter server and worker addresses); the agent
adds those runner flags (``runner.replicas``) and otherwise runs, suspends and
reports it as any job. ``--gang-address`` is where the other nodes reach this
node's members, ``--gang-ports`` the ports they may listen on (told to the
coordinator at registration, which picks one per member).

Paths from the wire are confined: a job's train dir must resolve (symlinks
followed) to a folder under the checkpoint root the coordinator named at
registration, and its dataset dir to a folder under one of the data roots
(``--data-root``, repeatable; default: the shared data folder, see
``tfgshare.paths.shared_dir``, and the checkpoint root). Anything else is refused.

This module owns the ``Agent`` and ``main``; ``AgentConfig`` and its defaults live in
``tfgshare.agent.config``, the command line's flags in ``tfgshare.agent.options``, and
both are re-exported here. May import what the ``tfgshare.agent`` package allows.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import zmq

from tfgshare import keys, paths, schema
from tfgshare.agent import gpus as gpus_mod
# the settings and the command line sit beside this module; re-exported here, where
# callers have always found them
from tfgshare.agent.config import (  # noqa: F401  (re-exported)
    DEFAULT_GANG_PORTS, FENCE_SHARE, AgentConfig, default_spares)
from tfgshare.agent.options import build_parser, default_gang_address, gang_ports
from tfgshare.agent.pacer import ProgressPacer
from tfgshare.agent.supervisor import SPARE_WAIT_S, EventOut, ExitOut, Supervisor  # noqa: F401
from tfgshare.paths import confine   # the rule the coordinator checks at submit too

log = logging.getLogger("tfgshare.agent")

# runner events that change the coordinator's view; resent if not acknowledged
_KEY_EVENTS = frozenset({"started", "sample", "checkpoint", "suspended", "finished", "error",
                         "out_of_memory"})
# the code of the error reply to a command whose handler raised this (any other: internal)
_CODES = {KeyError: schema.ErrorCode.NOT_FOUND, ValueError: schema.ErrorCode.INVALID}


class Agent:
    """One node's agent; ``run`` loops until stopped, ``step`` does one round."""

    def __init__(self, cfg: AgentConfig, gpu_source, supervisor: Supervisor | None = None,
                 context: zmq.Context | None = None) -> None:
        self.cfg = cfg
        self.gpus = gpu_source
        self.sup = supervisor or Supervisor(
            Path(cfg.work_dir), threads=cfg.threads, suspend_timeout_s=cfg.suspend_timeout_s,
            runner_flags=["--intra_op_threads", str(cfg.threads),
                          "--inter_op_threads", str(cfg.threads)],
            warm=cfg.warm_runner and not cfg.runner_cmd,
            spares=cfg.spare_runners if cfg.spare_runners is not None
            else default_spares(len(getattr(gpu_source, "gpus", ()) or ())),
            spare_wait_s=cfg.spare_wait_s)
        if cfg.runner_cmd:
            self.sup.runner_cmd = list(cfg.runner_cmd)
        self.ctx = context or zmq.Context.instance()
        self.sock: zmq.Socket | None = None
        self.registered = False
        self.register_id: str | None = None
        self.heartbeat_s = cfg.heartbeat_s or 2.0
        self.node_timeout: float | None = None         # the coordinator's, from registration
        self.checkpoint_root: str | None = None
        self.unacked: dict[str, schema.Message] = {}   # id -> job_exit / key job_event
        self.quiet: set[str] = set()                   # runners killed on request: no exit report
        self.pacer: ProgressPacer[EventOut] = ProgressPacer(cfg.progress_every_s)
        self.fatal: str | None = None
        self._last_register = 0.0
        self._last_heartbeat = 0.0
        self._last_heard = time.monotonic()
        self._connect()

    # ---- the loop ----------------------------------------------------------

    def run(self, should_stop=lambda: False) -> int:
        """Serve until ``should_stop()`` or a fatal refusal; then suspend runners."""
        try:
            while not should_stop() and self.fatal is None:
                self.step(timeout_ms=50)
        finally:
            self.shutdown()
        if self.fatal:
            log.error("%s", self.fatal)
            return 1
        return 0

    def step(self, timeout_ms: int = 50) -> None:
        """Handle incoming messages, runner output and timers once."""
        now = time.monotonic()
        if not self.registered and now - self._last_register >= self.cfg.register_retry_s:
            self._register()
        if self.handshake.failed():
            self.fatal = (f"secure handshake with the coordinator at {self.cfg.coordinator} "
                          "failed: it needs this agent's CurveZMQ key (--key, TFGSHARE_KEY), "
                          "or the coordinator key (--server-key) is not its own")
            return
        if self.sock.poll(timeout_ms, zmq.POLLIN):
            while True:
                try:
                    frame = self.sock.recv(zmq.NOBLOCK)
                except zmq.Again:
                    break
                self._handle(frame)
        self._forward_runners()
        now = time.monotonic()
        for out, held_s in self.pacer.due(now):
            self._send_event(out, held_s)
        if self.registered and now - self._last_heartbeat >= self.heartbeat_s:
            self._heartbeat()
        if self.registered and now - self._last_heard > self.lost_after_s():
            self._fence(now - self._last_heard)
            self._connect()

    def lost_after_s(self) -> float:
        """Seconds of coordinator silence after which this agent kills its runners."""
        if self.cfg.lost_after_s:
            return self.cfg.lost_after_s
        if self.node_timeout:
            return FENCE_SHARE * self.node_timeout
        return max(5.0, 2 * self.heartbeat_s)   # an older coordinator that names no timeout

    def _fence(self, silent_s: float) -> None:
        """Kill every runner: by now the coordinator may have resumed their jobs elsewhere."""
        log.warning("coordinator silent for %.0fs; killing %d runner(s) and reconnecting",
                    silent_s, len(self.sup.runners))
        for job in list(self.sup.runners):
            proc = self.sup.kill(job, f"killed: coordinator silent for {silent_s:.0f}s, so "
                                      "the job may run elsewhere now")
            proc.popen.wait(timeout=10)
        self._forward(self.sup.poll())     # exits, sent once registered again

    def shutdown(self, timeout_s: float = 20.0) -> None:
        """Suspend every runner to its checkpoint, report the exits, close the socket."""
        if self.sup.runners:
            log.info("stopping: suspending %d runner(s)", len(self.sup.runners))
            self._forward(self.sup.stop_all(timeout_s))
            end = time.monotonic() + 2.0    # give the coordinator a moment to hear the exits
            while self.unacked and self.registered and time.monotonic() < end:
                if self.sock.poll(50, zmq.POLLIN):
                    self._handle(self.sock.recv())
        if self.sock is not None:
            self.handshake.close()
            self.sock.close(linger=200)
            self.sock = None
        self.gpus.close()

    # ---- coordinator link --------------------------------------------------

    def _connect(self) -> None:
        if self.sock is not None:
            self.handshake.close()
            self.sock.close(linger=0)
        sock = self.ctx.socket(zmq.DEALER)
        self.handshake = keys.HandshakeWatch(sock, patience=5)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, schema.MAX_MESSAGE_BYTES)
        sock.setsockopt(zmq.RECONNECT_IVL, 200)
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, 2000)
        keys.secure_client(sock, keys.client_files(self.cfg.key, self.cfg.server_key))
        sock.connect(self.cfg.coordinator)
        self.sock = sock
        self.registered = False
        self._last_register = 0.0
        self._last_heard = time.monotonic()

    def _send(self, msg: schema.Message) -> bool:
        try:
            self.sock.send(schema.encode(msg), zmq.NOBLOCK)
            return True
        except zmq.Again:        # queue full while the coordinator is away
            return False

    def _register(self) -> None:
        jobs = [schema.RunningJob(job=p.job, pid=p.pid, step=p.step, attempt=p.attempt)
                for p in self.sup.runners.values() if p.job not in self.quiet]
        gpus = [schema.GpuInfo(index=g.index, name=g.name, memory_mb=g.memory_mb,
                               virtual=g.virtual) for g in self.gpus.gpus]
        ports = self.cfg.gang_ports
        # the data roots it accepts dataset dirs under (the checkpoint root, named by the
        # coordinator's reply, too when no --data-root is given): checked at submit
        msg = schema.Register(node=self.cfg.node, gpus=gpus, jobs=jobs,
                              address=self.cfg.gang_address if ports else "",
                              ports=schema.PortRange(*ports) if ports else None,
                              data_roots=[str(r) for r in paths.data_roots(
                                  self.cfg.data_roots, None)],
                              data_in_checkpoint_root=self.cfg.data_roots is None)
        self.register_id = msg.id
        self._last_register = time.monotonic()
        self._send(msg)

    def _heartbeat(self) -> None:
        self._last_heartbeat = time.monotonic()
        runners = [p for p in self.sup.runners.values() if p.job not in self.quiet]
        tel = self.gpus.read({p.pid: p.gpu_indices for p in runners})
        # a virtual GPU's fragment is enforced here (a real GPU's by TensorFlow itself)
        self._forward(self.sup.enforce_memory(tel.process_memory_mb))
        msg = schema.Heartbeat(
            node=self.cfg.node,
            gpus=[schema.GpuTelemetry(index=r.index, util=r.util,
                                      memory_used_mb=r.memory_used_mb) for r in tel.gpus],
            jobs=[schema.JobTelemetry(job=p.job, step=p.step,
                                      gpu_memory_mb=tel.process_memory_mb.get(p.pid, {}))
                  for p in runners])
        self._send(msg)

    def _handle(self, frame: bytes) -> None:
        self._last_heard = time.monotonic()
        try:
            msg = schema.decode(frame)
        except schema.SchemaError as exc:
            log.warning("dropped a bad message from the coordinator: %s", exc)
            return
        if isinstance(msg, (schema.Ok, schema.Error)):
            self._on_reply(msg)
            return
        handler = {schema.StartJob: self._start, schema.SuspendJob: self._suspend,
                   schema.CancelJob: self._cancel, schema.AdoptJob: self._adopt,
                   schema.KillJob: self._kill}.get(type(msg))
        if handler is None:
            self._send(schema.reply_error(msg, f"an agent does not serve {msg.TYPE!r}",
                                          code=schema.ErrorCode.UNSUPPORTED))
            return
        try:
            reply = handler(msg) or schema.reply_ok(msg)
        except (ValueError, KeyError, OSError) as exc:
            reply = schema.reply_error(msg, str(exc).strip("'\""),
                                       code=_CODES.get(type(exc), schema.ErrorCode.INTERNAL))
        self._send(reply)

    def _on_reply(self, msg: schema.Ok | schema.Error) -> None:
        if msg.id == self.register_id:
            if isinstance(msg, schema.Error):
                if msg.code in (schema.ErrorCode.UNKNOWN_KEY, schema.ErrorCode.FORBIDDEN):
                    self.fatal = f"coordinator refused registration: {msg.reason}"
                else:
                    log.warning("registration refused: %s (retrying)", msg.reason)
                return
            self._registered(msg.fields)
            return
        sent = self.unacked.pop(msg.id, None)
        if isinstance(msg, schema.Error):
            if msg.code is schema.ErrorCode.NOT_REGISTERED:   # the coordinator forgot us: re-join
                if sent is not None:
                    self.unacked[msg.id] = sent
                if self.registered:
                    log.info("coordinator does not know this node (%s); registering", msg.reason)
                self.registered = False
            elif sent is not None:
                log.info("coordinator refused %s for %s: %s", sent.TYPE,
                         getattr(sent, "job", "?"), msg.reason)

    def _registered(self, fields: dict) -> None:
        self.registered = True
        self._last_heartbeat = 0.0
        if self.cfg.heartbeat_s is None and isinstance(fields.get("heartbeat_s"), (int, float)):
            self.heartbeat_s = max(0.05, float(fields["heartbeat_s"]))
        self.checkpoint_root = fields.get("checkpoint_root")
        timeout = fields.get("node_timeout")
        if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout > 0:
            self.node_timeout = float(timeout)
        if self.checkpoint_root and not os.access(
                paths.existing_parent(self.checkpoint_root), os.W_OK):
            log.warning("checkpoint root %s is not writable from this node: mount the "
                        "shared checkpoint directory here", self.checkpoint_root)
        log.info("registered as %s with %d GPU(s); heartbeat %.1fs", self.cfg.node,
                 len(self.gpus.gpus), self.heartbeat_s)
        for msg in list(self.unacked.values()):   # what the coordinator may have missed
            self._send(msg)

    # ---- commands ----------------------------------------------------------

    def _start(self, msg: schema.StartJob):
        current = self.sup.runners.get(msg.job)
        if current is not None and current.attempt == msg.attempt:
            return None                                   # a resent command: already running
        if current is not None and current.stopping == "kill":
            current.popen.wait(timeout=10)
            self._forward(self.sup.poll())
        by_index = {g.index: g for g in self.gpus.gpus}
        for frag in msg.fragments:
            if frag.gpu_index not in by_index:
                raise ValueError(f"job {msg.job}: GPU {frag.gpu_index} is not on node "
                                 f"{self.cfg.node} (it has {sorted(by_index)})")
        virtual = any(by_index[f.gpu_index].virtual for f in msg.fragments)
        if not self.checkpoint_root:
            raise ValueError(f"job {msg.job}: the coordinator named no checkpoint root")
        train_dir = confine(msg.train_dir, [Path(self.checkpoint_root)], "train dir")
        if msg.spec.dataset_dir is not None:
            confine(msg.spec.dataset_dir, self.data_roots(), "dataset dir")
        train_dir.mkdir(parents=True, exist_ok=True)
        args = msg.spec.runner_args()
        if msg.gang is not None:   # this node's worker of a job that spans nodes
            args += msg.gang.runner_args()
        proc = self.sup.start(msg.job, msg.attempt, args, str(train_dir),
                              [(f.gpu_index, f.fraction) for f in msg.fragments],
                              virtual=virtual, sample_only=msg.sample_only,
                              cores=self._cores([f.gpu_index for f in msg.fragments])
                              if virtual else None,
                              limits_mb={f.gpu_index: f.fraction * by_index[f.gpu_index].memory_mb
                                         for f in msg.fragments} if virtual else None)
        self.quiet.discard(msg.job)
        log.info("started %s attempt %d on GPU(s) %s (pid %d)%s", msg.job, msg.attempt,
                 ",".join(str(i) for i in proc.gpu_indices), proc.pid,
                 f" as gang worker {msg.gang.task}" if msg.gang is not None else "")
        return schema.reply_ok(msg, pid=proc.pid)

    def _cores(self, indices: list[int]) -> tuple[int, ...] | None:
        """The CPU cores of these virtual GPUs (None: not pinned)."""
        cores_of = getattr(self.gpus, "cores_of", None)
        return cores_of(indices) if cores_of is not None else None

    def data_roots(self) -> list[Path]:
        """The folders a job's dataset dir may be under."""
        return paths.data_roots(self.cfg.data_roots, self.checkpoint_root)

    def _runner(self, job: str, attempt: int):
        proc = self.sup.runners.get(job)
        if proc is None or proc.job in self.quiet:
            raise KeyError(f"no runner for job {job} on node {self.cfg.node}")
        if proc.attempt != attempt:
            raise ValueError(f"job {job} runs attempt {proc.attempt} here, not {attempt}")
        return proc

    def _suspend(self, msg: schema.SuspendJob):
        self._runner(msg.job, msg.attempt)
        self.sup.suspend(msg.job)

    def _cancel(self, msg: schema.CancelJob):
        self._runner(msg.job, msg.attempt)
        self.sup.cancel(msg.job)

    def _adopt(self, msg: schema.AdoptJob):
        proc = self.sup.runners.get(msg.job)
        if proc is None or proc.job in self.quiet:
            raise KeyError(f"no runner for job {msg.job} on node {self.cfg.node}")
        proc.attempt = msg.attempt

    def _kill(self, msg: schema.KillJob):
        if msg.job in self.sup.runners:
            self.quiet.add(msg.job)
            self.sup.kill(msg.job)

    # ---- runner output -----------------------------------------------------

    def _forward_runners(self) -> None:
        self._forward(self.sup.poll())

    def _forward(self, outs) -> None:
        now = time.monotonic()
        for out in outs:
            job = out.runner.job
            key = job   # one runner a job on a node at a time
            if job in self.quiet:
                if isinstance(out, ExitOut):
                    self.quiet.discard(job)
                    self.pacer.forget(key)
                continue
            if isinstance(out, EventOut) and out.event.get("event") == "progress":
                beside = self.pacer.every_s > 0 and self._beside_sampling(out.runner)
                if self.pacer.offer(key, out, now, beside):   # (no scan when unpaced)
                    self._send_event(out)
                continue
            held = self.pacer.flush(key, now)   # a job's events keep their order
            if held is not None:
                self._send_event(*held)
            if isinstance(out, EventOut):
                self._send_event(out)
                continue
            self.pacer.forget(key)
            msg = schema.JobExit(node=self.cfg.node, job=job, attempt=out.runner.attempt,
                                 exit_code=out.exit_code, reason=out.reason)
            self.unacked[msg.id] = msg
            log.info("%s attempt %d exited %d: %s", job, out.runner.attempt,
                     out.exit_code, out.reason)
            if self.registered:
                self._send(msg)

    def _send_event(self, out: EventOut, held_s: float = 0.0) -> None:
        """Send one runner event (a key one kept until acknowledged)."""
        msg = schema.JobEvent(node=self.cfg.node, job=out.runner.job,
                              attempt=out.runner.attempt, event=out.event, held_s=held_s)
        if out.event.get("event") in _KEY_EVENTS:
            self.unacked[msg.id] = msg
        if self.registered:
            self._send(msg)

    def _beside_sampling(self, runner) -> bool:
        """Whether a sampling run shares one of this runner's GPUs (the coordinator
        then measures this job's step time from its every report)."""
        mine = set(runner.gpu_indices)
        return any(p.sample_only and p is not runner and mine.intersection(p.gpu_indices)
                   for p in self.sup.runners.values())


def main(argv: list[str] | None = None) -> int:
    """Run the agent until SIGTERM/SIGINT; then suspend its runners and exit."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format=f"%(asctime)s agent {args.node}: %(message)s", stream=sys.stderr)
    if not args.coordinator.startswith(("tcp://", "ipc://")):
        print(f"tfgshare agent: error: --coordinator {args.coordinator!r} must look like "
              "tcp://HOST:PORT", file=sys.stderr)
        return 2
    if args.heartbeat is not None and args.heartbeat <= 0:
        print("tfgshare agent: error: --heartbeat must be > 0", file=sys.stderr)
        return 2
    if args.threads < 1:
        print("tfgshare agent: error: --threads must be >= 1", file=sys.stderr)
        return 2
    if args.spare_runners is not None and args.spare_runners < 0:
        print("tfgshare agent: error: --spare-runners must be >= 0", file=sys.stderr)
        return 2
    if not args.spare_wait >= 0:
        print("tfgshare agent: error: --spare-wait must be >= 0 seconds", file=sys.stderr)
        return 2
    try:
        ports = gang_ports(args.gang_ports)
    except ValueError as exc:
        print(f"tfgshare agent: error: {exc}", file=sys.stderr)
        return 2
    try:
        source, note = gpus_mod.discover(args.virtual_gpus, args.force_virtual)
    except (gpus_mod.GpuSpecError, RuntimeError) as exc:
        print(f"tfgshare agent: error: {exc}", file=sys.stderr)
        return 2
    work_dir = args.work_dir or Path(tempfile.gettempdir()) / f"tfgshare-agent-{args.node}"
    work_dir.mkdir(parents=True, exist_ok=True)
    log.info("%s; work dir %s; coordinator %s", note, work_dir, args.coordinator)
    probe = zmq.Context.instance().socket(zmq.DEALER)
    try:
        keys.secure_client(probe, keys.client_files(args.key, args.server_key))
    except keys.KeysError as exc:
        print(f"tfgshare agent: error: {exc}", file=sys.stderr)
        return 2
    finally:
        probe.close(0)
    cfg = AgentConfig(coordinator=args.coordinator, node=args.node, work_dir=work_dir,
                      heartbeat_s=args.heartbeat, threads=args.threads,
                      suspend_timeout_s=args.suspend_timeout,
                      runner_cmd=args.runner.split() if args.runner else None,
                      data_roots=args.data_root, key=args.key, server_key=args.server_key,
                      warm_runner=args.warm_runner and args.spare_runners != 0,
                      spare_runners=args.spare_runners or None, gang_ports=ports,
                      spare_wait_s=args.spare_wait,
                      gang_address=args.gang_address or default_gang_address(args.coordinator))
    stop: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: stop.append(signum))
    return Agent(cfg, source).run(should_stop=lambda: bool(stop))
