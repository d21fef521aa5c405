"""The coordinator's metrics: Prometheus gauges, the usage timeline, the run report.

The Prometheus registry is the coordinator's own (not the process-global one),
served over HTTP when a port is given: on loopback by default; off loopback only
to scrapes that carry the bearer token ``tfgshare keys init`` wrote (401 without).
Its labels are bounded (job states, refusal reasons, bad-frame reasons, message types),
none is per job. The report covers every job, the done ones read from the database; its
per-job table shows the newest ``REPORT_ROWS``. The report is the one the simulator
prints (``tfgshare.metrics``), built from the live jobs' accounts and the
timeline, whose figures follow ``tfgshare.metrics``' definitions: allocated
counts each fragment with its context reserve (``held_share``); effective is
each training tenant's single-tenant utilisation (its sample's; before it has
one, the device utilisation seen while it ran alone; else 1) times its speed
(its sampled step time over its last reported one), capped at 1 per GPU
(``kernel_share``); device is the utilisation the agent reports for each GPU
(NVML, or busy cores on a virtual GPU), the effective estimate where it
reports none.
"""

from __future__ import annotations

import dataclasses
import hmac
import json
import math
import threading
from typing import Any, Callable, Iterable, NamedTuple, Sequence
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from tfgshare.coordinator.cluster import Cluster, LiveJob, split_gpu_id
from tfgshare.metrics import (SIZE_CLASSES, JobRecord, Report, Timeline, compute_report,
                              format_duration, format_table, held_share, kernel_share,
                              size_class)
from tfgshare.policies.base import JobState
from tfgshare.schema import FrameProblem

STATES = [s.value for s in JobState] + ["unknown"]
# why a frame was refused before any handler saw it: it did not decode, or its key is unknown
BAD_FRAME_REASONS = [p.value for p in FrameProblem] + ["unknown_key"]


class Usage(NamedTuple):
    """The cluster's usage at a moment, in GPUs (see ``tfgshare.metrics.Timeline``)."""

    allocated: float
    effective: float
    device: float
    busy: int
    fragments: int


def _solo_util(job: LiveJob) -> float:
    """Its measured single-tenant utilisation: the sample's, else as seen alone, else 1."""
    if job.sample is not None:
        return job.sample.gpu_util
    if job.solo_util:
        return min(1.0, job.solo_util_sum / len(job.solo_util))   # every tick: O(1)
    return 1.0


def _speed(job: LiveJob) -> float:
    """Its co-location speed: sampled step time over its last reported one (at most 1)."""
    if job.sample is None or job.step_time_s is None:
        return 1.0
    return min(1.0, job.sample.step_time_s / job.step_time_s)


