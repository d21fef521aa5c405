"""The client-facing handlers: submit, status, nodes, logs, cancel, suspend, resume, migrate,
metrics.

``ClientHandlers`` receives the ``Lifecycle`` (and the ``Rounds``, whose figures the
metrics and status answers show) and answers the requests clients send: it checks
a request and who sends it (``may_act_on``), then asks the lifecycle for the move.
Calls go one way: handlers -> rounds (read only), lifecycle; nothing here is
called back.

May import: ``tfgshare.schema``, ``keys`` (the caller's identity), ``paths``,
``model_table``, ``policies`` (base, placement) and the coordinator's ``cluster``,
``errors``, ``exporter``, ``lifecycle`` and ``rounds``.
"""

from __future__ import annotations

import heapq
import json
from pathlib import Path
from typing import Any, Callable

from tfgshare import schema as s
from tfgshare.keys import Identity
from tfgshare.paths import confine, data_roots
from tfgshare.coordinator.cluster import LiveJob, split_gpu_id
from tfgshare.coordinator.errors import RequestError
from tfgshare.coordinator.exporter import REPORT_ROWS, error_stats, format_error, run_report
from tfgshare.coordinator.lifecycle import Lifecycle
from tfgshare.coordinator.rounds import Rounds, round_stats
from tfgshare.policies.base import Fragment, JobState
from tfgshare.policies.placement import MIN_FRACTION, fraction_for


_DONE = frozenset(st.value for st in JobState if st.done)


