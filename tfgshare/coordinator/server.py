"""The ZeroMQ coordinator: admits jobs, runs the policy, drives the node agents.

One ROUTER socket, one event loop that owns all state. Each turn it reads the
waiting frames, handles them (``self.handlers``: a handler per request type),
commits the database and only then sends the replies: whatever anyone hears is
already on disk. If anything that can change a decision happened (or the
policy tick came), it hands the policy an immutable snapshot on a worker
thread and keeps serving; then the loop carries out the actions that still
hold, commits, and sends the agent commands: a slow policy delays decisions,
not answers.

Checkpoints live in a shared directory (``--checkpoint-root``, sent to agents as
they register): a job's train_dir is ``<root>/<job id>`` on every node. Authentication (``tfgshare.keys``): whenever the keys directory holds a
coordinator key, or the coordinator binds anything but loopback, the socket is
a CurveZMQ server. Any key finishes the handshake (an unknown one is told so);
user and admin keys may send client requests, agent keys only the agent protocol
for the node of their name; a user acts only on its own jobs, an admin on all. A
loopback-only coordinator without keys (the demo) runs open and says so.

On start, jobs that were running are "unknown" until their agent reports them
(re-adopted) or the node timeout passes (re-queued from their checkpoint).
"""

from __future__ import annotations

import gc
import logging
import os
import sys
import threading
import time
from array import array
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import zmq
from zmq.auth.thread import ThreadAuthenticator

from tfgshare import keys as keys_mod
from tfgshare import schema as s
from tfgshare.coordinator.agents import AgentProtocol
from tfgshare.coordinator.clients import ClientApi
from tfgshare.coordinator.cluster import Cluster, LiveJob, Node
from tfgshare.coordinator.config import CoordinatorConfig, config_from_args
from tfgshare.coordinator.errors import REPLIED, RequestError
from tfgshare.coordinator.exporter import (CoordinatorMetrics, job_record, prediction_error,
                                           report_fields, stored_report)
from tfgshare.coordinator.gangs import Gang, GangControl, PortBook
from tfgshare.coordinator.logs import BadFrames, TurnHandler, flush_logs, log
from tfgshare.coordinator.rounds import Rounds
from tfgshare.coordinator.store import StateStore
from tfgshare.coordinator.transitions import Transitions
from tfgshare.policies.base import JobState, Policy


