"""The agent-facing protocol: register, heartbeat, runner events and exits, command replies."""

from __future__ import annotations

from typing import Any

from tfgshare import schema as s
from tfgshare.coordinator.cluster import LiveJob, Node, split_gpu_id
from tfgshare.coordinator.errors import REPLIED, RequestError, number, short
from tfgshare.coordinator.gangs import spans_nodes
from tfgshare.coordinator.logs import log
from tfgshare.metrics import format_duration
from tfgshare.policies.base import JobState, SampleRecord
from tfgshare.policies.forecast import (Forecast, forecast_step_s, prior_sharing,
                                        sharing_beside, waiting_beside)
from tfgshare.policies.prediction import outside_slowdown, solo_step_s, start_spill_s
from tfgshare import runner_wire as rp

MARKS_KEPT = 64   # progress marks kept per job (co-tenants' step time while a job samples)


class AgentProtocol:
    """Handlers for the messages node agents send (mixed into ``Coordinator``)."""

    def _on_register(self, peer: bytes, msg: s.Register) -> dict[str, Any]:
        caller = self._caller
        if caller is not None and msg.node != caller.name:
            raise RequestError(f"register refused: agent key {caller.name!r} may register only "
                               f"node {caller.name!r}, not {msg.node!r}", s.ErrorCode.FORBIDDEN)
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
        node.address = msg.address
        node.ports = (msg.ports.first, msg.ports.last) if msg.ports else None
        node.data_roots = None if msg.data_roots is None else (
            list(msg.data_roots) + ([str(self.checkpoint_root)] if msg.data_in_checkpoint_root
                                    else []))
        self.peers[peer] = node.name
        self.cluster.nodes_changed()
        self.store.save_node(node.name, {"gpus": [s.plain(g) for g in msg.gpus]})
        log.info("node %s joined with %d GPUs (%s), reporting %d runners", node.name,
                 len(gpus), ", ".join(f"{g.index}:{g.name} {g.memory_mb} MiB" for g in msg.gpus),
                 len(msg.jobs))
        # reply first, then adoption outcomes
        self._out.append(([peer], s.reply_ok(msg, heartbeat_s=self.heartbeat_s,
                                             node_timeout=self.config.node_timeout,
                                             checkpoint_root=str(self.checkpoint_root))))
        reported = {}
        members: set[str] = set()      # jobs whose gang member here was re-adopted
        for rj in msg.jobs:
            job = self.cluster.active.get(rj.job)
            if (job is not None and job.node == node.name and job.state.holds_gpu
                    and (rj.attempt is None or rj.attempt == job.attempt)
                    and all(split_gpu_id(f.gpu)[1] in gpus for f in job.fragments)
                    # a gang's chief only with its members known (not after a restart)
                    and (not spans_nodes(job.fragments) or job.id in self.gangs)):
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
            elif self._adopt_member(node.name, rj):
                members.add(rj.job)
            else:
                log.info("node %s: runner of %s is not wanted here; asking to kill it",
                         node.name, rj.job)
                self._send(node, s.KillJob(job=rj.job))
        for job in [j for j in self.cluster.holders() if j.node == node.name]:
            if job.id not in reported:
                job.unknown = False
                self._requeue(job, now, f"node {node.name} re-registered without it")
        # its gang members not reported died with its old agent (or were killed above)
        self._members_gone(node.name, now, "its agent registered again", frozenset(members))
        self._dirty = True
        return REPLIED

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
            if job.sample is None:
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
        """Keep the GPU utilisation of a job not yet sampled that has its GPUs to itself.

        The first few hundred readings are enough for a mean; a long run keeps no more.
        """
        if len(job.solo_util) >= 512 or self.cluster.co_tenants(job):
            return
        now = self.clock()
        for f in job.fragments:
            util = node.gpu_util.get(split_gpu_id(f.gpu)[1])
            if util is not None:
                job.solo_util.append((now, util))

    def _agent_node(self, peer: bytes, name: str) -> Node:
        registered = self.peers[peer]
        if name != registered:
            raise RequestError(f"this agent registered as node {registered!r}, not {name!r}",
                               s.ErrorCode.NOT_REGISTERED)
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
        if self._member_event(peer, msg):   # a gang member other than the chief (gangs.py)
            return {}
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
        details = " ".join(f"{k}={short(v)}" for k, v in ev.items() if k not in ("event", "time"))
        self._log(job, now, f"{msg.node} #{msg.attempt} {name} {details}".rstrip(),
                  decision=name in ("started", "sample", "suspended", "finished", "error"))
        step = number(ev, "global_step" if name == "started" else "step", int)
        if step is not None and name in ("started", "progress", "finished", "suspended",
                                         "checkpoint"):
            job.steps_done = step
        if name in ("started", "progress"):
            job.training = True
            job.end_move(now)        # it trains again: a resume or migration ends
        if name == "progress":
            step_time = number(ev, "step_time_s", float)
            if step_time is not None and step_time > 0:
                job.step_time_s = step_time
            self._note_progress(job, ev, now)
        elif name == "sample":
            self._record_sample(job, ev, now)
        elif name == "start_phases":
            # process start (import), graph, restore and first step: the restart half
            # of its move cost (JobView.move_cost_s); waiting for a runner is not in it
            parts = [number(ev, k, float) for k in ("start_s", "graph_s", "restore_s",
                                                    "first_step_s")]
            job.start_cost_s = sum(max(0.0, x) for x in parts if x is not None)
            if ev.get("restored_from"):   # a resume: its graph imported, its checkpoint read
                self.cluster.forecast.note_resume(job.spec.model_name, job.start_cost_s)
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
        job.sample = SampleRecord(step_time_s=step_time, peak_memory_mb=peak, co_tenants=co,
                                  gpu_util=self._sampled_util(job, ev))
        job.measured_step_s = step_time
        job.sampling_start = job.last_start
        sharing = self._sharing_beside(job, job.last_start, now) if co else None
        self.cluster.forecast.note_sharing(sharing)
        waited, ran = self._cpu_per_step(job, ev)
        job.solo_step_s = solo_step_s(step_time, sharing, waited, ran)
        self.cluster.forecast.note_util(job.sample.gpu_util)
        runnable = max(0.0, number(ev, "cluster_runnable", float) or 0.0)
        job.sampled_beside = max(0.0, runnable - co) if self._virtual(job) else None
        job.sampled_on = job.node
        if job.last_start is not None and job.node is not None:
            self.cluster.forecast.note_spill(start_spill_s(
                job.sampled_beside, now - job.last_start,
                self.cluster.forecast.starts_between(job.node, job.last_start, now)),
                job.sampled_beside)
        if waited is not None:   # on virtual GPUs: the rest of its slowdown came from outside
            self.cluster.forecast.note_outside(outside_slowdown(
                step_time, job.solo_step_s, runnable))
        warmup = number(ev, "warmup_steps", int) or 0
        start = number(ev, "window_start", float)
        if start is not None and job.last_start is not None:
            # all before the sampled steps beyond plain steps: process start, graph build
            job.restart_s = max(0.0, start - job.last_start - warmup * step_time)
            job.attempt_step0 = None
        if job.sample_only:
            # predicted when the sampling run has exited (its tail is measured then)
            job.predicted_remaining_s = job.predict(1)
        else:
            job.predicted_remaining_s = job.predict(0)
            job.note_prediction(job.predicted_remaining_s, now)

    def _note_progress(self, job: LiveJob, ev: dict[str, Any], now: float) -> None:
        """Refresh the measured step time, the cost of this start, and the prediction."""
        step = number(ev, "step", int)
        left = number(ev, "predicted_remaining_s", float)
        total = job.spec.max_number_of_steps
        if step is not None and left is not None and total > step:
            job.measured_step_s = left / (total - step)   # the runner's running average
        if step is not None:
            if job.marks_attempt != job.attempt:
                job.marks, job.marks_attempt = [], job.attempt
            job.marks = (job.marks + [(now, step)])[-MARKS_KEPT:]
        if (job.attempt_step0 is not None and step is not None and job.measured_step_s
                and job.last_start is not None and step > job.attempt_step0):
            job.restart_s = max(0.0, now - job.last_start
                                - (step - job.attempt_step0) * job.measured_step_s)
            job.attempt_step0 = None
        left = job.predict(0)
        if left is not None:
            job.predicted_remaining_s = left

    def _sampling_ended(self, job: LiveJob, now: float) -> None:
        """Predict a sampled job's run time once its sampling run has exited (saved):
        its step time alone at the co-location it is expected to see
        (``ColocationForecast``), and its start."""
        if job.sampling_start is not None:
            self.cluster.forecast.note_sampling(now - job.sampling_start)
            job.sampling_start = None
        # its next start is a resume (a graph imported, a checkpoint read)
        forecast = self.cluster.forecast
        restart = forecast.restart_s(job.spec.model_name, job.last_start_s())
        found = self._forecast(job, restart, now)
        if found is not None:
            job.measured_step_s, job.after_sampling = found
        job.predicted_remaining_s = job.predict(1, restart)
        if job.predicted_remaining_s is not None:
            job.note_prediction(job.predicted_remaining_s, now)
            if job.solo_step_s is not None and job.sample is not None:
                sharing = forecast.sharing_now(prior_sharing(forecast, self.policy, job))
                self._log(job, now, (
                    f"predicted to run {format_duration(job.predicted_remaining_s)} more: "
                    f"{job.solo_step_s:.4f} s a step alone, x{forecast.outside_now():.2f} "
                    f"slower from other work on its machine, x{sharing:.2f} from sharing its "
                    f"GPU while new jobs are sampled ("
                    f"{'as measured' if forecast.sharing else 'a first guess: none measured yet'}"
                    f"), x{job.after_sampling:.2f} once none is left to sample; so "
                    f"{job.measured_step_s:.4f} s a step, after {restart:.1f} s to start again"))

    def _forecast(self, job: LiveJob, restart: float, now: float) -> Forecast | None:
        """A sampled job's step time, sharing included, and its slowdown once none is
        left to sample (``policies.forecast.forecast_step_s``, from the live jobs);
        None before it has a sample and a step time alone."""
        if job.solo_step_s is None or job.sample is None:
            return None
        cluster = self.cluster
        unsampled = cluster.counts.get("queued", 0) + cluster.counts.get("sampling", 0)
        waiting, mean_run_s = waiting_beside(cluster.active.values(), job, run_left_s)
        node = cluster.nodes.get(job.node or job.sampled_on or "")
        return forecast_step_s(cluster.forecast, self.policy, job, job.view(),
                               max(0, job.spec.max_number_of_steps - job.steps_done), restart,
                               now, jobs=cluster.active.values(), left_s=run_left_s,
                               unsampled=unsampled, gpus=len(cluster.snapshot().gpus),
                               waiting=waiting + unsampled, mean_run_s=mean_run_s,
                               node_units=len(node.gpus) if node is not None else 1)

    def _sharing_beside(self, job: LiveJob, since: float | None, now: float) -> float | None:
        """How much the running jobs beside ``job`` were slowed while it sampled
        (``policies.forecast.sharing_beside``): their step time from their progress
        marks since ``since`` over their step time alone (None if none was measured)."""
        if since is None:
            return None
        return sharing_beside(job, lambda gpu: self.cluster.tenants.get(gpu, {}).values(),
                              lambda other: marked_step_s(other, since, now))

    def _cpu_per_step(self, job: LiveJob, ev: dict[str, Any]) -> tuple[float | None, float]:
        """On virtual GPUs, the time the runner waited for a core and ran (over its
        cores) per sampled step (``cpu_wait_s``, ``cpu_run_s`` over ``sampled_steps``);
        (None, 0) elsewhere or unreported."""
        waited = number(ev, "cpu_wait_s", float)
        ran = number(ev, "cpu_run_s", float)
        steps = number(ev, "sampled_steps", int)
        if waited is None or not steps or not self._virtual(job):
            return None, 0.0
        return max(0.0, waited) / steps, max(0.0, ran or 0.0) / steps

    def _virtual(self, job: LiveJob) -> bool:
        """Whether the job's fragments are all on virtual GPUs (CPU cores)."""
        node = self.cluster.nodes.get(job.node or "")
        infos = [node.gpus.get(split_gpu_id(f.gpu)[1]) for f in job.fragments] if node else []
        return bool(infos) and all(i is not None and i.virtual for i in infos)

    def _sampled_util(self, job: LiveJob, ev: dict[str, Any]) -> float:
        """The job's single-tenant utilisation over its sampled steps, in [0, 1].

        On virtual GPUs: the runner's own CPU time over the sampled window, as
        a share of the cores it may use (``cpu_util``). On real GPUs: the
        device utilisation the agent reported while the job sampled alone,
        from the heartbeats inside the sampled window. 1 (the safe guess)
        when neither was measured.
        """
        if self._virtual(job):
            util = number(ev, "cpu_util", float)
        else:
            start = number(ev, "window_start", float)
            seen = [u for t, u in job.solo_util if start is None or t >= start]
            util = sum(seen) / len(seen) if seen else None
        return 1.0 if util is None else min(1.0, max(0.0, util))

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
        if self._member_exit(peer, msg):   # a gang member other than the chief (gangs.py)
            return {}
        job = self._current(peer, msg)
        if job is None:
            late = self._late(msg)
            if late is not None and msg.exit_code == rp.EXIT_OK:
                self._finish(late, JobState.FINISHED, self.clock(),
                             "exit 0, reported after it was re-queued")
                return {}
            return {"stale": True}
        now = self.clock()
        code = msg.exit_code
        why = f"exit {code}" + (f" ({msg.reason})" if msg.reason else "")
        if code == rp.EXIT_OK:
            self._finish(job, JobState.FINISHED, now, why)
        elif job.cancel_requested:
            self._finish(job, JobState.CANCELLED, now, f"cancelled, runner {why}")
        elif code == rp.EXIT_SUSPENDED:
            if job.migrate_to is not None:
                self._complete_migration(job, now)
            elif job.sample_only:
                self._to_waiting(job, JobState.SAMPLED if job.sample else JobState.QUEUED, now,
                                 "speed and memory measured; waits for a place to run" if job.sample
                                 else "sampling ended without a record")
                self._sampling_ended(job, now)
                self._save(job)
            else:
                self._to_waiting(job, JobState.SUSPENDED, now, "suspended to its checkpoint")
        elif code == rp.EXIT_OUT_OF_MEMORY:
            self._out_of_memory(job, now, why)
        elif code in (rp.EXIT_BAD_INPUT, rp.EXIT_CHECKPOINT_ERROR):
            kind = "bad input" if code == rp.EXIT_BAD_INPUT else "checkpoint error"
            detail = msg.reason or job.reason
            self._finish(job, JobState.FAILED, now, f"{kind}: {detail}" if detail else kind)
        else:
            if self._count_failure(job):
                self._finish(job, JobState.FAILED, now,
                             f"crashed ({why}) {job.retries} times without progress; giving up")
            else:
                self._requeue(job, now, f"crashed ({why}); retry {job.retries} of "
                                        f"{self.config.max_retries} from its checkpoint")
        self._start_reserved(now)
        return {}

    def _out_of_memory(self, job: LiveJob, now: float, why: str) -> None:
        """Re-queue a job that ran out of memory, at its place, to be re-sized from its peak.

        The policy sizes its next fragment from the measured peak plus headroom
        (``JobView.min_memory_mb``). It fails only when no GPU could hold that peak.
        """
        job.out_of_memory += 1
        for f in job.fragments:   # at least the fragment it passed
            info = self.cluster.gpu(f.gpu)
            if info is not None:
                job.memory_need_mb = max(job.memory_need_mb, f.fraction * info.memory_mb)
        largest = max((g.memory_mb for n in self.cluster.nodes.values() for g in n.gpus.values()),
                      default=0)
        if job.memory_need_mb + self.cluster.reserve_mb > largest:
            self._finish(job, JobState.FAILED, now,
                         f"out of memory at {job.memory_need_mb:.0f} MiB per GPU: no GPU "
                         f"could hold it (largest {largest} MiB); {why}")
            return
        self._requeue(job, now, f"out of memory ({why}); re-sized from its peak "
                                f"{job.memory_need_mb:.0f} MiB")

    def _on_reply(self, peer: bytes, msg: s.Message) -> None:
        sent = self.pending.get(msg.id)
        if sent is None or self.peers.get(peer) != sent[3]:
            return                   # not an answer to a command we sent to this peer
        del self.pending[msg.id]
        if not isinstance(msg, s.Error):
            return
        job_id, attempt, kind, _node = sent
        node = self.peers.get(peer, peer.hex())
        log.warning("node %s refused %s for %s: %s", node, kind, job_id, msg.reason)
        job = self.cluster.active.get(job_id)
        if job is None or job.attempt != attempt or not job.state.holds_gpu:
            return
        now = self.clock()
        if kind == "start_job":
            if self._count_failure(job):
                self._finish(job, JobState.FAILED, now, f"agent refused to start it: {msg.reason}")
            else:
                self._requeue(job, now, f"agent refused to start it: {msg.reason}")
        elif kind in ("suspend_job", "cancel_job", "adopt"):
            # no such runner there: make sure, and back to the queue from its checkpoint
            holder = self.cluster.nodes.get(job.node or "")
            if holder is not None:
                self._send(holder, s.KillJob(job=job.id))
            self._requeue(job, now, f"agent has no runner for it ({msg.reason})")


def marked_step_s(job: LiveJob, since: float, now: float) -> float | None:
    """A running job's step time from ``since`` to ``now`` by its progress marks in its
    current start (None with fewer than two marks, or none of this start)."""
    if job.marks_attempt != job.attempt:
        return None
    seen = [(t, st) for t, st in job.marks if since <= t <= now]
    if len(seen) >= 2 and seen[-1][1] > seen[0][1]:
        return (seen[-1][0] - seen[0][0]) / (seen[-1][1] - seen[0][1])
    return None


def run_left_s(job: LiveJob) -> float | None:
    """Its refreshed prediction of the run time left, once sampled (None before)."""
    return job.predicted_remaining_s if job.sample is not None else None