class _QuietHandler(WSGIRequestHandler):
    """No access log on stderr."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _bearer(app: Callable, token: str) -> Callable:
    """``app`` behind a bearer-token check (a constant-time comparison)."""
    expected = f"Bearer {token}".encode()

    def guarded(environ: dict, start_response: Callable):
        given = environ.get("HTTP_AUTHORIZATION", "").encode()
        if hmac.compare_digest(given, expected):
            return app(environ, start_response)
        start_response("401 Unauthorized", [("Content-Type", "text/plain"),
                                             ("WWW-Authenticate", 'Bearer realm="tfgshare"')])
        return [b"401: this metrics port needs Authorization: Bearer <metrics.token>\n"]
    return guarded


class CoordinatorMetrics:
    """Prometheus metrics and the utilisation timeline of one coordinator."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.jobs = Gauge("tfgshare_jobs", "Jobs by state", ["state"], registry=r)
        self.gpus = Gauge("tfgshare_gpus", "GPUs on up nodes", registry=r)
        self.nodes = Gauge("tfgshare_nodes_up", "Nodes with a connected agent", registry=r)
        self.fragments = Gauge("tfgshare_fragments_allocated", "GPU fragments held", registry=r)
        self.util_alloc = Gauge("tfgshare_utilisation_allocated",
                                "Sum of held fractions / GPUs", registry=r)
        self.util_eff = Gauge("tfgshare_utilisation_effective",
                              "Useful compute / GPUs (each GPU capped at 1)", registry=r)
        self.util_device = Gauge("tfgshare_utilisation_device",
                                 "Device utilisation (agents' telemetry) / GPUs", registry=r)
        self.over = Gauge("tfgshare_jobs_over_fragment",
                          "Jobs whose real GPU memory exceeds their fragment", registry=r)
        self.pred_error = Gauge("tfgshare_prediction_error_mean",
                                "Mean relative error of predicted vs actual run time",
                                registry=r)
        self.suspends = Counter("tfgshare_suspends", "Suspends asked", registry=r)
        self.resumes = Counter("tfgshare_resumes", "Resumes started", registry=r)
        self.migrations = Counter("tfgshare_migrations", "Migrations done", registry=r)
        self.refused = Counter("tfgshare_actions_refused",
                               "Policy actions the coordinator refused, by reason",
                               ["reason"], registry=r)
        self.node_losses = Counter("tfgshare_node_losses", "Nodes declared lost", registry=r)
        self.bad_frames = Counter("tfgshare_bad_frames",
                                  "Frames refused before handling (not a valid message, or "
                                  "an unknown key), by reason", ["reason"], registry=r)
        for reason in BAD_FRAME_REASONS:   # each reason shows, at 0 until one comes
            self.bad_frames.labels(reason)
        self.messages = Counter("tfgshare_messages_handled",
                                "Messages handled (decoded and answered), by type",
                                ["type"], registry=r)
        self.db_commits = Histogram("tfgshare_db_commit_seconds",
                                    "Time of one commit of the state database (a loop "
                                    "turn's writes)", registry=r,
                                    buckets=(.0001, .00025, .0005, .001, .0025, .005, .01,
                                             .025, .05, .1, .25, 1))
        self.db_rows = Counter("tfgshare_db_rows_written",
                               "Rows written to the state database (committed)", registry=r)
        self.db_write = Counter("tfgshare_db_write_seconds",
                                "Time spent running the state database's writes (the "
                                "statements of the open transaction, commits aside)",
                                registry=r)
        self.rounds = Histogram("tfgshare_scheduling_round_seconds",
                                "Time of one scheduling round", registry=r,
                                buckets=(.0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1))
        self.timeline = Timeline()
        self.port: int | None = None
        self._http: ThreadingWSGIServer | None = None

    def serve(self, port: int, addr: str = "127.0.0.1", token: str | None = None) -> int:
        """Serve /metrics on ``port`` (0 picks a free one) in a thread; return the port.

        With a ``token``, a scrape without ``Authorization: Bearer <token>`` gets 401.
        """
        app = make_wsgi_app(self.registry)
        if token is not None:
            app = _bearer(app, token)
        server = make_server(addr, port, app, ThreadingWSGIServer, handler_class=_QuietHandler)
        threading.Thread(target=server.serve_forever, daemon=True,
                         name="metrics-http").start()
        self._http = server
        self.port = server.server_address[1]
        return self.port

    def close(self) -> None:
        """Stop serving /metrics (if it was)."""
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None

    def usage(self, cluster: Cluster) -> Usage:
        """What the jobs hold and use now, by the definitions of ``tfgshare.metrics``."""
        allocated = effective = device = 0.0
        fragments = 0
        estimate: dict[str, float] = {}
        for gpu_id, here in cluster.tenants.items():
            name, index = split_gpu_id(gpu_id)
            node = cluster.nodes.get(name)
            info = node.gpus.get(index) if node is not None else None
            for job in here.values():
                for f in job.fragments:
                    if f.gpu == gpu_id:
                        fragments += 1
                        allocated += (f.fraction if info is None else
                                      held_share(f.fraction, cluster.reserve_mb, info.memory_mb))
            share = kernel_share([(_solo_util(j), _speed(j))
                                  for j in here.values()
                                  if j.training and j.state is not JobState.SUSPENDING])
            estimate[gpu_id] = share
            effective += share
        for node in cluster.up_nodes():
            for index in node.gpus:
                measured = node.gpu_util.get(index)
                device += (min(1.0, max(0.0, measured)) if measured is not None
                           else estimate.get(node.gpu_id(index), 0.0))
        return Usage(allocated, effective, device, len(cluster.tenants), fragments)

    def update(self, cluster: Cluster, now: float) -> tuple[Usage, int]:
        """Refresh the gauges from the cluster; return (usage now, jobs queued)."""
        counts = cluster.counts
        for state in STATES:
            self.jobs.labels(state).set(counts.get(state, 0))
        queued = sum(counts.get(s.value, 0) for s in JobState if s.waiting)
        ngpus = sum(len(n.gpus) for n in cluster.up_nodes())
        use = self.usage(cluster)
        self.gpus.set(ngpus)
        self.nodes.set(sum(1 for _ in cluster.up_nodes()))
        self.fragments.set(use.fragments)
        self.util_alloc.set(use.allocated / ngpus if ngpus else 0.0)
        self.util_eff.set(use.effective / ngpus if ngpus else 0.0)
        self.util_device.set(use.device / ngpus if ngpus else 0.0)
        self.over.set(cluster.over_count)
        errors = cluster.prediction_errors
        self.pred_error.set(sum(errors) / len(errors) if errors else math.nan)
        return use, queued


