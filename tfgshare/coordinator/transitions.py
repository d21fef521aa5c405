"""The job state machine's transitions: start, suspend, migrate, requeue, finish, node loss."""

from __future__ import annotations

from tfgshare import schema as s
from tfgshare.coordinator.cluster import LiveJob, Node, split_gpu_id
from tfgshare.coordinator.gangs import spans_nodes
from tfgshare.coordinator.logs import log
from tfgshare.policies.base import Fragment, JobState


class Transitions:
    """Moves a job between states, keeping the cluster, the store and the agents in step."""

    def _release(self, job: LiveJob, now: float) -> None:
        """It gave its GPUs back (its runner is gone): the hold and any open move end."""
        if job.last_start is not None:
            job.attained_service_s += max(0.0, now - job.last_start) * job.spec.num_gpus
        job.end_hold(now)
        self.cluster.unplace(job)
        self._end_gang(job)
        job.node, job.sample_only = None, False
        job.gpu_memory_mb, job.over_memory = {}, ""
        job.training, job.step_time_s = False, None
        self._dirty = True

    def _count_failure(self, job: LiveJob) -> bool:
        """Count a failed attempt; True when that was one too many (the job should fail).

        Only failures without progress count: a job that trained past the furthest
        step of its last counted failure starts counting again from one.
        """
        if job.steps_done > job.retry_steps:
            job.retries = 0
        job.retries += 1
        job.retry_steps = max(job.retry_steps, job.steps_done)
        return job.retries > self.config.max_retries

    def _to_waiting(self, job: LiveJob, state: JobState, now: float, why: str) -> None:
        self._release(job, now)
        left = job.predict(1)    # it must start again
        if left is not None:
            job.predicted_remaining_s = left
        job.state = state
        job.begin_wait(now)
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
        job.end(now)
        job.reason = why
        job.cancel_requested = False
        self.cluster.retire(job)
        self._save(job)
        self._log(job, now, f"{state.value}: {why}")

    def _start(self, job: LiveJob, fragments: tuple[Fragment, ...], sample_only: bool,
               now: float, note: str = "") -> None:
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
            job.solo_util = []
        self._save(job)
        where = ", ".join(f"{f.gpu} f={f.fraction:.3f}" for f in fragments)
        what = "sample" if sample_only else ("resume" if job.steps_done else "start")
        self._log(job, now, f"{note or what} on {where} (attempt {job.attempt})")
        if spans_nodes(fragments):   # a gang: one runner per node, worker 0 on ``node``
            why = self._start_gang(job, fragments, sample_only,
                                   str(self.checkpoint_root / job.id))
            if why:
                self._requeue(job, now, why)
            return
        self._send(node, s.StartJob(
            job=job.id, attempt=job.attempt, spec=job.spec,
            fragments=[s.FragmentSpec(split_gpu_id(f.gpu)[1], f.fraction) for f in fragments],
            train_dir=str(self.checkpoint_root / job.id), sample_only=sample_only), job)

    def _ask_suspend(self, job: LiveJob, now: float, why: str,
                     target: tuple[Fragment, ...] | None = None) -> None:
        node = self.cluster.nodes[job.node]
        job.state = JobState.SUSPENDING
        self.cluster.set_migration(job, target)
        job.begin_move(now)
        if target is None:
            job.suspends += 1
            self.metrics.suspends.inc()
        self._save(job)
        to = f" to migrate to {', '.join(f.gpu for f in target)}" if target else ""
        self._log(job, now, f"suspend{to} ({why})")
        self._send(node, s.SuspendJob(job=job.id, attempt=job.attempt), job)
        self._to_members(job, lambda: s.SuspendJob(job=job.id, attempt=job.attempt))

    def _complete_migration(self, job: LiveJob, now: float) -> None:
        target = job.migrate_to
        self._release(job, now)
        job.state = JobState.SUSPENDED
        job.begin_wait(now)
        if all(self.cluster.gpu(f.gpu) is not None for f in target):
            # its target stays reserved; it starts there now, or once a move
            # planned with this one frees the room
            job.reason = "migrating"
            self.cluster.set_reservation(job, target, "migrated")
            self._save(job)
            self._start_reserved(now)
        else:
            job.reason = "migration target went down; waiting"
            self._save(job)
            self._log(job, now, job.reason)

    def _reserve(self, job: LiveJob, fragments: tuple[Fragment, ...], sample_only: bool,
                 now: float) -> None:
        """Hold fragments for a waiting job until moves in flight free them, then start it."""
        self.cluster.set_reservation(job, tuple(fragments), "sample" if sample_only else "")
        self.cluster.refresh(job)
        where = ", ".join(f"{f.gpu} f={f.fraction:.3f}" for f in fragments)
        self._log(job, now, f"reserved {where}: starts once a move in flight frees it")

    def _start_reserved(self, now: float) -> None:
        """Start the jobs whose reserved fragments are free now; drop those on down GPUs."""
        for job in list(self.cluster.reserved.values()):
            frags = job.reserved
            if any(self.cluster.gpu(f.gpu) is None for f in frags):
                self.cluster.set_reservation(job, None)
                self.cluster.refresh(job)
                self._log(job, now, "reservation dropped: its GPU went down")
                self._dirty = True
                continue
            if all(self.cluster.fits(f.gpu, f.fraction, skip=job.id) for f in frags):
                kind = job.reserved_as
                self.cluster.set_reservation(job, None)
                if kind == "migrated":
                    job.migrations += 1
                    self.metrics.migrations.inc()
                self._start(job, frags, kind == "sample", now,
                            note="migrated" if kind == "migrated" else "")

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
        self._members_gone(node.name, now, f"node lost: {why}")
        self._start_reserved(now)
        self._dirty = True