class Coordinator(AgentProtocol, ClientApi, Transitions, GangControl, Rounds):
    """The cluster's brain; ``serve`` runs its event loop."""

    def __init__(self, config: CoordinatorConfig, policy: Policy | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.clock = clock
        if policy is None:
            from tfgshare.policies.registry import get_policy
            policy = get_policy(config.policy, **config.policy_params)
        self.policy = policy
        # what the policy carries between rounds; ours to keep, used only by the policy worker
        self.policy_memo = policy.new_memo()
        self.checkpoint_root = Path(config.checkpoint_root or
                                    Path(config.state).parent / "checkpoints").absolute()
        self.heartbeat_s = config.heartbeat_s or max(0.1, config.node_timeout / 4)
        self.keys_dir = Path(config.keys_dir or keys_mod.keys_dir_for(config.state))
        self.registry: keys_mod.Registry | None = None   # None: authentication off
        if keys_mod.initialised(self.keys_dir):
            self.registry = keys_mod.Registry(self.keys_dir)
        elif not keys_mod.is_loopback(config.bind):
            raise ValueError(f"binding {config.bind} (not loopback) needs CurveZMQ keys: run "
                             f"`tfgshare keys --keys-dir {self.keys_dir} init` and add users "
                             "and agents (see README)")
        self._caller: keys_mod.Identity | None = None    # who sent the frame in hand
        self.metrics_token: str | None = None   # bearer token scrapes need (off loopback)
        if config.metrics_port is not None and not keys_mod.is_loopback(
                f"tcp://{config.metrics_host}:0"):
            self.metrics_token = keys_mod.metrics_token(self.keys_dir)
            if self.metrics_token is None:
                raise ValueError(
                    f"serving metrics on {config.metrics_host} (not loopback) needs a bearer "
                    f"token: run `tfgshare keys --keys-dir {self.keys_dir} init` (it writes "
                    f"{self.keys_dir / keys_mod.METRICS_TOKEN})")
        self.store = StateStore(config.state)
        self._db_refused_at: float | None = None   # when a commit was last refused and said
        self.cluster = Cluster(config.reserve_mb)
        self.metrics = CoordinatorMetrics()
        self.bad_frames = BadFrames(self.metrics.bad_frames)   # a line per reason per 10 s
        self.peers: dict[bytes, str] = {}            # agent routing id -> node name
        # command id -> (job, attempt, type, node), until the agent answers
        self.pending: dict[str, tuple[str, int, str, str]] = {}
        self.endpoint: str | None = None
        self.ready = threading.Event()
        self.round_times = array("d")                # seconds per scheduling round
        self.decide_times = array("d")               # ... of which in policy.decide
        self.decide_cpu_times = array("d")           # CPU seconds of policy.decide
        # the rest of each round: snapshot and views, the wait for the loop to take the
        # policy's answer, carrying it out, the loop's other CPU meanwhile, and the CPU
        # of both threads over the round (seconds)
        self.round_parts = {k: array("d") for k in ("plan", "wait", "apply", "loop_cpu", "cpu")}
        self.refusals: dict[str, int] = {}           # policy actions refused, by reason
        self.gangs: dict[str, Gang] = {}             # jobs across nodes: their members
        self.gang_ports = PortBook()
        self._out: list[tuple[list[bytes], s.Message]] = []
        self._cmds: list[tuple[list[bytes], s.Message]] = []
        self._logs: list[tuple[str, float, str]] = []
        self._dirty = True                           # a scheduling round is due
        # what answers each request, by its message type (commands and replies aside)
        self.handlers: dict[str, Callable[[bytes, Any], Any]] = {
            s.Register.TYPE: self._on_register, s.Heartbeat.TYPE: self._on_heartbeat,
            s.JobEvent.TYPE: self._on_job_event, s.JobExit.TYPE: self._on_job_exit,
            s.Submit.TYPE: self._on_submit, s.Status.TYPE: self._on_status,
            s.Nodes.TYPE: self._on_nodes, s.Logs.TYPE: self._on_logs,
            s.CancelRequest.TYPE: self._on_cancel, s.SuspendRequest.TYPE: self._on_suspend,
            s.ResumeRequest.TYPE: self._on_resume, s.MigrateRequest.TYPE: self._on_migrate,
            s.MetricsRequest.TYPE: self._on_metrics}
        self._last_submit = 0.0
        self._stamp_second, self._stamp = -1, ""
        self.started_at = clock()
        self._load()

    # ---- start-up ------------------------------------------------------------

    def _load(self) -> None:
        for name, rec in self.store.load_nodes().items():
            gpus = {g["index"]: s.GpuInfo(**g) for g in rec["gpus"]}
            self.cluster.nodes[name] = Node(name, gpus, lost=True)
        unknown = 0
        for rec in self.store.load_jobs(active_only=True):
            try:
                job = LiveJob.from_record(rec)
            except (ValueError, TypeError) as exc:   # e.g. runner flags refused since
                log.warning("job %s not loaded: its stored spec is not valid now: %s",
                            rec.get("id"), exc)
                continue
            if job.state.holds_gpu:
                job.unknown = True
                unknown += 1
            self.cluster.add(job)
            self._last_submit = max(self._last_submit, job.submit_time)
        # done jobs stay in the database: counted, their latest prediction errors kept
        stored = self.store.count_jobs()
        done = sum(stored.get(st.value, 0) for st in JobState if st.done)
        if done and self.store.count_done() < done:   # figures an older version did not keep
            for seq, _state, data, report in self.store.done_reports():
                try:
                    rec = stored_report(data, report, self.clock())
                except (ValueError, TypeError):   # an older row whose spec is not valid now
                    continue
                self.store.save_done(seq, report_fields(rec), prediction_error(rec))
        for st in JobState:
            if st.done and stored.get(st.value):
                self.cluster.counts[st.value] = (self.cluster.counts.get(st.value, 0)
                                                 + stored[st.value])
        self.cluster.prediction_errors.extend(
            self.store.latest_prediction_errors(self.cluster.prediction_errors.maxlen))
        self._last_submit = max(self._last_submit, self.store.last_submit())
        self.seq = self.store.max_seq()
        self._restore_gangs()
        self._awaiting_readoption = unknown > 0
        for point in self.store.load_timeline():   # None: not recorded by an older version
            self.metrics.timeline.add(*(0.0 if v is None else v for v in point))
        if self.cluster.active or done:
            log.info("loaded %d jobs (%d active, %d running before the restart, now unknown; "
                     "%d done, left in the database) and %d nodes",
                     len(self.cluster.active) + done, len(self.cluster.active), unknown, done,
                     len(self.cluster.nodes))

    # ---- the event loop --------------------------------------------------------

    def serve(self, stop: threading.Event | None = None) -> None:
        """Bind and run the event loop until ``stop`` is set."""
        stop = stop or threading.Event()
        ctx = zmq.Context()
        auth = None
        sock = ctx.socket(zmq.ROUTER)
        if self.registry is not None:
            auth = ThreadAuthenticator(ctx)
            auth.start()
            auth.configure_curve(domain="*", location=zmq.auth.CURVE_ALLOW_ANY)
            sock.curve_publickey, sock.curve_secretkey = keys_mod.server_keys(self.keys_dir)
            sock.curve_server = True
        sock.setsockopt(zmq.MAXMSGSIZE, s.MAX_MESSAGE_BYTES)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 100_000)
        sock.setsockopt(zmq.RCVHWM, 100_000)
        try:
            sock.bind(self.config.bind)
            self.endpoint = sock.getsockopt(zmq.LAST_ENDPOINT).decode()
            if self.config.metrics_port is not None:
                host = self.config.metrics_host
                port = self.metrics.serve(self.config.metrics_port, host, self.metrics_token)
                log.info("metrics on http://%s:%d/metrics%s", host, port,
                         " (bearer token: %s)" % (self.keys_dir / keys_mod.METRICS_TOKEN)
                         if self.metrics_token else " (loopback: no token)")
            log.info("listening on %s (policy %s, state %s, checkpoints %s)", self.endpoint,
                     self.policy.name, self.config.state, self.checkpoint_root)
            if self.registry is None:
                log.warning("authentication OFF: loopback only and no keys in %s; anyone on "
                            "this host may submit, cancel or move any job", self.keys_dir)
            else:
                log.info("authentication on (CurveZMQ): %d registered keys in %s",
                         len(self.registry.by_key), self.keys_dir)
            self.ready.set()
            self._serve_loop(sock, stop)
        finally:
            self.ready.set()
            sock.close(0)
            self.metrics.close()
            if auth is not None:
                auth.stop()
            ctx.term()
            if not self.store.close():
                log.error("stopped with %d writes the state database refused (%s): they are "
                          "lost", self.store.pending, self.store.error)
            log.info("stopped")
            flush_logs()

    def _serve_loop(self, sock: zmq.Socket, stop: threading.Event) -> None:
        """The loop; a policy round runs on a worker thread while frames keep being served."""
        wake_r, wake_w = os.pipe()        # the worker writes a byte when a round is decided
        os.set_blocking(wake_r, False)
        worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="policy")
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(wake_r, zmq.POLLIN)
        in_flight: Future | None = None
        next_tick = next_round = self.clock()
        try:
            while not stop.is_set():
                now = self.clock()
                wait = 0.2                    # a round in flight wakes the poll when decided
                if in_flight is None:
                    wait = next_tick - now
                    if self._dirty:
                        wait = min(wait, next_round - now)
                if poller.poll(min(max(wait, 0.0), 0.2) * 1000):
                    keyed = self.registry is not None
                    for _ in range(self.config.max_batch):
                        try:
                            frames = sock.recv_multipart(zmq.NOBLOCK, copy=not keyed)
                        except zmq.Again:
                            break
                        if keyed:   # the sender's public key, checked by the ZAP handler
                            user = frames[-1].get("User-Id")
                            self.handle([f.bytes for f in frames[:-1]], frames[-1].bytes, user)
                        else:
                            self.handle(frames[:-1], frames[-1])
                now = self.clock()
                # the tick's work (gauges, a garbage collection) waits for the gap after
                # a round: on the policy's thread's time it would lengthen the round
                if now >= next_tick and in_flight is None:
                    next_tick = now + self.config.tick
                    _guarded(self.tick, now)
                self._flush(sock)            # replies go out before any round's commands
                if in_flight is not None and in_flight.done():
                    _drain(wake_r)
                    plan, in_flight = in_flight.result(), None
                    _guarded(self._apply, plan)
                    self._flush(sock)
                    # under a stream of events, rounds are spaced by their own length
                    last = self.round_times[-1] if len(self.round_times) else 0.0
                    next_round = self.clock() + max(self.config.round_gap, last)
                if in_flight is None and self._dirty and now >= next_round:
                    plan = self._plan(now)
                    if plan is not None:
                        in_flight = worker.submit(self._decide, plan)
                        in_flight.add_done_callback(lambda _f: os.write(wake_w, b"."))
        finally:
            worker.shutdown(wait=True)
            os.close(wake_r)
            os.close(wake_w)

    def _flush(self, sock: zmq.Socket) -> None:
        """Commit this turn's writes, then send its replies and agent commands."""
        self.step()
        for envelope, msg in self._out:
            sock.send_multipart([*envelope, s.encode(msg)])
        self._out.clear()
        flush_logs()

    def step(self) -> None:
        """Commit the database and queue the agent commands after the replies."""
        if self._logs:
            self.store.append_logs(self._logs)
            self._logs.clear()
        self._commit()
        self._out.extend(self._cmds)
        self._cmds.clear()

    def _commit(self) -> None:
        """Commit the database; while it refuses (a full disk), go on from memory and say so."""
        was_broken = self._db_refused_at is not None
        if self.store.commit():
            if was_broken:
                log.warning("the state database takes writes again; the kept writes are saved")
                self._db_refused_at = None
            return
        now = time.monotonic()
        if not was_broken or now - self._db_refused_at >= 30.0:
            log.error("the state database refused a commit (%s): the coordinator goes on from "
                      "memory with %d writes kept and retried each step; a restart now would "
                      "lose them", self.store.error, self.store.pending)
            self._db_refused_at = now

    def tick(self, now: float) -> None:
        """Periodic work: lost nodes, jobs nobody re-adopted, metrics, a policy round."""
        timeout = self.config.node_timeout
        if self.registry is not None:
            self.registry.refresh()          # keys added or revoked since
        for node in list(self.cluster.up_nodes()):
            if now - node.last_seen > timeout:
                self._node_lost(node, now, f"no heartbeat for {now - node.last_seen:.1f}s")
        if self._awaiting_readoption and now - self.started_at > timeout:
            self._awaiting_readoption = False
            for job in [j for j in self.cluster.active.values() if j.unknown]:
                job.unknown = False
                self._requeue(job, now, f"node {job.node} did not report it within "
                                        f"{timeout:g}s of the restart")
            self._gangs_not_readopted(now, f"not reported within {timeout:g}s of the restart")
        self._dirty = True
        self.bad_frames.log.flush()
        self._record_usage(now)
        # Long-lived jobs and views would make every full garbage collection walk
        # them all (tens of ms at 10,000 jobs, right inside a round): collect the
        # young generations and move the survivors out of the collector's sight.
        gc.collect(1)
        gc.freeze()

    def _record_usage(self, now: float) -> None:
        """Refresh the gauges and add a timeline point (once per tick: O(jobs))."""
        use, queued = self.metrics.update(self.cluster, now)
        timeline = self.metrics.timeline
        t = max(now, timeline.times[-1]) if len(timeline) else now
        point = (t, use.allocated, use.effective, queued, use.device, use.busy)
        timeline.add(*point)
        self.store.add_timeline(*point)

    # ---- frames ---------------------------------------------------------------

    def handle(self, envelope: list[bytes], data: bytes, user: str | None = None) -> None:
        """Handle one frame from a peer (``user``: its public key when keyed); queue the reply."""
        peer = envelope[0] if envelope else b""
        caller = None
        if self.registry is not None:
            caller = self.registry.get(user)
            if caller is None:
                self._out.append((envelope, self.bad_frames.refuse(
                    peer, data, "unknown_key", _UNKNOWN_KEY, s.ErrorCode.UNKNOWN_KEY)))
                return
        self._caller = caller
        try:
            msg = s.decode(data)
        except s.SchemaError as exc:
            self._out.append((envelope, self.bad_frames.refuse(
                peer, data, exc.problem.value, str(exc), exc.code)))
            return
        kind = msg.TYPE
        if kind in s.REPLY_TYPES:
            if caller is None or caller.role == "agent":
                self._on_reply(peer, msg)
            return
        if kind in s.COMMAND_TYPES:
            reply: s.Message = s.reply_error(msg, f"{kind} is a command the coordinator sends to "
                                             "agents, not a request", code=s.ErrorCode.UNSUPPORTED)
        elif caller is not None and (kind in _AGENT_SENDS) != (caller.role == "agent"):
            article = "an" if caller.role[0] in "aeiou" else "a"   # an admin, an agent
            reply = s.reply_error(msg, f"{article} {caller.role} key ({caller.name}) may not "
                                       f"send {kind!r}", code=s.ErrorCode.FORBIDDEN)
        elif kind in s.AGENT_TYPES and peer not in self.peers:
            reply = s.reply_error(
                msg, f"unauthenticated type {kind!r}: this peer has not registered as an agent",
                code=s.ErrorCode.NOT_REGISTERED)
        else:
            try:
                fields = self.handlers[kind](peer, msg)
                if fields is REPLIED:
                    return
                reply = s.reply_ok(msg, **(fields or {}))
            except RequestError as exc:
                reply = s.reply_error(msg, str(exc), code=exc.code)
            except Exception as exc:   # keep serving whatever one request does
                log.exception("internal error on %s", kind)
                reply = s.reply_error(msg, f"internal error: {exc}", code=s.ErrorCode.INTERNAL)
        self._out.append((envelope, reply))

    def _may_act_on(self, job: LiveJob) -> None:
        """Raise RequestError unless the caller owns ``job`` or is an admin (or keys are off)."""
        caller = self._caller
        if caller is not None and caller.role != "admin" and job.owner != caller.name:
            raise RequestError(f"not your job: {job.id} belongs to {job.owner or 'nobody'}",
                               s.ErrorCode.FORBIDDEN)

    def _log(self, job: LiveJob, now: float, line: str, decision: bool = True) -> None:
        second = int(now)
        if second != self._stamp_second:
            self._stamp_second = second
            self._stamp = time.strftime("%H:%M:%S", time.localtime(second))
        self._logs.append((job.id, now, f"{self._stamp}.{int(now * 1000) % 1000:03d} {line}"))
        if decision and log.isEnabledFor(logging.INFO):
            log.info("%s: %s", job.id, line)

    def _save(self, job: LiveJob) -> None:
        self.cluster.refresh(job)
        report = None
        if job.state.done:   # the report reads it from the database
            rec = job_record(job, self.clock())
            report = report_fields(rec)
            self.store.save_done(job.seq, report, prediction_error(rec))
        self.store.save_job(job.id, job.to_record(), report)

    def _job(self, job_id: str) -> LiveJob:
        """The job in memory, else as stored (a done job); RequestError if none."""
        job = self.cluster.jobs.get(job_id)
        if job is None:
            rec = self.store.load_job(job_id) if isinstance(job_id, str) else None
            if rec is None:
                raise RequestError(f"no job {job_id!r}", s.ErrorCode.NOT_FOUND)
            job = LiveJob.from_record(rec)
        return job

    def _send(self, node: Node, msg: s.Message, job: LiveJob | None = None) -> None:
        if node.identity is None:
            return
        if job is not None:
            self.pending[msg.id] = (job.id, job.attempt, msg.TYPE, node.name)
        self._cmds.append(([node.identity], msg))