def error_stats(errors: list[float]) -> dict[str, Any]:
    """Mean and p90 of relative prediction errors, and how many jobs they cover."""
    if not errors:
        return {"jobs": 0, "mean": None, "p90": None}
    ordered = sorted(errors)
    p90 = ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)]
    return {"jobs": len(ordered), "mean": sum(ordered) / len(ordered), "p90": p90}


def format_error(stats: dict[str, Any]) -> str:
    """``error_stats`` as one line."""
    if not stats["jobs"]:
        return "none yet (no finished job was predicted)"
    return (f"mean {100 * stats['mean']:.0f} %, p90 {100 * stats['p90']:.0f} % "
            f"over {stats['jobs']} finished jobs")


def job_record(job: LiveJob, now: float) -> JobRecord:
    """The shared metrics record of one live job, its account closed at ``now``."""
    return JobRecord.of(job.id, job.spec.num_gpus, job, now,
                        finished=job.state is JobState.FINISHED)


_RECORD_FIELDS = tuple(f.name for f in dataclasses.fields(JobRecord))


def report_fields(rec: JobRecord) -> dict[str, Any]:
    """A done job's record as JSON-ready data (kept in the database for the report)."""
    return {name: getattr(rec, name) for name in _RECORD_FIELDS}


def stored_report(data: str, report: str | None, now: float) -> JobRecord:
    """A done job's report record from the database (rebuilt from its job record when
    a version that did not keep it stored the job)."""
    if report is not None:
        return JobRecord(**json.loads(report))
    return job_record(LiveJob.from_record(json.loads(data)), now)


def prediction_error(rec: JobRecord) -> float | None:
    """|predicted - actual| / actual run time of a finished job (None if not predicted)."""
    if rec.finish_time is None or rec.predicted_total_s is None or not rec.actual_total_s:
        return None
    return abs(rec.predicted_total_s - rec.actual_total_s) / rec.actual_total_s


def summary_report(active: Sequence[JobRecord], done: dict[str, Any], timeline: Timeline,
                   num_gpus: int, end: float | None) -> Report:
    """``compute_report``'s figures for the active jobs' records and the done jobs'
    aggregates the database computed (``StateStore.done_summary``), by the same
    definitions, without reading every done job into memory."""
    nan = math.nan
    finished = done["finished"]
    by_size: dict[str, list[float]] = {}
    for gpus, (n, mean) in done["jct_by_gpus"].items():
        acc = by_size.setdefault(size_class(gpus), [0, 0.0])
        acc[0] += n
        acc[1] += n * mean
    order = [label for label, _, _ in SIZE_CLASSES]
    submits = [r.submit_time for r in active]
    if done["first_submit"] is not None:
        submits.append(done["first_submit"])
    first_submit = min(submits, default=0.0)
    last_finish = done["last_finish"] if finished else first_submit
    avg = timeline.time_average(last_finish if end is None else end)
    return Report(
        jobs=len(active) + done["jobs"], finished=finished,
        jct_mean=done["jct_mean"] if finished else nan,
        jct_median=done["jct_median"] if finished else nan,
        jct_p95=done["jct_p95"] if finished else nan,
        wait_mean=done["wait_mean"] if finished else nan,
        util_allocated=avg["allocated"] / num_gpus, util_effective=avg["effective"] / num_gpus,
        makespan=last_finish - first_submit if finished else 0.0,
        suspends=int(done["suspends"]) + sum(r.suspends for r in active),
        resumes=int(done["resumes"]) + sum(r.resumes for r in active),
        migrations=int(done["migrations"]) + sum(r.migrations for r in active),
        move_cost_s=float(done["move_cost_s"] + sum(r.move_cost_s for r in active)),
        pred_error_mean=done["pred_mean"], pred_error_median=done["pred_median"],
        pred_error_p90=done["pred_p90"],
        queue_mean=avg["queued"], util_device=avg["device"] / num_gpus,
        util_device_busy=avg["device"] / avg["busy"] if avg["busy"] > 0 else 0.0,
        jct_by_size={k: by_size[k][1] / by_size[k][0] for k in order if k in by_size},
        jobs_by_size={k: by_size[k][0] for k in order if k in by_size})


