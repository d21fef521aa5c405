"""The ZeroMQ coordinator: admits jobs, runs the policy, drives the node agents.

One ROUTER socket, one event loop that owns all state. Each turn it reads the
waiting frames, handles them (see ``tfgshare.schema`` for the messages),
commits the database and only then sends the replies: whatever anyone hears is
already on disk. If anything that can change a decision happened (or the
policy tick came), it hands the policy an immutable snapshot on a worker
thread and keeps serving; when the policy has decided, the loop carries out
the actions that still hold (the cluster may have moved on meanwhile),
commits, and sends the agent commands. So a slow policy delays decisions, not
answers. Under a stream of events rounds are spaced by their own length.

Checkpoints live in a shared directory (``--checkpoint-root``, like NFS on a
real cluster): a job's train_dir is ``<checkpoint_root>/<job id>`` on every
node, so a job suspended on one node resumes or migrates to another by
restoring from the same path. The root is sent to agents when they register.

On start the coordinator loads every job. Jobs that were running are
"unknown" until their agent re-registers and reports them (re-adopted) or the
node timeout passes (re-queued from their checkpoint as SUSPENDED).
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import sys
import threading
import time
from array import array
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import zmq

from tfgshare import runner_protocol as rp
from tfgshare import schema as s
from tfgshare.cluster import Cluster, LiveJob, Node, split_gpu_id
from tfgshare.coordinator_metrics import CoordinatorMetrics, run_report
from tfgshare.policies.base import (Fragment, JobState, Migrate, Policy, SampleRecord, Start,
                                    Suspend)
from tfgshare.policies.placement import fraction_for
from tfgshare.state import StateStore

log = logging.getLogger("tfgshare.coordinator")

DEFAULT_ADDRESS = "tcp://127.0.0.1:5555"


class RequestError(Exception):
    """A request the coordinator refuses; the text is the reason sent back."""


@dataclass
class CoordinatorConfig:
    """How a coordinator runs (the ``tfgshare coordinator`` flags)."""

    state: Path
    bind: str = DEFAULT_ADDRESS
    policy: str = "fgs"
    policy_params: dict[str, Any] = field(default_factory=dict)
    checkpoint_root: Path | None = None     # default: <dir of state>/checkpoints
    metrics_port: int | None = None         # None: no HTTP metrics; 0: a free port
    reserve_mb: float = 300.0
    node_timeout: float = 10.0
    tick: float = 1.0
    heartbeat_s: float | None = None        # told to agents; default node_timeout / 4
    token: str | None = None
    max_retries: int = 2                    # crashes before a job is marked failed
    max_batch: int = 2000                   # frames handled per loop turn
    round_gap: float = 0.005                # least seconds between event-driven rounds


class Coordinator:
    """The cluster's brain; ``serve`` runs its event loop."""

    def __init__(self, config: CoordinatorConfig, policy: Policy | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.clock = clock
        if policy is None:
            from tfgshare.policies.registry import get_policy
            policy = get_policy(config.policy, **config.policy_params)
        self.policy = policy
        self.checkpoint_root = Path(config.checkpoint_root or
                                    Path(config.state).parent / "checkpoints").absolute()
        self.heartbeat_s = config.heartbeat_s or max(0.1, config.node_timeout / 4)
        self.store = StateStore(config.state)
        self.cluster = Cluster(config.reserve_mb)
        self.metrics = CoordinatorMetrics()
        self.peers: dict[bytes, str] = {}            # agent routing id -> node name
        # command id -> (job, attempt, type, node), until the agent answers
        self.pending: dict[str, tuple[str, int, str, str]] = {}
        self.endpoint: str | None = None
        self.ready = threading.Event()
        self.round_times = array("d")                # seconds per scheduling round
        self.decide_times = array("d")               # ... of which in policy.decide
        self.decide_cpu_times = array("d")           # CPU seconds of policy.decide
        self._out: list[tuple[list[bytes], s.Message]] = []
        self._cmds: list[tuple[list[bytes], s.Message]] = []
        self._logs: list[tuple[str, float, str]] = []
        self._dirty = True                           # a scheduling round is due
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
        for rec in self.store.load_jobs():
            job = LiveJob.from_record(rec)
            if job.state.holds_gpu:
                job.unknown = True
                unknown += 1
            self.cluster.add(job)
            self._last_submit = max(self._last_submit, job.submit_time)
        self.seq = self.store.max_seq()
        self._awaiting_readoption = unknown > 0
        for point in self.store.load_timeline():
            self.metrics.timeline.add(*point)
        if self.cluster.jobs:
            log.info("loaded %d jobs (%d active, %d running before the restart, now unknown) "
                     "and %d nodes", len(self.cluster.jobs), len(self.cluster.active),
                     unknown, len(self.cluster.nodes))

    # ---- the event loop --------------------------------------------------------

    def serve(self, stop: threading.Event | None = None) -> None:
        """Bind and run the event loop until ``stop`` is set."""
        stop = stop or threading.Event()
        ctx = zmq.Context()
        sock = ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.MAXMSGSIZE, s.MAX_MESSAGE_BYTES)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 100_000)
        sock.setsockopt(zmq.RCVHWM, 100_000)
        try:
            sock.bind(self.config.bind)
            self.endpoint = sock.getsockopt(zmq.LAST_ENDPOINT).decode()
            if self.config.metrics_port is not None:
                port = self.metrics.serve(self.config.metrics_port)
                log.info("metrics on http://127.0.0.1:%d/metrics", port)
            log.info("listening on %s (policy %s, state %s, checkpoints %s)", self.endpoint,
                     getattr(self.policy, "name", "?"), self.config.state, self.checkpoint_root)
            self.ready.set()
            self._serve_loop(sock, stop)
        finally:
            self.ready.set()
            sock.close(0)
            ctx.term()
            self.store.close()
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
                wait = next_tick - now
                if self._dirty and in_flight is None:
                    wait = min(wait, next_round - now)
                if poller.poll(min(max(wait, 0.0), 0.2) * 1000):
                    for _ in range(self.config.max_batch):
                        try:
                            frames = sock.recv_multipart(zmq.NOBLOCK)
                        except zmq.Again:
                            break
                        self.handle(frames[:-1], frames[-1])
                now = self.clock()
                if now >= next_tick:
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
        self.store.commit()
        self._out.extend(self._cmds)
        self._cmds.clear()

    def tick(self, now: float) -> None:
        """Periodic work: lost nodes, jobs nobody re-adopted, metrics, a policy round."""
        timeout = self.config.node_timeout
        for node in list(self.cluster.up_nodes()):
            if now - node.last_seen > timeout:
                self._node_lost(node, now, f"no heartbeat for {now - node.last_seen:.1f}s")
        if self._awaiting_readoption and now - self.started_at > timeout:
            self._awaiting_readoption = False
            for job in [j for j in self.cluster.active.values() if j.unknown]:
                job.unknown = False
                self._requeue(job, now, f"node {job.node} did not report it within "
                                        f"{timeout:g}s of the restart")
        self._dirty = True
        self._record_usage(now)
        # Long-lived jobs and views would make every full garbage collection walk
        # them all (tens of ms at 10,000 jobs, right inside a round): collect the
        # young generations and move the survivors out of the collector's sight.
        gc.collect(1)
        gc.freeze()

    def _record_usage(self, now: float) -> None:
        """Refresh the gauges and add a timeline point (once per tick: O(jobs))."""
        alloc, eff, queued = self.metrics.update(self.cluster, now)
        timeline = self.metrics.timeline
        t = max(now, timeline.times[-1]) if len(timeline) else now
        timeline.add(t, alloc, eff, queued)
        self.store.add_timeline(t, alloc, eff, queued)

    # ---- frames ---------------------------------------------------------------

    def handle(self, envelope: list[bytes], data: bytes) -> None:
        """Handle one frame from a peer; queue the reply."""
        peer = envelope[0] if envelope else b""
        try:
            msg = s.decode(data)
        except s.SchemaError as exc:
            log.warning("bad frame from peer %s: %s", peer.hex(), exc)
            self._out.append((envelope, s.reply_error(_guess_id(data), str(exc))))
            return
        kind = msg.TYPE
        if kind in s.REPLY_TYPES:
            self._on_reply(peer, msg)
            return
        if kind in s.COMMAND_TYPES:
            reply: s.Message = s.reply_error(
                msg, f"{kind} is a command the coordinator sends to agents, not a request")
        elif kind in s.AGENT_TYPES and peer not in self.peers:
            reply = s.reply_error(
                msg, f"unauthenticated type {kind!r}: this peer has not registered as an agent")
        else:
            try:
                fields = getattr(self, "_on_" + kind)(peer, msg)
                if fields is _REPLIED:
                    return
                reply = s.reply_ok(msg, **(fields or {}))
            except RequestError as exc:
                reply = s.reply_error(msg, str(exc))
            except Exception as exc:   # keep serving whatever one request does
                log.exception("internal error on %s", kind)
                reply = s.reply_error(msg, f"internal error: {exc}")
        self._out.append((envelope, reply))

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
        self.store.save_job(job.id, job.to_record())

    def _job(self, job_id: str) -> LiveJob:
        job = self.cluster.jobs.get(job_id)
        if job is None:
            raise RequestError(f"no job {job_id!r}")
        return job

    def _send(self, node: Node, msg: s.Message, job: LiveJob | None = None) -> None:
        if node.identity is None:
            return
        if job is not None:
            self.pending[msg.id] = (job.id, job.attempt, msg.TYPE, node.name)
        self._cmds.append(([node.identity], msg))

    # ---- agent messages ------------------------------------------------------------

    def _on_register(self, peer: bytes, msg: s.Register) -> dict[str, Any]:
        if self.config.token is not None and msg.token != self.config.token:
            raise RequestError("register refused: wrong or missing token")
        if not msg.gpus:
            raise RequestError("register refused: the node offers no GPUs")
        indices = [g.index for g in msg.gpus]
        if len(set(indices)) != len(indices):
            raise RequestError(f"register refused: duplicate GPU indices {indices}")
        now = self.clock()
        node = self.cluster.nodes.get(msg.node)
        if node is not None and node.identity is not None and node.identity != peer:
            self.peers.pop(node.identity, None)
        gpus = {g.index: g for g in msg.gpus}
        if node is None:
            node = self.cluster.nodes[msg.node] = Node(msg.node, gpus)
        node.gpus, node.identity, node.last_seen, node.lost = gpus, peer, now, False
        self.peers[peer] = node.name
        self.cluster.nodes_changed()
        self.store.save_node(node.name, {"gpus": [vars(g) for g in msg.gpus]})
        log.info("node %s joined with %d GPUs (%s), reporting %d runners", node.name,
                 len(gpus), ", ".join(f"{g.index}:{g.name} {g.memory_mb} MiB" for g in msg.gpus),
                 len(msg.jobs))
        # reply first, then adoption outcomes
        self._out.append(([peer], s.reply_ok(msg, heartbeat_s=self.heartbeat_s,
                                             checkpoint_root=str(self.checkpoint_root))))
        reported = {}
        for rj in msg.jobs:
            job = self.cluster.active.get(rj.job)
            if (job is not None and job.node == node.name and job.state.holds_gpu
                    and (rj.attempt is None or rj.attempt == job.attempt)
                    and all(split_gpu_id(f.gpu)[1] in gpus for f in job.fragments)):
                reported[job.id] = rj
                job.unknown = False
                job.steps_done = max(job.steps_done, rj.step)
                self._log(job, now, f"re-adopted on {node.name} (pid {rj.pid}, "
                                    f"step {rj.step}, attempt {job.attempt})")
                self._send(node, s.AdoptJob(job=job.id, attempt=job.attempt), job)
                if job.cancel_requested:
                    self._send(node, s.CancelJob(job=job.id, attempt=job.attempt), job)
                elif job.state is JobState.SUSPENDING:
                    self._send(node, s.SuspendJob(job=job.id, attempt=job.attempt), job)
                self._save(job)
            else:
                log.info("node %s: runner of %s is not wanted here; asking to kill it",
                         node.name, rj.job)
                self._send(node, s.KillJob(job=rj.job))
        for job in [j for j in self.cluster.holders() if j.node == node.name]:
            if job.id not in reported:
                job.unknown = False
                self._requeue(job, now, f"node {node.name} re-registered without it")
        self._dirty = True
        return _REPLIED

    def _on_heartbeat(self, peer: bytes, msg: s.Heartbeat) -> dict[str, Any]:
        node = self._agent_node(peer, msg.node)
        now = self.clock()
        node.last_seen = now
        for g in msg.gpus:
            node.gpu_util[g.index] = g.util
            node.gpu_memory_used_mb[g.index] = g.memory_used_mb
        for jt in msg.jobs:
            job = self.cluster.active.get(jt.job)
            if job is None or job.node != node.name or not job.state.holds_gpu:
                continue
            if jt.step > job.steps_done:
                job.steps_done = jt.step
                self.cluster.refresh(job)
            job.gpu_memory_mb = dict(jt.gpu_memory_mb)
            if job.state is JobState.SAMPLING:
                self._note_solo_util(job, node)
            over = []
            for f in job.fragments:
                index = split_gpu_id(f.gpu)[1]
                used = jt.gpu_memory_mb.get(index)
                info = node.gpus.get(index)
                if used is not None and info is not None and used > f.fraction * info.memory_mb:
                    over.append(f"uses {used:.0f} MiB on {f.gpu}, its fragment is "
                                f"{f.fraction * info.memory_mb:.0f} MiB")
            text = "; ".join(over)
            if text != job.over_memory:
                job.over_memory = text
                self.cluster.refresh(job)
                self._log(job, now, f"memory over its fragment: {text}" if text
                          else "memory back within its fragment")
        return {}

    def _note_solo_util(self, job: LiveJob, node: Node) -> None:
        """Keep the GPU utilisation of a sampling job that has its GPUs to itself."""
        if self.cluster.co_tenants(job):
            return
        for f in job.fragments:
            util = node.gpu_util.get(split_gpu_id(f.gpu)[1])
            if util is not None:
                job.solo_util.append(util)

    def _agent_node(self, peer: bytes, name: str) -> Node:
        registered = self.peers[peer]
        if name != registered:
            raise RequestError(f"this agent registered as node {registered!r}, not {name!r}")
        return self.cluster.nodes[registered]

    def _current(self, peer: bytes, msg: s.JobEvent | s.JobExit) -> LiveJob | None:
        """The job a report is about, or None when the report is stale."""
        node = self._agent_node(peer, msg.node)
        job = self._job(msg.job)
        if (job.node != node.name or job.attempt != msg.attempt or not job.state.holds_gpu
                or job.unknown):
            log.info("ignored stale %s for %s attempt %d from %s (job is %s, attempt %d on %s)",
                     msg.TYPE, job.id, msg.attempt, node.name, job.display_state,
                     job.attempt, job.node)
            return None
        return job

    def _on_job_event(self, peer: bytes, msg: s.JobEvent) -> dict[str, Any]:
        job = self._current(peer, msg)
        if job is None:
            late = self._late(msg)
            if late is not None and msg.event.get("event") == "sample" and late.sample is None:
                self._record_sample(late, msg.event, self.clock())
                if late.state is JobState.QUEUED:
                    late.state = JobState.SAMPLED
                self._save(late)
                self._log(late, self.clock(), "sampling record arrived after it was re-queued")
                return {}
            return {"stale": True}
        now = self.clock()
        ev = msg.event
        name = ev.get("event", "?")
        details = " ".join(f"{k}={_short(v)}" for k, v in ev.items() if k not in ("event", "time"))
        self._log(job, now, f"{msg.node} #{msg.attempt} {name} {details}".rstrip(),
                  decision=name in ("started", "sample", "suspended", "finished", "error"))
        step = _number(ev, "global_step" if name == "started" else "step", int)
        if step is not None and name in ("started", "progress", "finished", "suspended",
                                         "checkpoint"):
            job.steps_done = step
        if name == "progress":
            left = _number(ev, "predicted_remaining_s", float)
            if left is not None:
                job.predicted_remaining_s = left
        elif name == "sample":
            self._record_sample(job, ev, now)
        elif name == "error":
            job.reason = str(ev.get("message", ""))
        self._save(job)
        return {}

    def _record_sample(self, job: LiveJob, ev: dict[str, Any], now: float) -> None:
        try:
            step_time = float(ev["step_time_mean_s"])
            peak = float(ev["peak_memory_mb"])
        except (KeyError, TypeError, ValueError):
            raise RequestError("sample event needs numeric step_time_mean_s and "
                               "peak_memory_mb") from None
        co = self.cluster.co_tenants(job)
        util = ev.get("gpu_util")
        if not isinstance(util, (int, float)) or isinstance(util, bool):
            # measured by the agent while the job sampled alone, else the safe guess
            seen = job.solo_util
            util = sum(seen) / len(seen) if seen else 1.0
        job.sample = SampleRecord(step_time_s=step_time, peak_memory_mb=peak, co_tenants=co,
                                  gpu_util=min(1.0, max(0.0, float(util))))
        remaining = ev.get("predicted_remaining_s")
        if remaining is None:
            remaining = max(0, job.spec.max_number_of_steps - job.steps_done) * step_time
        job.predicted_remaining_s = float(remaining)
        if job.predicted_total_s is None:
            job.predicted_total_s = float(remaining)
            job.run_at_prediction_s = job.run_time_s + (now - (job.last_start or now))

    def _late(self, msg: s.JobEvent | s.JobExit) -> LiveJob | None:
        """The job, if this report is from its last attempt and it has not restarted since.

        A runner can end while its node is away (or the coordinator is down): the
        job is re-queued, and the agent sends the report when it is back.
        """
        job = self.cluster.active.get(msg.job)
        if job is not None and job.attempt == msg.attempt and job.state.waiting:
            return job
        return None

    def _on_job_exit(self, peer: bytes, msg: s.JobExit) -> dict[str, Any]:
        job = self._current(peer, msg)
        if job is None:
            late = self._late(msg)
            if late is not None and msg.exit_code == rp.EXIT_OK:
                self._finish(late, JobState.FINISHED, self.clock(),
                             f"exit 0, reported after it was re-queued")
                return {}
            return {"stale": True}
        now = self.clock()
        code = msg.exit_code
        why = f"exit {code}" + (f" ({msg.reason})" if msg.reason else "")
        if job.move_started is not None:
            job.move_cost_s += now - job.move_started
            job.move_started = None
        if code == rp.EXIT_OK:
            self._finish(job, JobState.FINISHED, now, why)
        elif job.cancel_requested:
            self._finish(job, JobState.CANCELLED, now, f"cancelled, runner {why}")
        elif code == rp.EXIT_SUSPENDED:
            if job.migrate_to is not None:
                self._complete_migration(job, now)
            elif job.sample_only:
                self._to_waiting(job, JobState.SAMPLED if job.sample else JobState.QUEUED, now,
                                 "sampled" if job.sample else "sampling ended without a record")
            else:
                self._to_waiting(job, JobState.SUSPENDED, now, f"suspended to its checkpoint")
        elif code in (rp.EXIT_BAD_INPUT, rp.EXIT_CHECKPOINT_ERROR):
            kind = "bad input" if code == rp.EXIT_BAD_INPUT else "checkpoint error"
            detail = msg.reason or job.reason
            self._finish(job, JobState.FAILED, now, f"{kind}: {detail}" if detail else kind)
        else:
            job.retries += 1
            if job.retries > self.config.max_retries:
                self._finish(job, JobState.FAILED, now,
                             f"crashed ({why}) {job.retries} times; giving up")
            else:
                self._requeue(job, now, f"crashed ({why}); retry {job.retries} of "
                                        f"{self.config.max_retries} from its checkpoint")
        return {}

    def _on_reply(self, peer: bytes, msg: s.Message) -> None:
        sent = self.pending.pop(msg.id, None)
        if sent is None or not isinstance(msg, s.Error):
            return
        job_id, attempt, kind, _node = sent
        node = self.peers.get(peer, peer.hex())
        log.warning("node %s refused %s for %s: %s", node, kind, job_id, msg.reason)
        job = self.cluster.active.get(job_id)
        if job is None or job.attempt != attempt or not job.state.holds_gpu:
            return
        now = self.clock()
        if kind == "start_job":
            job.retries += 1
            if job.retries > self.config.max_retries:
                self._finish(job, JobState.FAILED, now, f"agent refused to start it: {msg.reason}")
            else:
                self._requeue(job, now, f"agent refused to start it: {msg.reason}")
        elif kind in ("suspend_job", "cancel_job", "adopt"):
            # no such runner there: make sure, and back to the queue from its checkpoint
            holder = self.cluster.nodes.get(job.node or "")
            if holder is not None:
                self._send(holder, s.KillJob(job=job.id))
            self._requeue(job, now, f"agent has no runner for it ({msg.reason})")

    # ---- transitions ---------------------------------------------------------------

    def _release(self, job: LiveJob, now: float) -> None:
        if job.last_start is not None:
            dt = max(0.0, now - job.last_start)
            job.run_time_s += dt
            job.attained_service_s += dt * job.spec.num_gpus
            job.last_start = None
        self.cluster.unplace(job)
        job.node, job.sample_only = None, False
        job.gpu_memory_mb, job.over_memory = {}, ""
        job.move_started = None
        self._dirty = True

    def _to_waiting(self, job: LiveJob, state: JobState, now: float, why: str) -> None:
        self._release(job, now)
        job.state = state
        job.last_wait_start = now
        job.reason = why
        self._save(job)
        self._log(job, now, f"{state.value}: {why}")

    def _requeue(self, job: LiveJob, now: float, why: str) -> None:
        """Back to the queue from its checkpoint (or to be re-sampled)."""
        if job.cancel_requested:
            self._finish(job, JobState.CANCELLED, now, f"cancelled ({why})")
        elif job.sample_only:
            self._to_waiting(job, JobState.SAMPLED if job.sample else JobState.QUEUED, now, why)
        else:
            self._to_waiting(job, JobState.SUSPENDED, now, why)

    def _finish(self, job: LiveJob, state: JobState, now: float, why: str) -> None:
        self._release(job, now)
        job.state = state
        job.finish_time = now
        job.last_wait_start = None
        job.reason = why
        job.cancel_requested = False
        self.cluster.retire(job)
        self._save(job)
        self._log(job, now, f"{state.value}: {why}")

    def _start(self, job: LiveJob, fragments: tuple[Fragment, ...], sample_only: bool,
               now: float, note: str = "") -> None:
        node = self.cluster.nodes[split_gpu_id(fragments[0].gpu)[0]]
        if job.state is JobState.SUSPENDED and not note:
            job.resumes += 1
            self.metrics.resumes.inc()
        job.attempt += 1
        if job.last_wait_start is not None:
            job.waited_s += max(0.0, now - job.last_wait_start)
            job.last_wait_start = None
        if job.first_start is None:
            job.first_start = now
        job.state = JobState.SAMPLING if sample_only else JobState.RUNNING
        self.cluster.place(job, fragments)
        job.node, job.sample_only = node.name, sample_only
        job.last_start = now
        job.pinned = False
        if sample_only:
            job.solo_util = []
        self._save(job)
        where = ", ".join(f"{f.gpu} f={f.fraction:.3f}" for f in fragments)
        what = "sample" if sample_only else ("resume" if job.steps_done else "start")
        self._log(job, now, f"{note or what} on {where} (attempt {job.attempt})")
        self._send(node, s.StartJob(
            job=job.id, attempt=job.attempt, spec=job.spec,
            fragments=[s.FragmentSpec(split_gpu_id(f.gpu)[1], f.fraction) for f in fragments],
            train_dir=str(self.checkpoint_root / job.id), sample_only=sample_only), job)

    def _ask_suspend(self, job: LiveJob, now: float, why: str,
                     target: tuple[Fragment, ...] | None = None) -> None:
        node = self.cluster.nodes[job.node]
        job.state = JobState.SUSPENDING
        self.cluster.set_migration(job, target)
        job.move_started = now
        if target is None:
            job.suspends += 1
            self.metrics.suspends.inc()
        self._save(job)
        to = f" to migrate to {', '.join(f.gpu for f in target)}" if target else ""
        self._log(job, now, f"suspend{to} ({why})")
        self._send(node, s.SuspendJob(job=job.id, attempt=job.attempt), job)

    def _complete_migration(self, job: LiveJob, now: float) -> None:
        target = job.migrate_to
        self._release(job, now)
        if all(self.cluster.fits(f.gpu, f.fraction) for f in target) and \
                len({split_gpu_id(f.gpu)[0] for f in target}) == 1:
            job.migrations += 1
            self.metrics.migrations.inc()
            self._start(job, target, False, now, note="migrated")
        else:
            job.state = JobState.SUSPENDED
            job.last_wait_start = now
            job.reason = "migration target no longer fits; waiting"
            self._save(job)
            self._log(job, now, job.reason)

    def _node_lost(self, node: Node, now: float, why: str) -> None:
        log.warning("node %s lost: %s", node.name, why)
        self.metrics.node_losses.inc()
        node.lost = True
        if node.identity is not None:
            self.peers.pop(node.identity, None)
        node.identity = None
        self.cluster.nodes_changed()
        self.pending = {k: v for k, v in self.pending.items() if v[3] != node.name}
        for job in [j for j in self.cluster.holders() if j.node == node.name]:
            job.unknown = False
            self._requeue(job, now, f"node {node.name} lost ({why})")
        self._dirty = True

    # ---- scheduling --------------------------------------------------------------

    def schedule(self, now: float) -> list:
        """One scheduling round, all in this thread: plan, decide, carry out."""
        plan = self._plan(now)
        return [] if plan is None else self._apply(self._decide(plan))

    def _plan(self, now: float) -> "_Round | None":
        """Start a round: what the policy sees now (None when it has nothing to decide)."""
        self._dirty = False
        t0 = time.perf_counter()
        snapshot = self.cluster.snapshot()
        views = self.cluster.views()
        if not snapshot.gpus or not views:
            return None
        return _Round(now, snapshot, views, t0)

    def _decide(self, plan: "_Round") -> "_Round":
        """Ask the policy (pure: safe on the worker thread); a failure means no actions."""
        t1, c1 = time.perf_counter(), time.thread_time()
        try:
            plan.actions = self.policy.decide(plan.now, plan.snapshot, plan.views)
        except Exception:   # a policy bug must not take the cluster down
            log.exception("policy %s failed; no actions this round",
                          getattr(self.policy, "name", "?"))
        plan.decide_s = time.perf_counter() - t1
        plan.decide_cpu_s = time.thread_time() - c1
        return plan

    def _apply(self, plan: "_Round") -> list:
        """Carry out the actions that still hold now (the cluster may have moved on)."""
        now = self.clock()
        actions, errors = self.cluster.check_actions(plan.actions)
        name = getattr(self.policy, "name", "?")
        for e in errors:
            log.info("policy %s: not done now: %s", name, e)
        for action in actions:
            job = self.cluster.active[action.job]
            if isinstance(action, Start):
                self._start(job, action.fragments, action.sample_only, now)
            elif isinstance(action, Suspend):
                self._ask_suspend(job, now, f"policy {name}")
            elif isinstance(action, Migrate):
                self._ask_suspend(job, now, f"policy {name}", target=tuple(action.fragments))
        took = time.perf_counter() - plan.started
        if len(self.round_times) < 1_000_000:
            self.round_times.append(took)
            self.decide_times.append(plan.decide_s)
            self.decide_cpu_times.append(plan.decide_cpu_s)
        self.metrics.rounds.observe(took)
        return actions

    # ---- client requests ------------------------------------------------------------

    def _on_submit(self, peer: bytes, msg: s.Submit) -> dict[str, Any]:
        from slim_models.nets_factory import check_model
        if not msg.jobs:
            raise RequestError("submit needs at least one job")
        largest = self.cluster.largest_node()
        for i, spec in enumerate(msg.jobs, 1):
            label = f"job {i} ({spec.model_name})" if len(msg.jobs) > 1 else spec.model_name
            try:
                check_model(spec.model_name, spec.image_size)
            except ValueError as exc:
                raise RequestError(f"{label}: {exc}") from None
            if largest and spec.num_gpus > largest:
                raise RequestError(
                    f"{label}: asks for {spec.num_gpus} GPUs but the largest node has "
                    f"{largest}; a job runs on the GPUs of one node")
        now = self.clock()
        rows, ids = [], []
        for spec in msg.jobs:
            self.seq += 1
            # strictly increasing submit times keep arrival order within a batch
            self._last_submit = max(now, self._last_submit + 1e-6)
            job = LiveJob(id=f"j{self.seq}", seq=self.seq, spec=spec,
                          submit_time=self._last_submit, last_wait_start=self._last_submit)
            self.cluster.add(job)
            rows.append((job.id, job.seq, job.to_record()))
            ids.append(job.id)
            self._log(job, now, f"submitted {spec.model_name} batch {spec.batch_size}, "
                                f"{spec.max_number_of_steps} steps, {spec.num_gpus} GPU(s), "
                                f"fraction {spec.memory_fraction}", decision=False)
        self.store.insert_jobs(rows)
        log.info("submitted %d job(s): %s", len(ids),
                 ", ".join(ids) if len(ids) <= 5 else f"{ids[0]}..{ids[-1]}")
        self._dirty = True
        return {"job_ids": ids}

    def _on_status(self, peer: bytes, msg: s.Status) -> dict[str, Any]:
        now = self.clock()
        if msg.job is not None:
            return {"job": self.describe(self._job(msg.job), now)}
        jobs = self.cluster.active if msg.active else self.cluster.jobs
        counts: dict[str, int] = {}
        for j in self.cluster.jobs.values():
            counts[j.display_state] = counts.get(j.display_state, 0) + 1
        return {"jobs": [self.describe(j, now) for j in jobs.values()], "counts": counts,
                "policy": getattr(self.policy, "name", "?"), "time": now}

    def describe(self, job: LiveJob, now: float) -> dict[str, Any]:
        """A job as the status command shows it."""
        waited = job.waited_s + (now - job.last_wait_start
                                 if job.last_wait_start is not None else 0.0)
        run = job.run_time_s + (now - job.last_start if job.last_start is not None else 0.0)
        return {
            "id": job.id, "name": job.spec.name, "model": job.spec.model_name,
            "state": job.display_state, "num_gpus": job.spec.num_gpus, "node": job.node,
            "fragments": [[f.gpu, f.fraction] for f in job.fragments],
            "steps_done": job.steps_done, "total_steps": job.spec.max_number_of_steps,
            "predicted_remaining_s": job.predicted_remaining_s,
            "submit_time": job.submit_time, "first_start": job.first_start,
            "finish_time": job.finish_time, "waited_s": waited, "run_time_s": run,
            "attempt": job.attempt, "suspends": job.suspends, "resumes": job.resumes,
            "migrations": job.migrations, "pinned": job.pinned,
            "sample": None if job.sample is None else vars(job.sample),
            "gpu_memory_mb": job.gpu_memory_mb, "over_memory": job.over_memory,
            "reason": job.reason, "memory_fraction": job.spec.memory_fraction,
        }

    def _on_nodes(self, peer: bytes, msg: s.Nodes) -> dict[str, Any]:
        now = self.clock()
        on_gpu: dict[str, list[dict[str, Any]]] = {}
        for job in self.cluster.holders():
            for f in job.fragments:
                on_gpu.setdefault(f.gpu, []).append(
                    {"job": job.id, "fraction": f.fraction, "state": job.display_state,
                     "model": job.spec.model_name})
        nodes = []
        for node in self.cluster.nodes.values():
            up = node.identity is not None and not node.lost
            gpus = [{"index": i, "id": node.gpu_id(i), "name": g.name,
                     "memory_mb": g.memory_mb, "virtual": g.virtual,
                     "util": node.gpu_util.get(i), "memory_used_mb":
                         node.gpu_memory_used_mb.get(i),
                     "fragments": on_gpu.get(node.gpu_id(i), [])}
                    for i, g in sorted(node.gpus.items())]
            nodes.append({"name": node.name, "state": "up" if up else "lost",
                          "last_seen_s": now - node.last_seen if node.last_seen else None,
                          "gpus": gpus})
        return {"nodes": nodes, "reserve_mb": self.cluster.reserve_mb}

    def _on_logs(self, peer: bytes, msg: s.Logs) -> dict[str, Any]:
        job = self._job(msg.job)
        self.store.append_logs(self._logs)
        self._logs.clear()
        return {"job": job.id, "lines": self.store.logs(job.id, msg.tail)}

    def _on_cancel(self, peer: bytes, msg: s.CancelRequest) -> dict[str, Any]:
        job = self._job(msg.job)
        now = self.clock()
        if job.state.done:
            raise RequestError(f"job {job.id} is already {job.state.value}")
        if job.state.holds_gpu and not job.unknown:
            job.cancel_requested = True
            self._save(job)
            self._log(job, now, "cancel requested")
            self._send(self.cluster.nodes[job.node],
                       s.CancelJob(job=job.id, attempt=job.attempt), job)
            return {"state": "cancelling"}
        job.unknown = False
        self._finish(job, JobState.CANCELLED, now, "cancelled by the user")
        return {"state": "cancelled"}

    def _on_suspend(self, peer: bytes, msg: s.SuspendRequest) -> dict[str, Any]:
        job = self._job(msg.job)
        now = self.clock()
        if job.state.done:
            raise RequestError(f"job {job.id} is already {job.state.value}")
        if job.unknown:
            raise RequestError(f"job {job.id}: its node has not reported since the "
                               "coordinator restarted; try again shortly")
        job.pinned = True
        if job.state in (JobState.RUNNING, JobState.SAMPLING) and not job.cancel_requested:
            self._ask_suspend(job, now, "asked by the user")
        else:
            self._save(job)
            self._log(job, now, "held by the user")
        return {"state": job.display_state}

    def _on_resume(self, peer: bytes, msg: s.ResumeRequest) -> dict[str, Any]:
        job = self._job(msg.job)
        if job.state.done:
            raise RequestError(f"job {job.id} is already {job.state.value}")
        if not job.pinned:
            if job.state.waiting:
                return {"state": job.display_state, "note": "not held; it is waiting"}
            raise RequestError(f"job {job.id} is {job.display_state}, not suspended")
        job.pinned = False
        self._save(job)
        self._log(job, self.clock(), "released by the user")
        self._dirty = True
        return {"state": job.display_state}

    def _on_migrate(self, peer: bytes, msg: s.MigrateRequest) -> dict[str, Any]:
        job = self._job(msg.job)
        now = self.clock()
        try:
            split_gpu_id(msg.to)
        except ValueError as exc:
            raise RequestError(str(exc)) from None
        info = self.cluster.gpu(msg.to)
        if info is None:
            up = [n.gpu_id(i) for n in self.cluster.up_nodes() for i in sorted(n.gpus)]
            raise RequestError(f"no up GPU {msg.to!r}; up GPUs: {', '.join(up) or 'none'}")
        if job.state.done:
            raise RequestError(f"job {job.id} is already {job.state.value}")
        if job.spec.num_gpus != 1:
            raise RequestError(f"job {job.id} uses {job.spec.num_gpus} GPUs; migrate moves "
                               "single-GPU jobs")
        if job.unknown or job.cancel_requested or job.state in (JobState.SAMPLING,
                                                                 JobState.SUSPENDING):
            raise RequestError(f"job {job.id} is {job.display_state}; try once it runs or "
                               "waits")
        if job.state is JobState.RUNNING:
            if job.fragments[0].gpu == msg.to:
                raise RequestError(f"job {job.id} already runs on {msg.to}")
            fraction = job.fragments[0].fraction
        else:
            snapshot = self.cluster.snapshot()
            fraction = fraction_for(job.view(), snapshot.gpu(msg.to),
                                    reserve_mb=self.cluster.reserve_mb)
        if not self.cluster.fits(msg.to, fraction):
            raise RequestError(f"job {job.id} needs a fraction of {fraction:.3f}, which does "
                               f"not fit on {msg.to} now")
        target = (Fragment(msg.to, fraction),)
        if job.state is JobState.RUNNING:
            self._ask_suspend(job, now, "asked by the user", target=target)
        else:
            self._start(job, target, False, now, note="placed by the user")
        self._dirty = True
        return {"state": job.display_state}

    def _on_metrics(self, peer: bytes, msg: s.MetricsRequest) -> dict[str, Any]:
        now = self.clock()
        self.metrics.update(self.cluster, now)
        answer = run_report(self.cluster, self.metrics, getattr(self.policy, "name", "?"), now)
        answer["rounds"] = round_stats(self.round_times[msg.since_round:])
        answer["decide"] = round_stats(self.decide_times[msg.since_round:])
        answer["decide_cpu"] = round_stats(self.decide_cpu_times[msg.since_round:])
        answer["rounds_total"] = len(self.round_times)
        return answer


