"""The ZeroMQ coordinator: admits jobs, runs the policy, drives the node agents.

One ROUTER socket, one event loop. Each turn it reads the
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

The ``Coordinator`` owns the socket, the loop, authentication and the dispatch
table; it composes the parts, which never call it back: the ``Lifecycle`` owns
all state and every job's moves (``lifecycle``), ``AgentHandlers`` and
``ClientHandlers`` answer the requests on it (``agents``, ``clients``), and
``Rounds`` asks the policy and carries its actions out through it (``rounds``).
May import every coordinator module and ``tfgshare.keys``; none imports this one.
"""

from __future__ import annotations

import gc
import logging
import os
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import zmq
from zmq.auth.thread import ThreadAuthenticator

from tfgshare import keys as keys_mod
from tfgshare import schema as s
from tfgshare.coordinator.agents import AgentHandlers
from tfgshare.coordinator.clients import ClientHandlers
from tfgshare.coordinator.config import CoordinatorConfig, config_from_args
from tfgshare.coordinator.errors import RequestError
from tfgshare.coordinator.heap import HeapTrim
from tfgshare.coordinator.lifecycle import Lifecycle
from tfgshare.coordinator.logs import BadFrames, TurnHandler, flush_logs, log
from tfgshare.coordinator.rounds import Rounds
from tfgshare.policies.base import Policy


# While a policy round is out on its worker thread, the loop (which shares the
# interpreter with it) handles frames in slices of ROUND_SLICE_S, looking every
# ROUND_CHECK_EVERY frames for the round's answer, and after each slice waits for the
# answer so that it holds at most ROUND_LOOP_SHARE of the time: the round's length is
# its own CPU, not the frames that came meanwhile (they wait in the socket, read in the
# loop's share and after the round). Before, a round's answer waited for a turn of up to
# ``max_batch`` frames and the two threads took turns: at 10,000 GPUs, round p99 304 ms
# for 74 ms of the policy's CPU (docs/benchmarks.md, the coordinator at scale).
ROUND_SLICE_S = 0.002
ROUND_CHECK_EVERY = 16
ROUND_LOOP_SHARE = 0.25