REPORT_ROWS = 200    # jobs in the report's per-job table: the newest


def job_rows(jobs: Iterable[LiveJob], now: float) -> list[dict[str, Any]]:
    """One row per job for the per-job table: wait, JCT, moves, predicted vs actual."""
    rows = []
    for job in jobs:
        rec = job_record(job, now)
        rows.append({
            "job": job.id, "model": job.spec.model_name, "state": job.display_state,
            "wait_s": rec.waited_s, "jct_s": rec.jct, "suspends": job.suspends,
            "migrations": job.migrations, "predicted_s": job.predicted_total_s,
            "actual_s": rec.actual_total_s})
    return rows


def format_job_rows(rows: list[dict[str, Any]]) -> str:
    """The per-job table as plain text."""
    header = ["job", "model", "state", "wait", "JCT", "susp", "mig", "predicted", "actual"]
    lines = [header]
    for r in rows:
        lines.append([r["job"], r["model"], r["state"], format_duration(r["wait_s"]),
                      format_duration(r["jct_s"]), str(r["suspends"]), str(r["migrations"]),
                      format_duration(r["predicted_s"]), format_duration(r["actual_s"])])
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
    return "\n".join(["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()
                      for row in lines] + [JOB_ROWS_LEGEND])


JOB_ROWS_LEGEND = ("wait: time not running; JCT: submit to finish; susp, mig: suspends, "
                   "migrations;\npredicted: run time predicted once sampled; actual: what it "
                   "took from then")


def run_report(cluster: Cluster, metrics: CoordinatorMetrics, policy: str, now: float,
               done: dict[str, Any] | None = None,
               newest: Sequence[LiveJob] | None = None) -> dict[str, Any]:
    """The run report: summary numbers, the policy table and the per-job table.

    The summary covers the active jobs and the done ones: ``done`` is their
    aggregates from the database (``StateStore.done_summary``; default: the
    done jobs in memory, through ``compute_report``); the per-job table shows the
    ``newest`` jobs (default: those in memory), oldest first.
    """
    active = [job_record(j, now) for j in cluster.active.values()]
    if newest is None:
        newest = list(cluster.jobs.values())[-REPORT_ROWS:]
    ngpus = max(1, sum(len(n.gpus) for n in cluster.nodes.values()))
    end = now if active else None
    if done is None:
        records = active + [job_record(j, now) for j in cluster.jobs.values() if j.state.done]
        total = len(records)
        report = compute_report(records, metrics.timeline, ngpus, end=end) if records else None
    else:
        total = len(active) + done["jobs"]
        report = summary_report(active, done, metrics.timeline, ngpus, end) if total else None
    if report is not None:
        table = format_table({policy: report})
        summary = report.as_dict()
    else:
        table, summary = "no jobs yet", {}
    rows = job_rows(newest, now)
    text = table
    if rows:
        shown = (f"the newest {len(rows)} of {total} jobs (`tfgshare status` pages "
                 "through all)" if len(rows) < total else f"all {len(rows)} jobs")
        text += f"\n\n{shown}:\n" + format_job_rows(rows)
    return {"summary": summary, "report": text, "jobs": rows, "policy": policy,
            "gpus": ngpus}