_UNKNOWN_KEY = ("unknown key: this coordinator has no registered key for this client; ask "
                "its admin for one (tfgshare keys add-user / add-agent)")
_AGENT_SENDS = s.AGENT_TYPES | {"register"}


def _drain(fd: int) -> None:
    """Read whatever bytes wait on a non-blocking pipe."""
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass



def _guarded(step: Callable[[Any], Any], arg: Any) -> None:
    """Run one step of the loop; log a failure instead of stopping the loop."""
    try:
        step(arg)
    except Exception:
        log.exception("%s failed", step.__name__)


def tune_interpreter() -> None:
    """Set this process's GIL switch interval and garbage collection for a coordinator."""
    # The policy decides on a worker thread; a short GIL switch interval lets the
    # serving loop take the interpreter back within 0.5 ms instead of 5 ms per wake-up.
    sys.setswitchinterval(0.0005)
    # Nearly everything the coordinator allocates is freed by reference counting;
    # the collector's default (a young collection every 700 net allocations) ran
    # five times a policy round at 10,000 jobs (about 2 ms of a 25 ms round) and
    # found nothing. The tick collects once a second anyway (``tick``).
    gc.set_threshold(10_000, 10, 10)


def main(argv: list[str] | None = None) -> int:
    """Run the coordinator until SIGINT/SIGTERM."""
    import signal
    config = config_from_args(list(sys.argv[1:] if argv is None else argv))
    # block-buffered stderr, flushed at the end of every loop turn
    try:
        stream = open(sys.stderr.fileno(), "w", buffering=1 << 16, encoding="utf-8",
                      errors="replace", closefd=False)
    except (AttributeError, OSError, ValueError):   # stderr is not a file (captured)
        stream = sys.stderr
    handler = TurnHandler(stream)
    handler.setFormatter(logging.Formatter("%(asctime)s coordinator %(levelname)s %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    try:
        coord = Coordinator(config)
    except ValueError as exc:
        print(f"tfgshare coordinator: {exc}", file=sys.stderr)
        return 2
    tune_interpreter()
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        coord.serve(stop)
    except zmq.ZMQError as exc:
        print(f"tfgshare coordinator: cannot bind {config.bind}: {exc}", file=sys.stderr)
        return 1
    return 0