@dataclass
class _Round:
    """One scheduling round: the policy's input, its answer, and timings."""

    now: float
    snapshot: Any
    views: list
    started: float
    actions: list = field(default_factory=list)
    decide_s: float = 0.0
    decide_cpu_s: float = 0.0


def _drain(fd: int) -> None:
    """Read whatever bytes wait on a non-blocking pipe."""
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


_REPLIED: Any = object()   # a handler that queued its own reply returns this


def _guarded(step: Callable[[Any], Any], arg: Any) -> None:
    """Run one step of the loop; log a failure instead of stopping the loop."""
    try:
        step(arg)
    except Exception:
        log.exception("%s failed", step.__name__)


def round_stats(seconds: Sequence[float]) -> dict[str, float | int | None]:
    """Count, p50, p99 and max (in ms) of scheduling round times."""
    if not len(seconds):
        return {"count": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}
    ordered = sorted(seconds)

    def pct(q: float) -> float:
        return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]
    return {"count": len(ordered), "p50_ms": pct(0.50), "p99_ms": pct(0.99),
            "max_ms": 1000 * ordered[-1]}


def _number(event: dict[str, Any], key: str, kind: type) -> Any:
    """``event[key]`` as an int or float, None when absent; RequestError when not a number."""
    value = event.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RequestError(f"event {event.get('event')!r}: {key} must be a number, "
                           f"got {value!r}")
    return kind(value)