class Coordinator:
    """The cluster's brain; ``serve`` runs its event loop.

    It owns the socket, the loop, authentication and the dispatch table. The
    state and the job moves belong to ``life`` (the ``Lifecycle``), the answers to
    ``agents`` and ``clients`` (the handlers), the policy rounds to ``rounds``.
    """

    def __init__(self, config: CoordinatorConfig, policy: Policy | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.clock = clock
        if policy is None:
            from tfgshare.policies.registry import get_policy
            policy = get_policy(config.policy, **config.policy_params)
        checkpoint_root = Path(config.checkpoint_root or
                               Path(config.state).parent / "checkpoints").absolute()
        heartbeat_s = config.heartbeat_s or max(0.1, config.node_timeout / 4)
        self.keys_dir = Path(config.keys_dir or keys_mod.keys_dir_for(config.state))
        self.registry: keys_mod.Registry | None = None   # None: authentication off
        if keys_mod.initialised(self.keys_dir):
            self.registry = keys_mod.Registry(self.keys_dir)
        elif not keys_mod.is_loopback(config.bind):
            raise ValueError(f"binding {config.bind} (not loopback) needs CurveZMQ keys: run "
                             f"`tfgshare keys --keys-dir {self.keys_dir} init` and add users "
                             "and agents (see README)")
        self.metrics_token: str | None = None   # bearer token scrapes need (off loopback)
        if config.metrics_port is not None and not keys_mod.is_loopback(
                f"tcp://{config.metrics_host}:0"):
            self.metrics_token = keys_mod.metrics_token(self.keys_dir)
            if self.metrics_token is None:
                raise ValueError(
                    f"serving metrics on {config.metrics_host} (not loopback) needs a bearer "
                    f"token: run `tfgshare keys --keys-dir {self.keys_dir} init` (it writes "
                    f"{self.keys_dir / keys_mod.METRICS_TOKEN})")
        self.life = Lifecycle(config, clock, policy, checkpoint_root)
        self.rounds = Rounds(self.life)
        self.agents = AgentHandlers(self.life, heartbeat_s)
        self.clients = ClientHandlers(self.life, self.rounds)
        # what answers each request, by its message type (commands and replies aside)
        self.handlers: dict[str, Callable[[bytes, Any, keys_mod.Identity | None], Any]] = {
            **self.agents.handlers(), **self.clients.handlers()}
        self.bad_frames = BadFrames(self.life.metrics.bad_frames)   # a line per reason per 10 s
        self.heap = HeapTrim()                # freed memory back to the system once a minute
        # the messages handled, a counter per type (each shows, at 0 until one comes)
        self._handled = {kind: self.life.metrics.messages.labels(kind) for kind in s.MESSAGES}
        self.endpoint: str | None = None
        self.ready = threading.Event()
        self._out: list[tuple[list[bytes], s.Message]] = []   # this turn's replies, commands
        # when the loop last found its socket empty: every message sent before then has
        # been read (None: no loop, as in tests that tick by hand)
        self.caught_up_at: float | None = None

    # the lifecycle's state, as tests and tools read it
    cluster = property(lambda self: self.life.cluster)
    store = property(lambda self: self.life.store)
    metrics = property(lambda self: self.life.metrics)
    peers = property(lambda self: self.life.peers)
    pending = property(lambda self: self.life.outbox.pending)
    gangs = property(lambda self: self.life.gangs.by_job)
    gang_ports = property(lambda self: self.life.gangs.ports)

    @property
    def policy(self) -> Policy:
        """The policy the rounds ask (a test may swap it before the first round)."""
        return self.life.policy

    @policy.setter
    def policy(self, policy: Policy) -> None:
        self.life.policy = policy

    def schedule(self, now: float) -> list:
        """One scheduling round, all in this thread (``Rounds.schedule``)."""
        return self.rounds.schedule(now)

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
                port = self.life.metrics.serve(self.config.metrics_port, host, self.metrics_token)
                log.info("metrics on http://%s:%d/metrics%s", host, port,
                         " (bearer token: %s)" % (self.keys_dir / keys_mod.METRICS_TOKEN)
                         if self.metrics_token else " (loopback: no token)")
            log.info("listening on %s (policy %s, state %s, checkpoints %s)", self.endpoint,
                     self.policy.name, self.config.state, self.life.checkpoint_root)
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
            self.life.metrics.close()
            if auth is not None:
                auth.stop()
            ctx.term()
            if not self.life.close():
                log.error("stopped with %d writes the state database refused (%s): they are "
                          "lost", self.life.store.pending, self.life.store.error)
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
        answered = zmq.Poller()           # the wake pipe alone: a round's answer
        answered.register(wake_r, zmq.POLLIN)
        in_flight: Future | None = None
        pause = 0.0                       # seconds the loop leaves to the round in flight
        next_tick = next_round = self.clock()
        try:
            while not stop.is_set():
                if in_flight is not None and pause > 0:
                    answered.poll(pause * 1000)   # returns as soon as the round is decided
                pause = 0.0
                now = self.clock()
                wait = 0.2                    # a round in flight wakes the poll when decided
                if in_flight is None:
                    wait = next_tick - now
                    if self.life.dirty:
                        wait = min(wait, next_round - now)
                if not poller.poll(min(max(wait, 0.0), 0.2) * 1000):
                    self.caught_up_at = self.clock()
                else:
                    keyed = self.registry is not None
                    t0 = time.perf_counter()
                    for n in range(self.config.max_batch):
                        if in_flight is not None and n % ROUND_CHECK_EVERY == 0 and n:
                            # a round is out: take its answer at once, and after a slice
                            # of frames give it the interpreter (the loop keeps a share)
                            spent = time.perf_counter() - t0
                            if in_flight.done() or spent > ROUND_SLICE_S:
                                pause = spent * (1 - ROUND_LOOP_SHARE) / ROUND_LOOP_SHARE
                                break
                        try:
                            frames = sock.recv_multipart(zmq.NOBLOCK, copy=not keyed)
                        except zmq.Again:
                            self.caught_up_at = self.clock()
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
                    _guarded(self.rounds.apply, plan)
                    self._flush(sock)
                    # under a stream of events, rounds are spaced by their own length
                    times = self.rounds.round_times
                    last = times[-1] if len(times) else 0.0
                    next_round = self.clock() + max(self.config.round_gap, last)
                if in_flight is None and self.life.dirty and now >= next_round:
                    plan = self.rounds.plan(now)
                    if plan is not None:
                        in_flight = worker.submit(self.rounds.decide, plan)
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
        self.life.commit()
        self._out.extend(self.life.outbox.take_commands())

    def tick(self, now: float) -> None:
        """Periodic work: lost nodes, jobs nobody re-adopted, metrics, a policy round."""
        if self.registry is not None:
            self.registry.refresh()          # keys added or revoked since
        # silence is counted up to when the loop had read all it was sent: a backlog
        # here is not a node's silence (a node still gets at most twice its timeout)
        heard = now if self.caught_up_at is None else max(
            min(now, self.caught_up_at), now - self.config.node_timeout)
        self.life.check_timeouts(now, heard)
        self.life.dirty = True
        self.bad_frames.log.flush()
        self.life.record_usage(now)
        # Long-lived jobs and views would make every full garbage collection walk
        # them all (tens of ms at 10,000 jobs, right inside a round): collect the
        # young generations and move the survivors out of the collector's sight.
        gc.collect(1)
        gc.freeze()
        self.heap.maybe()

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
        try:
            msg = s.decode(data)
        except s.SchemaError as exc:
            self._out.append((envelope, self.bad_frames.refuse(
                peer, data, exc.problem.value, str(exc), exc.code)))
            return
        kind = msg.TYPE
        self._handled[kind].inc()
        if kind in s.REPLY_TYPES:
            if caller is None or caller.role == "agent":
                self.agents.on_reply(peer, msg)
            return
        if kind in s.COMMAND_TYPES:
            reply: s.Message = s.reply_error(msg, f"{kind} is a command the coordinator sends to "
                                             "agents, not a request", code=s.ErrorCode.UNSUPPORTED)
        elif caller is not None and (kind in _AGENT_SENDS) != (caller.role == "agent"):
            article = "an" if caller.role in ("admin", "agent") else "a"   # a user
            reply = s.reply_error(msg, f"{article} {caller.role} key ({caller.name}) may not "
                                       f"send {kind!r}", code=s.ErrorCode.FORBIDDEN)
        elif kind in s.AGENT_TYPES and peer not in self.life.peers:
            reply = s.reply_error(
                msg, f"unauthenticated type {kind!r}: this peer has not registered as an agent",
                code=s.ErrorCode.NOT_REGISTERED)
        else:
            try:
                fields = self.handlers[kind](peer, msg, caller)
                reply = s.reply_ok(msg, **(fields or {}))
            except RequestError as exc:
                reply = s.reply_error(msg, str(exc), code=exc.code)
            except Exception as exc:   # keep serving whatever one request does
                log.exception("internal error on %s", kind)
                reply = s.reply_error(msg, f"internal error: {exc}", code=s.ErrorCode.INTERNAL)
        self._out.append((envelope, reply))


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
