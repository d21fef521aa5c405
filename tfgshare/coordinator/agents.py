"""The agent-facing handlers: register, heartbeat, runner events and exits, command replies.

``AgentHandlers`` receives the ``Lifecycle`` and answers the messages node agents
send; what a report means for a job (its moves) is the lifecycle's, what it teaches
(samples, progress, forecasts) is ``measures``'. Calls go one way: handlers ->
lifecycle -> gangs, outbox, cluster, store; nothing here is called back.

May import: ``tfgshare.schema``, ``keys`` (the caller's identity), ``runner_wire``,
``policies.base`` and the coordinator's ``cluster``, ``errors``, ``gangs``,
``lifecycle``, ``logs`` and ``measures``.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable

from tfgshare import runner_wire as rp
from tfgshare import schema as s
from tfgshare.keys import Identity
from tfgshare.coordinator.cluster import LiveJob, Node, split_gpu_id
from tfgshare.coordinator.errors import RequestError, number, short
from tfgshare.coordinator.gangs import spans_nodes
from tfgshare.coordinator.lifecycle import Lifecycle
from tfgshare.coordinator.logs import log
from tfgshare.coordinator.measures import note_progress, record_sample, sampling_ended
from tfgshare.policies.base import JobState


class AgentHandlers:
    """Answers the messages node agents send, on the lifecycle it is given."""

    def __init__(self, life: Lifecycle, heartbeat_s: float) -> None:
        self.life = life
        self.heartbeat_s = heartbeat_s    # the heartbeat period agents are told

    def handlers(self) -> dict[str, Callable[[bytes, Any, Identity | None], Any]]:
        """The request types this part answers, each with its handler."""
        return {s.Register.TYPE: self._on_register, s.Heartbeat.TYPE: self._on_heartbeat,
                s.JobEvent.TYPE: self._on_job_event, s.JobExit.TYPE: self._on_job_exit}

    def _on_register(self, peer: bytes, msg: s.Register,
                     caller: Identity | None) -> dict[str, Any]:
        if caller is not None and msg.node != caller.name:
            raise RequestError(f"register refused: agent key {caller.name!r} may register only "
                               f"node {caller.name!r}, not {msg.node!r}", s.ErrorCode.FORBIDDEN)
        if not msg.gpus:
            raise RequestError("register refused: the node offers no GPUs")
        indices = [g.index for g in msg.gpus]
        if len(set(indices)) != len(indices):
            raise RequestError(f"register refused: duplicate GPU indices {indices}")
        life, cluster, outbox = self.life, self.life.cluster, self.life.outbox
        now = life.clock()
        node = cluster.nodes.get(msg.node)
        if node is not None and node.identity is not None and node.identity != peer:
            life.peers.pop(node.identity, None)
        gpus = {g.index: g for g in msg.gpus}
        offered = set(node.gpus) if node is not None else set()   # before this register
        if node is None:
            node = cluster.nodes[msg.node] = Node(msg.node, gpus)
        node.gpus, node.identity, node.last_seen, node.lost = gpus, peer, now, False
        node.address = msg.address
        node.ports = (msg.ports.first, msg.ports.last) if msg.ports else None
        node.data_roots = None if msg.data_roots is None else (
            list(msg.data_roots) + ([str(life.checkpoint_root)] if msg.data_in_checkpoint_root
                                    else []))
        life.peers[peer] = node.name
        cluster.nodes_changed()
        life.store.save_node(node.name, {"gpus": [s.plain(g) for g in msg.gpus]})
        log.info("node %s joined with %d GPUs (%s), reporting %d runners", node.name,
                 len(gpus), ", ".join(f"{g.index}:{g.name} {g.memory_mb} MiB" for g in msg.gpus),
                 len(msg.jobs))
        reported = {}
        members: set[str] = set()      # jobs whose gang member here was re-adopted
        for rj in msg.jobs:
            job = cluster.active.get(rj.job)
            if (job is not None and job.node == node.name and job.state.holds_gpu
                    and (rj.attempt is None or rj.attempt == job.attempt)
                    and all(split_gpu_id(f.gpu)[1] in gpus for f in job.fragments)
                    # a gang's chief only with its members known (not after a restart)
                    and (not spans_nodes(job.fragments) or job.id in life.gangs.by_job)):
                reported[job.id] = rj
                job.unknown = False
                job.steps_done = max(job.steps_done, rj.step)
                outbox.log_job(job, now, f"re-adopted on {node.name} (pid {rj.pid}, "
                                         f"step {rj.step}, attempt {job.attempt})")
                outbox.send_adopt(node, job)
                life.save(job)
            elif life.gangs.adopt_member(node.name, rj, now):
                members.add(rj.job)
            else:
                log.info("node %s: runner of %s is not wanted here; asking to kill it",
                         node.name, rj.job)
                outbox.send(node, s.KillJob(job=rj.job))
        for job in life.held_on(node, offered):
            if job.id not in reported:
                job.unknown = False
                life.requeue(job, now, f"node {node.name} re-registered without it")
        # its gang members not reported died with its old agent (or were killed above)
        life.members_gone(node.name, now, "its agent registered again", frozenset(members))
        life.dirty = True
        # the reply goes out before the adoption commands queued above (as all replies do)
        return {"heartbeat_s": self.heartbeat_s, "node_timeout": life.config.node_timeout,
                "checkpoint_root": str(life.checkpoint_root)}

    def _on_heartbeat(self, peer: bytes, msg: s.Heartbeat,
                      _caller: Identity | None = None) -> dict[str, Any]:
        node = self._agent_node(peer, msg.node)
        cluster = self.life.cluster
        now = self.life.clock()
        node.last_seen = now
        for g in msg.gpus:
            node.gpu_util[g.index] = g.util
            node.gpu_memory_used_mb[g.index] = g.memory_used_mb
        for jt in msg.jobs:
            job = cluster.active.get(jt.job)
            if job is None or job.node != node.name or not job.state.holds_gpu:
                continue
            if jt.step > job.steps_done:
                self.life.follow_steps(job, jt.step, now)
            job.gpu_memory_mb = jt.gpu_memory_mb   # decoded for this message: its own
            if job.sample is None:
                self._note_solo_util(job, node)
            over = []
            for f in job.fragments:
                index = _gpu_index(f.gpu)
                used = jt.gpu_memory_mb.get(index)
                info = node.gpus.get(index)
                if used is not None and info is not None and used > f.fraction * info.memory_mb:
                    over.append(f"uses {used:.0f} MiB on {f.gpu}, its fragment is "
                                f"{f.fraction * info.memory_mb:.0f} MiB")
            text = "; ".join(over)
            if text != job.over_memory:
                job.over_memory = text
                cluster.refresh(job)
                self.life.outbox.log_job(job, now, f"memory over its fragment: {text}" if text
                                         else "memory back within its fragment")
        return {}

    def _note_solo_util(self, job: LiveJob, node: Node) -> None:
        """Keep the GPU utilisation of a job not yet sampled that has its GPUs to itself.

        The first few hundred readings are enough for a mean; a long run keeps no more.
        """
        if len(job.solo_util) >= 512 or self.life.cluster.co_tenants(job):
            return
        now = self.life.clock()
        for f in job.fragments:
            util = node.gpu_util.get(_gpu_index(f.gpu))
            if util is not None:
                job.solo_util.append((now, util))
                job.solo_util_sum += util

    def _agent_node(self, peer: bytes, name: str) -> Node:
        registered = self.life.peers[peer]
        if name != registered:
            raise RequestError(f"this agent registered as node {registered!r}, not {name!r}",
                               s.ErrorCode.NOT_REGISTERED)
        return self.life.cluster.nodes[registered]

    def _current(self, peer: bytes, msg: s.JobEvent | s.JobExit) -> LiveJob | None:
        """The job a report is about, or None when the report is stale."""
        node = self._agent_node(peer, msg.node)
        job = self.life.job(msg.job)
        if (job.node != node.name or job.attempt != msg.attempt or not job.state.holds_gpu
                or job.unknown):
            log.info("ignored stale %s for %s attempt %d from %s (job is %s, attempt %d on %s)",
                     msg.TYPE, job.id, msg.attempt, node.name, job.display_state,
                     job.attempt, job.node)
            return None
        return job

    def _member(self, peer: bytes, msg: s.JobEvent | s.JobExit) -> LiveJob | None:
        """The job, when ``msg`` is from a current gang member other than the chief."""
        job = self.life.gangs.member(msg)
        if job is not None:
            self._agent_node(peer, msg.node)
        return job

    def _on_job_event(self, peer: bytes, msg: s.JobEvent,
                      _caller: Identity | None = None) -> dict[str, Any]:
        life = self.life
        member = self._member(peer, msg)
        if member is not None:
            # a gang member other than the chief: the chief's events speak for the gang;
            # a member's problems go to the job's log
            name = msg.event.get("event")
            if name in ("error", "warning", "out_of_memory"):
                life.outbox.log_job(member, life.clock(), f"gang member on {msg.node}: {name} "
                                    f"{str(msg.event.get('message', ''))[:500]}")
            return {}
        job = self._current(peer, msg)
        if job is None:
            late = self._late(msg)
            if late is not None and msg.event.get("event") == "sample" and late.sample is None:
                record_sample(life, late, msg.event, life.clock())
                if late.state is JobState.QUEUED:
                    late.state = JobState.SAMPLED
                life.save(late)
                life.outbox.log_job(late, life.clock(),
                                    "sampling record arrived after it was re-queued")
                return {}
            return {"stale": True}
        now = life.clock()
        ev = msg.event
        name = ev.get("event", "?")
        was_training = job.training
        # a running job's progress only when stored (see the end)
        paced = name == "progress" and was_training and job.state is JobState.RUNNING
        if not paced:
            self._log_event(job, msg, name, now)
        step = number(ev, "global_step" if name == "started" else "step", int)
        if step is not None and name in ("started", "sample", "progress", "finished",
                                         "suspended", "checkpoint"):
            job.steps_done = step
        if name in ("started", "progress"):
            job.training = True
            job.end_move(now)        # it trains again: a resume or migration ends
        if name == "progress":
            step_time = number(ev, "step_time_s", float)
            if step_time is not None and step_time > 0:
                job.step_time_s = step_time
            note_progress(job, ev, now - msg.held_s)   # when the runner wrote it
        elif name == "sample":
            record_sample(life, job, ev, now)
        elif name == "start_phases":
            # process start (import), graph, restore and first step: the restart half
            # of its move cost (JobView.move_cost_s), a resume's phases; a fresh start's
            # initialisation (init_s, input_s), which a resume does not run, and waiting
            # for a runner are not in it
            parts = [number(ev, k, float) for k in ("start_s", "graph_s", "restore_s",
                                                    "first_step_s")]
            job.start_cost_s = sum(max(0.0, x) for x in parts if x is not None)
            job.graph_built_s = (max(0.0, parts[1] or 0.0)
                                 if ev.get("graph_source") == "built" else 0.0)
            job.first_step_s = max(0.0, parts[3] or 0.0)
            if ev.get("restored_from"):   # a resume: its graph imported, its checkpoint read
                # (its first step beyond a steady one: the steps are predicted apart)
                life.cluster.forecast.note_resume(job.spec.model_name, max(
                    0.0, job.start_cost_s - (job.measured_step_s or 0.0)))
        elif name == "checkpoint":
            seconds = number(ev, "seconds", float)
            if seconds is not None and seconds >= 0:
                job.save_s = seconds   # the save half of its move cost (JobView.move_cost_s)
        elif name == "error":
            job.reason = str(ev.get("message", ""))
        elif name == "out_of_memory":
            peak = number(ev, "peak_memory_mb", float)
            if peak is not None:
                job.memory_need_mb = max(job.memory_need_mb, peak)
        if not paced:
            life.save(job)
        elif life.save_progress(job, now):
            self._log_event(job, msg, name, now)
        return {}

    def _log_event(self, job: LiveJob, msg: s.JobEvent, name: str, now: float) -> None:
        """The event in the job's log. The job's log keeps every event but a running job's
        progress, kept as often as it is stored (``Lifecycle.save_progress``: the first,
        then about once a minute; the runner's own log on its node keeps every report):
        at 10,000 GPUs those lines were most rows written and a quarter of an event's
        handling (profiled). The coordinator's own log keeps only a runner's errors (its
        decisions, start to finish, are logged where they are made)."""
        details = " ".join(f"{k}={short(v)}" for k, v in msg.event.items()
                           if k not in ("event", "time"))
        self.life.outbox.log_job(job, now, f"{msg.node} #{msg.attempt} {name} {details}".rstrip(),
                                 decision=name in ("error", "out_of_memory"))

    def _late(self, msg: s.JobEvent | s.JobExit) -> LiveJob | None:
        """The job, if this report is from its last attempt and it has not restarted since.

        A runner can end while its node is away (or the coordinator is down): the
        job is re-queued, and the agent sends the report when it is back.
        """
        job = self.life.cluster.active.get(msg.job)
        if job is not None and job.attempt == msg.attempt and job.state.waiting:
            return job
        return None

    def _on_job_exit(self, peer: bytes, msg: s.JobExit,
                     _caller: Identity | None = None) -> dict[str, Any]:
        life = self.life
        member = self._member(peer, msg)
        if member is not None:   # a gang member other than the chief
            self._member_exit(member, msg)
            return {}
        job = self._current(peer, msg)
        if job is None:
            late = self._late(msg)
            if late is not None and msg.exit_code == rp.EXIT_OK:
                life.finish(late, JobState.FINISHED, life.clock(),
                            "exit 0, reported after it was re-queued")
                return {}
            return {"stale": True}
        now = life.clock()
        code = msg.exit_code
        why = f"exit {code}" + (f" ({msg.reason})" if msg.reason else "")
        if code == rp.EXIT_OK:
            life.finish(job, JobState.FINISHED, now, why)
        elif job.cancel_requested:
            life.finish(job, JobState.CANCELLED, now, f"as asked; its runner stopped (exit {code})")
        elif code == rp.EXIT_SUSPENDED:
            if job.migrate_to is not None:
                life.complete_migration(job, now)
            elif job.sample_only:
                life.to_waiting(job, JobState.SAMPLED if job.sample else JobState.QUEUED, now,
                                "speed and memory measured; waits for a place to run"
                                if job.sample else "sampling ended without a record")
                sampling_ended(life, job, now)
                life.save(job)
            else:
                life.to_waiting(job, JobState.SUSPENDED, now, "suspended to its checkpoint")
        elif code == rp.EXIT_OUT_OF_MEMORY:
            life.out_of_memory(job, now, why)
        elif code in (rp.EXIT_BAD_INPUT, rp.EXIT_CHECKPOINT_ERROR):
            kind = "bad input" if code == rp.EXIT_BAD_INPUT else "checkpoint error"
            detail = msg.reason or job.reason
            life.finish(job, JobState.FAILED, now, f"{kind}: {detail}" if detail else kind)
        else:
            if life.count_failure(job):
                life.finish(job, JobState.FAILED, now,
                            f"crashed ({why}) {job.retries} times without progress; giving up")
            else:
                life.requeue(job, now, f"crashed ({why}); retry {job.retries} of "
                                       f"{life.config.max_retries} from its checkpoint")
        life.start_reserved(now)
        return {}

    def _member_exit(self, job: LiveJob, msg: s.JobExit) -> None:
        """The exit of a gang member other than the chief: logged when the gang stops
        anyway (the chief's exit decides), else the whole gang back or failed."""
        life = self.life
        now = life.clock()
        code = msg.exit_code
        why = f"gang member on {msg.node} exited {code}" + (f" ({msg.reason})" if msg.reason
                                                            else "")
        if code in (rp.EXIT_OK, rp.EXIT_SUSPENDED) or job.state is JobState.SUSPENDING \
                or job.cancel_requested or not job.state.holds_gpu:
            life.outbox.log_job(job, now, why)   # stopping with the gang
        elif code == rp.EXIT_OUT_OF_MEMORY:      # re-sized from its peak, as a lone runner is
            life.out_of_memory(job, now, why)
            life.start_reserved(now)
        elif code == rp.EXIT_BAD_INPUT:
            life.finish(job, JobState.FAILED, now, f"bad input: {why}")
        else:
            life.member_lost(job, now, why)

    def on_reply(self, peer: bytes, msg: s.Message) -> None:
        """An agent's answer to a command: a refusal re-queues (or fails) the job."""
        life = self.life
        sent = life.outbox.pending.get(msg.id)
        if sent is None or life.peers.get(peer) != sent[3]:
            return                   # not an answer to a command we sent to this peer
        del life.outbox.pending[msg.id]
        if not isinstance(msg, s.Error):
            return
        job_id, attempt, kind, _node = sent
        node = life.peers.get(peer, peer.hex())
        log.warning("node %s refused %s for %s: %s", node, kind, job_id, msg.reason)
        job = life.cluster.active.get(job_id)
        if job is None or job.attempt != attempt or not job.state.holds_gpu:
            return
        now = life.clock()
        if kind == "start_job":
            if life.count_failure(job):
                life.finish(job, JobState.FAILED, now, f"agent refused to start it: {msg.reason}")
            else:
                life.requeue(job, now, f"agent refused to start it: {msg.reason}")
        elif kind in ("suspend_job", "cancel_job", "adopt"):
            # no such runner there: make sure, and back to the queue from its checkpoint
            holder = life.cluster.nodes.get(job.node or "")
            if holder is not None:
                life.outbox.send(holder, s.KillJob(job=job.id))
            life.requeue(job, now, f"agent has no runner for it ({msg.reason})")


@lru_cache(maxsize=1 << 16)
def _gpu_index(gpu: str) -> int:
    """A placed fragment's GPU index (a heartbeat asks it of every job's fragments)."""
    return split_gpu_id(gpu)[1]