def _guess_id(data: bytes) -> str:
    try:
        obj = json.loads(data)
        if isinstance(obj, dict) and isinstance(obj.get("id"), str):
            return obj["id"]
    except (ValueError, UnicodeDecodeError):
        pass
    return ""


def _short(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


# ---- command line -----------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    """The ``tfgshare coordinator`` flags."""
    p = argparse.ArgumentParser(prog="tfgshare coordinator",
                                description="Run the ZeroMQ coordinator.")
    p.add_argument("--bind", default=DEFAULT_ADDRESS, help="ZMQ address to bind (ROUTER)")
    p.add_argument("--state", required=True, help="SQLite state file (created if missing)")
    from tfgshare.policies.registry import POLICY_NAMES
    p.add_argument("--policy", default="fgs",
                   help=f"scheduling policy (default fgs; one of {', '.join(POLICY_NAMES)})")
    p.add_argument("--policy-param", action="append", default=[], metavar="KEY=VALUE",
                   help="a policy parameter (JSON value), repeatable")
    p.add_argument("--checkpoint-root", default=None,
                   help="shared checkpoint directory (default: <dir of --state>/checkpoints)")
    p.add_argument("--metrics-port", type=int, default=None,
                   help="serve Prometheus metrics on this port (0: a free port)")
    p.add_argument("--reserve-mb", type=float, default=300.0,
                   help="per-process CUDA context reserve on each GPU, MiB")
    p.add_argument("--node-timeout", type=float, default=10.0,
                   help="seconds without a heartbeat before a node is lost")
    p.add_argument("--tick", type=float, default=1.0, help="policy timer, seconds")
    p.add_argument("--token", default=os.environ.get("TFGSHARE_TOKEN"),
                   help="shared secret agents must present (default $TFGSHARE_TOKEN)")
    return p


def config_from_args(argv: list[str]) -> CoordinatorConfig:
    """Parse and check the flags; exit with a clear message on bad ones."""
    p = parser()
    a = p.parse_args(argv)
    params = {}
    for item in a.policy_param:
        key, sep, value = item.partition("=")
        if not sep:
            p.error(f"--policy-param must be KEY=VALUE, got {item!r}")
        try:
            params[key] = json.loads(value)
        except ValueError:
            params[key] = value
    for name in ("node_timeout", "tick"):
        if getattr(a, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be > 0")
    if a.reserve_mb < 0:
        p.error("--reserve-mb must be >= 0")
    return CoordinatorConfig(
        state=Path(a.state), bind=a.bind, policy=a.policy, policy_params=params,
        checkpoint_root=Path(a.checkpoint_root) if a.checkpoint_root else None,
        metrics_port=a.metrics_port, reserve_mb=a.reserve_mb, node_timeout=a.node_timeout,
        tick=a.tick, token=a.token)


class TurnHandler(logging.StreamHandler):
    """A log handler that writes lines as they come but flushes once per loop turn.

    A flush per line (a system call each) cost more than a start decision itself.
    """

    def flush(self) -> None:
        """Flushing is left to the coordinator's loop (``flush_logs``)."""

    def flush_now(self) -> None:
        """Flush the stream."""
        with self.lock:
            if self.stream and hasattr(self.stream, "flush"):
                self.stream.flush()


def flush_logs() -> None:
    """Flush every TurnHandler of the coordinator's logger tree."""
    for handler in logging.getLogger().handlers + log.handlers:
        if isinstance(handler, TurnHandler):
            handler.flush_now()


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
    # The policy decides on a worker thread; a short GIL switch interval lets the
    # serving loop take the interpreter back within 0.5 ms instead of 5 ms per wake-up.
    sys.setswitchinterval(0.0005)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        coord.serve(stop)
    except zmq.ZMQError as exc:
        print(f"tfgshare coordinator: cannot bind {config.bind}: {exc}", file=sys.stderr)
        return 1
    return 0