class ClientHandlers:
    """Answers the requests clients send, on the lifecycle (and the rounds' figures)."""

    def __init__(self, life: Lifecycle, rounds: Rounds) -> None:
        self.life, self.rounds = life, rounds

    def handlers(self) -> dict[str, Callable[[bytes, Any, Identity | None], Any]]:
        """The request types this part answers, each with its handler."""
        return {s.Submit.TYPE: self._on_submit, s.Status.TYPE: self._on_status,
                s.Nodes.TYPE: self._on_nodes, s.Logs.TYPE: self._on_logs,
                s.CancelRequest.TYPE: self._on_cancel, s.SuspendRequest.TYPE: self._on_suspend,
                s.ResumeRequest.TYPE: self._on_resume, s.MigrateRequest.TYPE: self._on_migrate,
                s.MetricsRequest.TYPE: self._on_metrics}

    def _on_submit(self, peer: bytes, msg: s.Submit,
                   caller: Identity | None) -> dict[str, Any]:
        from tfgshare.model_table import check_model
        if not msg.jobs:
            raise RequestError("submit needs at least one job")
        # the cluster's GPUs (a gang spans nodes), counted only for a job of several GPUs
        total = None
        for i, spec in enumerate(msg.jobs, 1):
            label = f"job {i} ({spec.model_name})" if len(msg.jobs) > 1 else spec.model_name
            try:
                check_model(spec.model_name, spec.image_size)
            except ValueError as exc:
                raise RequestError(f"{label}: {exc}") from None
            if spec.dataset_dir is not None:   # the agents' rule, here before it is placed
                try:
                    confine(spec.dataset_dir, self._data_roots(), "dataset_dir")
                except ValueError as exc:
                    raise RequestError(f"{label}: {exc}; the agents read datasets only under "
                                       "their data roots (tfgshare agent --data-root)") from None
            if spec.num_gpus > 1 and total is None:
                total = sum(len(n.gpus) for n in self.life.cluster.nodes.values())
            if total and spec.num_gpus > total:
                raise RequestError(
                    f"{label}: asks for {spec.num_gpus} GPUs but the cluster's nodes have "
                    f"{total} in all")
        owner = caller.name if caller is not None else ""   # from the key only
        return {"job_ids": self.life.submit(msg.jobs, owner, self.life.clock())}

    def _data_roots(self) -> list[Path]:
        """Where the agents accept a job's dataset dir: every root a node told at
        registration; while none has told, the agents' default roots."""
        told = {r for n in self.life.cluster.nodes.values() if n.data_roots for r in n.data_roots}
        if told:
            return [Path(r) for r in sorted(told)]
        return data_roots(None, self.life.checkpoint_root)

    def _on_status(self, peer: bytes, msg: s.Status,
                   _caller: Identity | None) -> dict[str, Any]:
        now = self.life.clock()
        if msg.job is not None:
            return {"job": self.describe(self.life.job(msg.job), now)}
        limit = msg.limit or s.MAX_PAGE
        if msg.active:
            page = heapq.nsmallest(limit + 1, (j for j in self.life.cluster.active.values()
                                               if j.seq > msg.cursor), key=lambda j: j.seq)
        else:   # every job: the done ones mostly from the database
            page = [self._stored(i, d)
                    for _, i, d in self.life.store.jobs_page(msg.cursor, limit + 1)]
        more = len(page) > limit
        page = page[:limit]
        counts = {state: n for state, n in self.life.cluster.counts.items() if n and state in _DONE}
        for j in self.life.cluster.active.values():
            counts[j.display_state] = counts.get(j.display_state, 0) + 1
        return {"jobs": [self.describe(j, now) for j in page], "counts": counts,
                "next_cursor": page[-1].seq if more else None,
                "policy": self.life.policy.name, "time": now,
                "prediction_error": error_stats(self.life.cluster.prediction_errors),
                "refused": dict(self.rounds.refusals)}

    def _stored(self, job_id: str, data: str) -> LiveJob:
        """The job in memory, else rebuilt from its stored record."""
        job = self.life.cluster.jobs.get(job_id)
        return job if job is not None else LiveJob.from_record(json.loads(data))

    def describe(self, job: LiveJob, now: float) -> dict[str, Any]:
        """A job as the status command shows it."""
        waited, run = job.waited_until(now), job.run_until(now)
        return {
            "id": job.id, "name": job.spec.name, "owner": job.owner, "model": job.spec.model_name,
            "state": job.display_state, "num_gpus": job.spec.num_gpus, "node": job.node,
            "fragments": [[f.gpu, f.fraction] for f in job.fragments],
            "steps_done": job.steps_done, "total_steps": job.spec.max_number_of_steps,
            "predicted_remaining_s": job.predicted_remaining_s,
            "predicted_total_s": job.predicted_total_s,
            "prediction_error": job.prediction_error,
            "measured_step_s": job.measured_step_s, "restart_s": job.restart_s,
            "save_s": job.save_s, "move_cost_s": job.view().move_cost_s,
            "submit_time": job.submit_time, "first_start": job.first_start,
            "finish_time": job.finish_time, "waited_s": waited, "run_time_s": run,
            "attempt": job.attempt, "suspends": job.suspends, "resumes": job.resumes,
            "migrations": job.migrations, "pinned": job.pinned,
            "sample": None if job.sample is None else vars(job.sample),
            "gpu_memory_mb": job.gpu_memory_mb, "over_memory": job.over_memory,
            "reason": job.reason, "memory_fraction": job.spec.memory_fraction,
        }

    def _on_nodes(self, peer: bytes, msg: s.Nodes,
                  _caller: Identity | None) -> dict[str, Any]:
        now = self.life.clock()
        on_gpu: dict[str, list[dict[str, Any]]] = {}
        for job in self.life.cluster.holders():
            for f in job.fragments:
                on_gpu.setdefault(f.gpu, []).append(
                    {"job": job.id, "fraction": f.fraction, "state": job.display_state,
                     "model": job.spec.model_name})
        nodes = []
        for node in self.life.cluster.nodes.values():
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
        return {"nodes": nodes, "reserve_mb": self.life.cluster.reserve_mb}

    def _on_logs(self, peer: bytes, msg: s.Logs,
                 _caller: Identity | None) -> dict[str, Any]:
        job = self.life.job(msg.job)
        self.life.save_logs()
        lines, cursor = self.life.store.logs_page(job.id, msg.tail, msg.cursor,
                                             msg.limit or s.MAX_LOG_PAGE)
        return {"job": job.id, "lines": lines, "next_cursor": cursor}

    def _on_cancel(self, peer: bytes, msg: s.CancelRequest,
                   caller: Identity | None) -> dict[str, Any]:
        job = self.life.job(msg.job)
        may_act_on(caller, job)
        now = self.life.clock()
        if job.state.done:
            raise RequestError(f"job {job.id} is already {job.state.value}", s.ErrorCode.CONFLICT)
        if job.state.holds_gpu and not job.unknown:
            job.cancel_requested = True
            self.life.save(job)
            self.life.outbox.log_job(job, now, "cancel requested")
            self.life.outbox.send(self.life.cluster.nodes[job.node],
                       s.CancelJob(job=job.id, attempt=job.attempt), job)
            self.life.gangs.to_members(job, lambda: s.CancelJob(job=job.id, attempt=job.attempt))
            return {"state": "cancelling"}
        job.unknown = False
        self.life.finish(job, JobState.CANCELLED, now, "cancelled by the user")
        return {"state": "cancelled"}

    def _on_suspend(self, peer: bytes, msg: s.SuspendRequest,
                    caller: Identity | None) -> dict[str, Any]:
        job = self.life.job(msg.job)
        may_act_on(caller, job)
        now = self.life.clock()
        if job.state.done:
            raise RequestError(f"job {job.id} is already {job.state.value}", s.ErrorCode.CONFLICT)
        if job.unknown:
            raise RequestError(f"job {job.id}: its node has not reported since the "
                               "coordinator restarted; try again shortly", s.ErrorCode.UNAVAILABLE)
        job.pinned = True
        if job.state in (JobState.RUNNING, JobState.SAMPLING) and not job.cancel_requested:
            self.life.ask_suspend(job, now, "asked by the user")
        else:
            self.life.cluster.set_reservation(job, None)   # a start in flight is called off
            self.life.save(job)
            self.life.outbox.log_job(job, now, "held by the user")
        return {"state": job.display_state}

    def _on_resume(self, peer: bytes, msg: s.ResumeRequest,
                   caller: Identity | None) -> dict[str, Any]:
        job = self.life.job(msg.job)
        may_act_on(caller, job)
        if job.state.done:
            raise RequestError(f"job {job.id} is already {job.state.value}", s.ErrorCode.CONFLICT)
        if not job.pinned:
            if job.state.waiting:
                return {"state": job.display_state, "note": "not held; it is waiting"}
            raise RequestError(f"job {job.id} is {job.display_state}, not suspended",
                               s.ErrorCode.CONFLICT)
        job.pinned = False
        self.life.save(job)
        self.life.outbox.log_job(job, self.life.clock(), "released by the user")
        self.life.dirty = True
        # its state after the release; the scheduler starts it at its next round
        return {"state": job.display_state, "note": "released; the scheduler places it "
                                                    "when there is room"}

    def _on_migrate(self, peer: bytes, msg: s.MigrateRequest,
                    caller: Identity | None) -> dict[str, Any]:
        job = self.life.job(msg.job)
        may_act_on(caller, job)
        now = self.life.clock()
        to = [t.strip() for t in msg.to.split(",")]
        for gpu in to:
            try:
                split_gpu_id(gpu)
            except ValueError as exc:
                raise RequestError(str(exc)) from None
            if self.life.cluster.gpu(gpu) is None:
                up = [n.gpu_id(i) for n in self.life.cluster.up_nodes() for i in sorted(n.gpus)]
                raise RequestError(f"no up GPU {gpu!r}; up GPUs: {', '.join(up) or 'none'}")
        if job.state.done:
            raise RequestError(f"job {job.id} is already {job.state.value}", s.ErrorCode.CONFLICT)
        if len(to) != job.spec.num_gpus:
            raise RequestError(f"job {job.id} uses {job.spec.num_gpus} GPUs: name as many "
                               f"(NODE:GPU,NODE:GPU,...), not {len(to)}")
        if job.unknown or job.cancel_requested or job.state in (JobState.SAMPLING,
                                                                 JobState.SUSPENDING):
            raise RequestError(f"job {job.id} is {job.display_state}; try once it runs or "
                               "waits", s.ErrorCode.CONFLICT)
        running = job.state is JobState.RUNNING
        if running and set(to) == {f.gpu for f in job.fragments}:
            raise RequestError(f"job {job.id} already runs on {msg.to}", s.ErrorCode.CONFLICT)
        fractions = self._migrate_fractions(job, to, running)
        target = tuple(Fragment(gpu, f) for gpu, f in zip(to, fractions))
        # the rule the policy's moves are checked by; a gang moves as one (gangs.py)
        reason, why = self.life.cluster.placement_problem(job, target, migrate=running)
        if reason == "later":   # room a suspend in flight frees: not now
            raise RequestError(f"job {job.id} does not fit on {msg.to} now ({why}); "
                               "try again once that move ends", s.ErrorCode.UNAVAILABLE)
        if reason:
            raise RequestError(f"job {job.id}: {why}")
        if running:
            self.life.ask_suspend(job, now, "asked by the user", target=target)
        else:
            self.life.start(job, target, False, now, note="placed by the user")
        self.life.dirty = True
        sizes = ", ".join(f"{f.gpu} fraction {f.fraction:.3f} = "
                          f"{f.fraction * self.life.cluster.gpu(f.gpu).memory_mb:.0f} MiB"
                          for f in target)
        return {"state": job.display_state, "note": f"to {sizes}"}

    def _migrate_fractions(self, job: LiveJob, to: list[str], running: bool) -> list[float]:
        """The job's fraction on each target GPU, sized from its memory, not its old fraction.

        A running job keeps the memory it holds now (its fraction times its GPU's memory;
        on GPUs of several sizes, the most); a waiting one gets what it would get there at
        a start (``fraction_for``: its sampled or measured need, else the whole GPU). A
        target that cannot hold that memory beside the reserve is refused, naming it.
        """
        snapshot = self.life.cluster.snapshot()
        reserve = self.life.cluster.reserve_mb
        held = [f.fraction * info.memory_mb for f in job.fragments
                if (info := self.life.cluster.gpu(f.gpu)) is not None]
        view = job.view()
        measured = max(view.sample.peak_memory_mb * 1.1 if view.sample is not None else 0.0,
                       view.min_memory_mb * 1.1)
        out = []
        for gpu in to:
            info = self.life.cluster.gpu(gpu)
            target = snapshot.gpu(gpu)
            top_mb = info.memory_mb - reserve
            if running and held:
                need_mb, source = max(held), "what it holds now on " + ", ".join(
                    f.gpu for f in job.fragments)
                fraction = max(MIN_FRACTION, need_mb / info.memory_mb)
            else:   # as a start there would size it
                need_mb, source = (measured if view.requested_fraction is None else 0.0,
                                   "its measured peak memory plus 10 %")
                fraction = fraction_for(view, target, reserve_mb=reserve)
            if need_mb > top_mb + 1e-6:
                raise RequestError(
                    f"job {job.id} needs {need_mb:.0f} MiB per GPU ({source}); {gpu} "
                    f"({info.name}, {info.memory_mb} MiB) can give a job at most "
                    f"{top_mb:.0f} MiB (its memory less the {reserve:.0f} MiB reserve)")
            out.append(fraction)
        return out

    def _on_metrics(self, peer: bytes, msg: s.MetricsRequest,
                    _caller: Identity | None) -> dict[str, Any]:
        now = self.life.clock()
        self.life.metrics.update(self.life.cluster, now)
        self.life.save_logs()
        done = self.life.store.done_summary()
        newest = [self._stored(i, d)
                  for _, i, d in self.life.store.jobs_page(0, REPORT_ROWS, True)]
        answer = run_report(self.life.cluster, self.life.metrics, self.life.policy.name, now,
                            done=done, newest=newest[::-1])
        answer["rounds"] = round_stats(self.rounds.round_times[msg.since_round:])
        answer["decide"] = round_stats(self.rounds.decide_times[msg.since_round:])
        answer["decide_cpu"] = round_stats(self.rounds.decide_cpu_times[msg.since_round:])
        answer["round_parts"] = {k: round_stats(v[msg.since_round:])
                                 for k, v in self.rounds.round_parts.items()}
        answer["rounds_total"] = len(self.rounds.round_times)
        answer["refused"] = dict(self.rounds.refusals)
        refused = sum(self.rounds.refusals.values())
        by = ", ".join(f"{n} {r}" for r, n in sorted(self.rounds.refusals.items()))
        answer["prediction_error"] = err = error_stats(self.life.cluster.prediction_errors)
        answer["report"] += (f"\n\npolicy actions refused: {refused}" + (f" ({by})" if by else "")
                             + f"\nprediction error: {format_error(err)}")
        return answer


def may_act_on(caller: Identity | None, job: LiveJob) -> None:
    """Raise RequestError unless ``caller`` owns ``job`` or is an admin (or keys are off)."""
    if caller is not None and caller.role != "admin" and job.owner != caller.name:
        raise RequestError(f"not your job: {job.id} belongs to {job.owner or 'nobody'}",
                           s.ErrorCode.FORBIDDEN)
