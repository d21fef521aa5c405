"""The job lifecycle: the one owner of the coordinator's state and of every job's moves.

``Lifecycle`` owns the live cluster (``cluster``: jobs, nodes, fragments), the
state database (``store``), the metrics, the agents known by their routing id
(``peers``), the outbox (agent commands, the commands awaiting an answer, job log
lines), the gangs in flight (``gangs``), and the job state machine's moves:
admit, start, reserve, suspend, migrate, requeue, finish, a node or gang member
lost. The request handlers (``agents``, ``clients``) and the rounds (``rounds``)
call its public methods; it calls nothing of theirs, nor the server's.

May import: ``tfgshare.schema``, ``policies.base`` and the coordinator's
``cluster``, ``config``, ``errors``, ``exporter``, ``gangs``, ``logs``, ``outbox``
and ``store``; never ``server``, ``agents``, ``clients``, ``measures`` or ``rounds``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Iterable

from tfgshare import schema as s
from tfgshare.coordinator.cluster import Cluster, LiveJob, Node, split_gpu_id
from tfgshare.coordinator.config import CoordinatorConfig
from tfgshare.coordinator.errors import RequestError
from tfgshare.coordinator.exporter import (CoordinatorMetrics, job_record, prediction_error,
                                           report_fields, stored_report)
from tfgshare.coordinator.gangs import Gangs, spans_nodes
from tfgshare.coordinator.logs import log
from tfgshare.coordinator.outbox import Outbox
from tfgshare.coordinator.store import StateStore
from tfgshare.policies.base import Fragment, JobState, Policy
from tfgshare.policies.prediction import view_refresh_s

# The usage pass (gauges, a timeline point) takes at most this share of the loop's time:
# at 10,000 GPUs and 30,000 running jobs it costs 0.15-0.2 s (bench_round_cpu.py), so
# it runs about every 8-10 s there and each 1-s tick below a few thousand GPUs. A choice:
# a gauge scraped every 15 s loses nothing, and a round's wait for the loop is the cost.
USAGE_SHARE = 0.02
# A running job's progress-only record (its steps, step time, prediction) is written at
# most this often: a coordinator that restarts sees steps up to this old until the job's
# next report (its runner goes on training). At 10,000 GPUs writing job records, most of
# them progress, was 18 % of the loop (py-spy on a soak). Any other change is written at once.
PROGRESS_SAVE_S = 60.0


class Lifecycle:
    """Jobs from submission to their end, with the cluster, the store and the agents in step."""

    def __init__(self, config: CoordinatorConfig, clock: Callable[[], float], policy: Policy,
                 checkpoint_root: Path) -> None:
        self.config, self.clock, self.policy = config, clock, policy
        self.checkpoint_root = checkpoint_root
        self.store = StateStore(config.state)
        self._db_refused_at: float | None = None   # when a commit was last refused and said
        self.cluster = Cluster(config.reserve_mb)
        self.metrics = CoordinatorMetrics()
        self.peers: dict[bytes, str] = {}            # agent routing id -> node name
        self.outbox = Outbox()
        self.gangs = Gangs(self.cluster, self.store, self.outbox)
        self.dirty = True                            # a scheduling round is due
        self.seq = 0                                 # the last job number given
        self.last_submit = 0.0
        self.started_at = clock()
        self.awaiting_readoption = False
        self.usage_due = float("-inf")               # when the next usage pass may run
        self.progress_saved: dict[str, float] = {}   # running job -> its last progress write
        self.load()

    # ---- start-up and the database -------------------------------------------------

    def load(self) -> None:
        """Take back the stored nodes, active jobs, gangs, counts and timeline."""
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
            self.last_submit = max(self.last_submit, job.submit_time)
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
        self.last_submit = max(self.last_submit, self.store.last_submit())
        self.seq = self.store.max_seq()
        self.gangs.restore()
        self.awaiting_readoption = unknown > 0
        for point in self.store.load_timeline():   # None: not recorded by an older version
            self.metrics.timeline.add(*(0.0 if v is None else v for v in point))
        if self.cluster.active or done:
            log.info("loaded %d jobs (%d active, %d running before the restart, now unknown; "
                     "%d done, left in the database) and %d nodes",
                     len(self.cluster.active) + done, len(self.cluster.active), unknown, done,
                     len(self.cluster.nodes))

    def save_logs(self) -> None:
        """Write the job log lines kept so far to the database."""
        if self.outbox.logs:
            self.store.append_logs(self.outbox.logs)
            self.outbox.logs.clear()

    def commit(self) -> None:
        """Commit the log lines and the database; while it refuses (a full disk), go on
        from memory and say so."""
        self.save_logs()
        was_broken = self._db_refused_at is not None
        t0, store = time.perf_counter(), self.store
        if store.commit():
            if store.committed_rows:
                self.metrics.db_commits.observe(time.perf_counter() - t0)
                self.metrics.db_rows.inc(store.committed_rows)
                self.metrics.db_write.inc(store.committed_write_s)
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

    def close(self) -> bool:
        """Write the running jobs' latest progress and close the store; False if the
        last writes could not be made durable."""
        for job_id in self.progress_saved:
            job = self.cluster.active.get(job_id)
            if job is not None:
                self._save_record(job)
        self.progress_saved.clear()
        return self.store.close()

    def save(self, job: LiveJob) -> None:
        """Store the job as it is now (a done one with its report figures)."""
        now = self.clock()
        self.cluster.refresh(job)
        job.viewed_at = now
        self.progress_saved.pop(job.id, None)
        report = None
        if job.state.done:   # the report reads it from the database
            rec = job_record(job, now)
            report = report_fields(rec)
            self.store.save_done(job.seq, report, prediction_error(rec))
        self.store.save_job(job.id, lambda: (job.to_record(), report))

    def save_progress(self, job: LiveJob, now: float) -> bool:
        """Store a training job's progress report (at most every ``PROGRESS_SAVE_S``); the
        policy's view of the job follows it as the simulator's running jobs report
        (``prediction.view_refresh_s``). True when it was stored."""
        if self._view_due(job, now):
            self.save(job)
            return True
        last = self.progress_saved.get(job.id)
        if last is None or now - last >= PROGRESS_SAVE_S:
            self.progress_saved[job.id] = now
            self._save_record(job)
            return True
        return False

    def _save_record(self, job: LiveJob) -> None:
        """Write the job's record as it is at the turn's commit (no report: it runs)."""
        self.store.save_job(job.id, lambda: (job.to_record(), None))

    def follow_steps(self, job: LiveJob, step: int, now: float) -> None:
        """A heartbeat's step of a job holding GPUs: kept, its run time left predicted
        from it (progress reports are paced: ``tfgshare.agent.pacer``), and in the
        policy's view when a refresh is due (``prediction.view_refresh_s``)."""
        job.steps_done = step
        if job.state is JobState.RUNNING:
            left = job.predict(0)
            if left is not None:
                job.predicted_remaining_s = left
        if self._view_due(job, now):
            self.cluster.refresh(job)
            job.viewed_at = now

    @staticmethod
    def _view_due(job: LiveJob, now: float) -> bool:
        """Whether the policy's view of a running job should follow it now."""
        return now - job.viewed_at >= view_refresh_s(job.predicted_remaining_s)

    def job(self, job_id: str) -> LiveJob:
        """The job in memory, else as stored (a done job); RequestError if none."""
        job = self.cluster.jobs.get(job_id)
        if job is None:
            rec = self.store.load_job(job_id) if isinstance(job_id, str) else None
            if rec is None:
                raise RequestError(f"no job {job_id!r}", s.ErrorCode.NOT_FOUND)
            job = LiveJob.from_record(rec)
        return job

    # ---- admission and the clock ---------------------------------------------------

    def submit(self, specs: list[s.JobSpec], owner: str, now: float) -> list[str]:
        """Admit checked job specs to the queue; their ids."""
        rows, ids = [], []
        for spec in specs:
            self.seq += 1
            # strictly increasing submit times keep arrival order within a batch
            self.last_submit = max(now, self.last_submit + 1e-6)
            job = LiveJob(id=f"j{self.seq}", seq=self.seq, spec=spec, owner=owner,
                          submit_time=self.last_submit, last_wait_start=self.last_submit)
            self.cluster.add(job)
            rows.append((job.id, job.seq, job.to_record()))
            ids.append(job.id)
            self.outbox.log_job(job, now, f"submitted {spec.model_name} batch "
                                          f"{spec.batch_size}, {spec.max_number_of_steps} "
                                          f"steps, {spec.num_gpus} GPU(s), fraction "
                                          f"{spec.memory_fraction}", decision=False)
        self.store.insert_jobs(rows)
        log.info("submitted %d job(s): %s", len(ids),
                 ", ".join(ids) if len(ids) <= 5 else f"{ids[0]}..{ids[-1]}")
        self.dirty = True
        return ids

    def check_timeouts(self, now: float, heard: float | None = None) -> None:
        """Nodes silent past the node timeout up to ``heard`` (when every message sent
        before had been read; default now) are lost; jobs nobody re-adopted within it
        of a restart go back to the queue."""
        timeout = self.config.node_timeout
        heard = now if heard is None else heard
        for node in list(self.cluster.up_nodes()):
            if heard - node.last_seen > timeout:
                self.node_lost(node, now, f"no heartbeat for {now - node.last_seen:.1f}s")
        if self.awaiting_readoption and now - self.started_at > timeout:
            self.awaiting_readoption = False
            for job in [j for j in self.cluster.active.values() if j.unknown]:
                job.unknown = False
                self.requeue(job, now, f"node {job.node} did not report it within "
                                       f"{timeout:g}s of the restart")
            why = f"not reported within {timeout:g}s of the restart"
            for job, gang in self.gangs.not_readopted():   # back to their last checkpoint
                self.requeue(job, now, f"gang member on {', '.join(sorted(gang.awaited))} "
                                       f"{why}; the gang restarts from its last checkpoint")
            self.start_reserved(now)

    def record_usage(self, now: float) -> None:
        """Refresh the gauges and add a timeline point: each tick, or less often where
        this pass over every GPU and job would take over ``USAGE_SHARE`` of the time."""
        if now < self.usage_due:
            return
        t0 = time.perf_counter()
        use, queued = self.metrics.update(self.cluster, now)
        timeline = self.metrics.timeline
        t = max(now, timeline.times[-1]) if len(timeline) else now
        point = (t, use.allocated, use.effective, queued, use.device, use.busy)
        timeline.add(*point)
        self.store.add_timeline(*point)
        self.usage_due = now + (time.perf_counter() - t0) / USAGE_SHARE

    # ---- the state machine's moves -------------------------------------------------

    def _release(self, job: LiveJob, now: float) -> None:
        """It gave its GPUs back (its runner is gone): the hold and any open move end."""
        if job.last_start is not None:
            job.attained_service_s += max(0.0, now - job.last_start) * job.spec.num_gpus
        job.end_hold(now)
        self.cluster.unplace(job)
        self.gangs.end(job)
        job.node, job.sample_only = None, False
        job.gpu_memory_mb, job.over_memory = {}, ""
        job.training, job.step_time_s = False, None
        self.dirty = True

    def count_failure(self, job: LiveJob) -> bool:
        """Count a failed attempt; True when that was one too many (the job should fail).

        Only failures without progress count: a job that trained past the furthest
        step of its last counted failure starts counting again from one.
        """
        if job.steps_done > job.retry_steps:
            job.retries = 0
        job.retries += 1
        job.retry_steps = max(job.retry_steps, job.steps_done)
        return job.retries > self.config.max_retries

    def to_waiting(self, job: LiveJob, state: JobState, now: float, why: str) -> None:
        """Its runner is gone: it waits in ``state`` (queued, sampled or suspended)."""
        self._release(job, now)
        left = job.predict(1)    # it must start again
        if left is not None:
            job.predicted_remaining_s = left
        job.state = state
        job.begin_wait(now)
        job.reason = why
        self.save(job)
        self.outbox.log_job(job, now, f"{state.value}: {why}")

    def requeue(self, job: LiveJob, now: float, why: str) -> None:
        """Back to the queue from its checkpoint (or to be re-sampled)."""
        if job.cancel_requested:
            self.finish(job, JobState.CANCELLED, now, f"cancelled ({why})")
        elif job.sample_only:
            self.to_waiting(job, JobState.SAMPLED if job.sample else JobState.QUEUED, now, why)
        else:
            self.to_waiting(job, JobState.SUSPENDED, now, why)

    def finish(self, job: LiveJob, state: JobState, now: float, why: str) -> None:
        """The job ends in ``state`` (finished, failed or cancelled)."""
        self._release(job, now)
        job.state = state
        job.end(now)
        job.reason = why
        job.cancel_requested = False
        self.cluster.retire(job)
        self.save(job)
        self.outbox.log_job(job, now, f"{state.value}: {why}")

    def start(self, job: LiveJob, fragments: tuple[Fragment, ...], sample_only: bool,
              now: float, note: str = "") -> None:
        """Place the job on ``fragments`` and send its node (each gang member's) a start."""
        node = self.cluster.nodes[split_gpu_id(fragments[0].gpu)[0]]
        # a resume, or the second half of a migration, costs until it trains again
        migrated = note == "migrated"   # the end of a migration, from its reserved target
        moving = job.state is JobState.SUSPENDING or migrated
        if job.state is JobState.SUSPENDED and not migrated:
            job.resumes += 1
            self.metrics.resumes.inc()
            moving = True
        job.attempt += 1
        self.cluster.forecast.note_start(node.name, now)   # its spare's replacement imports
        job.begin_hold(now)
        if moving:
            job.begin_move(now)
        job.training, job.step_time_s = False, None
        job.state = JobState.SAMPLING if sample_only else JobState.RUNNING
        self.cluster.place(job, fragments)
        job.node, job.sample_only = node.name, sample_only
        job.attempt_step0 = job.steps_done   # this start's cost is measured at its first progress
        job.pinned = False
        if sample_only:
            job.solo_util, job.solo_util_sum = [], 0.0
        self.save(job)
        where = ", ".join(f"{f.gpu} f={f.fraction:.3f}" for f in fragments)
        what = "sample" if sample_only else ("resume" if job.steps_done else "start")
        self.outbox.log_job(job, now, f"{note or what} on {where} (attempt {job.attempt})")
        if spans_nodes(fragments):   # a gang: one runner per node, worker 0 on ``node``
            why = self.gangs.start(job, fragments, sample_only,
                                   str(self.checkpoint_root / job.id))
            if why:
                self.requeue(job, now, why)
            return
        self.outbox.send(node, s.StartJob(
            job=job.id, attempt=job.attempt, spec=job.spec,
            fragments=[s.FragmentSpec(split_gpu_id(f.gpu)[1], f.fraction) for f in fragments],
            train_dir=str(self.checkpoint_root / job.id), sample_only=sample_only), job)

    def ask_suspend(self, job: LiveJob, now: float, why: str,
                    target: tuple[Fragment, ...] | None = None) -> None:
        """Ask its runner (every member's) to save and exit; with ``target``, to move there."""
        node = self.cluster.nodes[job.node]
        job.state = JobState.SUSPENDING
        self.cluster.set_migration(job, target)
        job.begin_move(now)
        if target is None:
            job.suspends += 1
            self.metrics.suspends.inc()
        self.save(job)
        to = f" to migrate to {', '.join(f.gpu for f in target)}" if target else ""
        self.outbox.log_job(job, now, f"suspend{to} ({why})")
        self.outbox.send(node, s.SuspendJob(job=job.id, attempt=job.attempt), job)
        self.gangs.to_members(job, lambda: s.SuspendJob(job=job.id, attempt=job.attempt))

    def complete_migration(self, job: LiveJob, now: float) -> None:
        """Its runner saved and exited to move: start it on its target (reserved till free)."""
        target = job.migrate_to
        self._release(job, now)
        job.state = JobState.SUSPENDED
        job.begin_wait(now)
        if all(self.cluster.gpu(f.gpu) is not None for f in target):
            # its target stays reserved; it starts there now, or once a move
            # planned with this one frees the room
            job.reason = "migrating"
            self.cluster.set_reservation(job, target, "migrated")
            self.save(job)
            self.start_reserved(now)
        else:
            job.reason = "migration target went down; waiting"
            self.save(job)
            self.outbox.log_job(job, now, job.reason)

    def reserve(self, job: LiveJob, fragments: tuple[Fragment, ...], sample_only: bool,
                now: float) -> None:
        """Hold fragments for a waiting job until moves in flight free them, then start it."""
        self.cluster.set_reservation(job, tuple(fragments), "sample" if sample_only else "")
        self.cluster.refresh(job)
        where = ", ".join(f"{f.gpu} f={f.fraction:.3f}" for f in fragments)
        self.outbox.log_job(job, now, f"reserved {where}: starts once a move in flight frees it")

    def start_reserved(self, now: float) -> None:
        """Start the jobs whose reserved fragments are free now; drop those on down GPUs."""
        for job in list(self.cluster.reserved.values()):
            frags = job.reserved
            if any(self.cluster.gpu(f.gpu) is None for f in frags):
                self.cluster.set_reservation(job, None)
                self.cluster.refresh(job)
                self.outbox.log_job(job, now, "reservation dropped: its GPU went down")
                self.dirty = True
                continue
            if all(self.cluster.fits(f.gpu, f.fraction, skip=job.id) for f in frags):
                kind = job.reserved_as
                self.cluster.set_reservation(job, None)
                if kind == "migrated":
                    job.migrations += 1
                    self.metrics.migrations.inc()
                self.start(job, frags, kind == "sample", now,
                           note="migrated" if kind == "migrated" else "")

    def out_of_memory(self, job: LiveJob, now: float, why: str) -> None:
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
            self.finish(job, JobState.FAILED, now,
                        f"out of memory at {job.memory_need_mb:.0f} MiB per GPU: no GPU "
                        f"could hold it (largest {largest} MiB); {why}")
            return
        self.requeue(job, now, f"out of memory ({why}); re-sized from its peak "
                               f"{job.memory_need_mb:.0f} MiB")

    def node_lost(self, node: Node, now: float, why: str) -> None:
        """A node is gone: its jobs and the gangs with a member there back to the queue."""
        log.warning("node %s lost: %s", node.name, why)
        self.metrics.node_losses.inc()
        node.lost = True
        if node.identity is not None:
            self.peers.pop(node.identity, None)
        node.identity = None
        self.cluster.nodes_changed()
        self.outbox.forget_node(node.name)
        for job in self.held_on(node):
            job.unknown = False
            self.requeue(job, now, f"node {node.name} lost ({why})")
        self.members_gone(node.name, now, f"node lost: {why}")
        self.start_reserved(now)
        self.dirty = True

    def held_on(self, node: Node, offered: Iterable[int] = ()) -> list[LiveJob]:
        """Jobs run from ``node`` (a gang's by its chief) that hold GPU fragments: found
        among the tenants of its GPUs and of ``offered`` (GPUs it offered before), not
        by a scan of every job (a node lost or back costs its own jobs' time)."""
        tenants, found = self.cluster.tenants, {}
        for index in sorted({*node.gpus, *offered}):
            for job in tenants.get(node.gpu_id(index), {}).values():
                if job.node == node.name:
                    found[job.id] = job
        return list(found.values())

    def member_lost(self, job: LiveJob, now: float, why: str) -> None:
        """A member of a training gang is gone: all back to the last checkpoint."""
        if self.count_failure(job):
            self.finish(job, JobState.FAILED, now,
                        f"{why}; {job.retries} times without progress, giving up")
        else:
            self.requeue(job, now, f"{why}; the gang restarts from its last checkpoint "
                                   f"(retry {job.retries} of {self.config.max_retries})")
        self.start_reserved(now)

    def members_gone(self, node: str, now: float, why: str,
                     kept: frozenset[str] = frozenset()) -> None:
        """Every gang with a member on ``node`` lost it (node lost or its agent restarted),
        but the jobs in ``kept`` (their member there was re-adopted)."""
        for job in self.gangs.with_member_on(node):   # not the job's fault, as a node loss
            if job.id in kept:
                continue
            self.requeue(job, now, f"gang member on {node} gone ({why}); the gang restarts "
                                   "from its last checkpoint")
        self.start_reserved(now)
