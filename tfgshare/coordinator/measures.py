"""What the runners' reports teach about a job: its sample, its progress, its forecast.

Functions over the lifecycle's state (``Lifecycle.cluster``, its forecast and the
policy): a sampling run's record and what the colocation forecast learns from it,
the measured step time and restart cost from progress reports, and a sampled
job's predicted run time once its sampling run has exited. Called by the agent
handlers (``agents``); they change the job and the forecast, never a job's state.

May import: ``tfgshare.metrics``, ``policies`` (base, forecast, prediction) and the
coordinator's ``cluster``, ``errors`` and ``lifecycle``.
"""

from __future__ import annotations

from typing import Any

from tfgshare.coordinator.cluster import Cluster, LiveJob, split_gpu_id
from tfgshare.coordinator.errors import RequestError, number
from tfgshare.coordinator.lifecycle import Lifecycle
from tfgshare.metrics import format_duration
from tfgshare.policies.base import SampleRecord
from tfgshare.policies.forecast import Forecast, forecast_step_s, prior_sharing, sharing_beside
from tfgshare.policies.prediction import outside_slowdown, solo_step_s, start_spill_s

# a resume imports the graph its first start exported: 1.5-4.4 % of the build's time, mean
# 3.2 %; and its first step, in a process that ran no step yet, took 0.7-2.5x, mean 1.8x,
# its fresh start's first step (20 resumes of the four paper models, `reproduce
# four-models --scale small --policy fgs`, this project's 2-core CPU, 2026-12-06; in 20
# resumes since: 1.4-5.5 %, mean 3.2 %, and 1.3-4.0x, mean 2.0x: the 1.8x is low)
IMPORT_SHARE = 0.03
RESUMED_FIRST_STEP = 1.8
MARKS_KEPT = 64   # progress marks kept per job (co-tenants' step time while a job samples)


def record_sample(life: Lifecycle, job: LiveJob, ev: dict[str, Any], now: float) -> None:
    """Keep a sampling run's record: its step time and peak memory, its step time alone,
    what the forecast learns from it, and its first prediction."""
    try:
        step_time = float(ev["step_time_mean_s"])
        peak = float(ev["peak_memory_mb"])
    except (KeyError, TypeError, ValueError):
        raise RequestError("sample event needs numeric step_time_mean_s and "
                           "peak_memory_mb") from None
    cluster = life.cluster
    co = cluster.co_tenants(job)
    job.sample = SampleRecord(step_time_s=step_time, peak_memory_mb=peak, co_tenants=co,
                              gpu_util=_sampled_util(cluster, job, ev))
    job.measured_step_s = step_time
    job.sampling_start = job.last_start
    sharing = _sharing_beside(cluster, job, job.last_start, now) if co else None
    cluster.forecast.note_sharing(sharing)
    waited, ran = _cpu_per_step(cluster, job, ev)
    job.solo_step_s = solo_step_s(step_time, sharing, waited, ran)
    cluster.forecast.note_util(job.sample.gpu_util)
    runnable = max(0.0, number(ev, "cluster_runnable", float) or 0.0)
    job.sampled_beside = max(0.0, runnable - co) if _virtual(cluster, job) else None
    job.sampled_on = job.node
    if job.last_start is not None and job.node is not None:
        cluster.forecast.note_spill(start_spill_s(
            job.sampled_beside, now - job.last_start,
            cluster.forecast.starts_between(job.node, job.last_start, now)),
            job.sampled_beside)
    if waited is not None:   # on virtual GPUs: the rest of its slowdown came from outside
        cluster.forecast.note_outside(outside_slowdown(
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
        if job.steps_done < job.spec.max_number_of_steps:   # else nothing is left to predict
            job.note_prediction(job.predicted_remaining_s, now)


def note_progress(job: LiveJob, ev: dict[str, Any], now: float) -> None:
    """Refresh the measured step time, the cost of this start, and the prediction from a
    progress report the runner wrote at ``now`` (an agent may have held it a while)."""
    step = number(ev, "step", int)
    left = number(ev, "predicted_remaining_s", float)
    total = job.spec.max_number_of_steps
    if step is not None and left is not None and total > step:
        job.measured_step_s = left / (total - step)   # the runner's running average
    if step is not None:
        if job.marks_attempt != job.attempt:
            job.marks, job.marks_attempt = [], job.attempt
        job.marks.append((now, step))
        if len(job.marks) > MARKS_KEPT:
            del job.marks[0]
    if (job.attempt_step0 is not None and step is not None and job.measured_step_s
            and job.last_start is not None and step > job.attempt_step0):
        job.restart_s = max(0.0, now - job.last_start
                            - (step - job.attempt_step0) * job.measured_step_s)
        job.attempt_step0 = None
    left = job.predict(0)
    if left is not None:
        job.predicted_remaining_s = left


def sampling_ended(life: Lifecycle, job: LiveJob, now: float) -> None:
    """Predict a sampled job's run time once its sampling run has exited (saved):
    its step time alone at the co-location it is expected to see
    (``ColocationForecast``), and its start."""
    if job.sampling_start is not None:
        life.cluster.forecast.note_sampling(now - job.sampling_start)
        job.sampling_start = None
    # its next start is a resume (a graph imported, a checkpoint read)
    forecast = life.cluster.forecast
    restart = forecast.restart_s(job.spec.model_name, resume_prior_s(job))
    found = _forecast(life, job, restart, now)
    if found is not None:
        job.measured_step_s, job.after_sampling = found
    job.predicted_remaining_s = job.predict(1, restart)
    if job.predicted_remaining_s is not None:
        job.note_prediction(job.predicted_remaining_s, now)
        if job.solo_step_s is not None and job.sample is not None:
            sharing = forecast.sharing_now(prior_sharing(forecast, life.policy, job))
            life.outbox.log_job(job, now, (
                f"predicted to run {format_duration(job.predicted_remaining_s)} more: "
                f"{job.solo_step_s:.4f} s a step alone, x{forecast.outside_now():.2f} "
                f"slower from other work on its machine, x{sharing:.2f} from sharing its "
                f"GPU while new jobs are sampled ("
                f"{'as measured' if forecast.sharing else 'a first guess: none measured yet'}"
                f"), x{job.after_sampling:.2f} once none is left to sample; so "
                f"{job.measured_step_s:.4f} s a step, after {restart:.1f} s to start again"))


def resume_prior_s(job: LiveJob) -> float:
    """What a job's next start, a resume, is expected to cost before a resume of its
    model is measured, beyond its steps at their steady time: its last start's phases
    with its graph imported instead of built (``IMPORT_SHARE`` of the build), its
    checkpoint read back as long as its last save took to write, and a resumed
    process's slower first step (``RESUMED_FIRST_STEP``) less the steady step it is
    counted as (measured resumes replace it)."""
    built, first = job.graph_built_s, job.first_step_s
    rest = max(0.0, job.last_start_s() - built - first)
    excess = max(0.0, RESUMED_FIRST_STEP * first - (job.measured_step_s or 0.0))
    return rest + IMPORT_SHARE * built + excess + (job.save_s or 0.0)


def _forecast(life: Lifecycle, job: LiveJob, restart: float, now: float) -> Forecast | None:
    """A sampled job's step time, sharing included, and its slowdown once none is
    left to sample (``policies.forecast.forecast_step_s``, from the live jobs);
    None before it has a sample and a step time alone."""
    if job.solo_step_s is None or job.sample is None:
        return None
    cluster = life.cluster
    unsampled = cluster.counts.get("queued", 0) + cluster.counts.get("sampling", 0)
    waiting, mean_run_s = cluster.window.read(job)   # policies.forecast.waiting_beside
    node = cluster.nodes.get(job.node or job.sampled_on or "")
    return forecast_step_s(cluster.forecast, life.policy, job, job.view(),
                           max(0, job.spec.max_number_of_steps - job.steps_done), restart,
                           now, jobs=cluster.active.values(), left_s=run_left_s,
                           unsampled=unsampled, gpus=len(cluster.snapshot().gpus),
                           waiting=waiting + unsampled, mean_run_s=mean_run_s,
                           node_units=len(node.gpus) if node is not None else 1)


def _sharing_beside(cluster: Cluster, job: LiveJob, since: float | None,
                    now: float) -> float | None:
    """How much the running jobs beside ``job`` were slowed while it sampled
    (``policies.forecast.sharing_beside``): their step time from their progress
    marks since ``since`` over their step time alone (None if none was measured)."""
    if since is None:
        return None
    return sharing_beside(job, lambda gpu: cluster.tenants.get(gpu, {}).values(),
                          lambda other: marked_step_s(other, since, now))


def _cpu_per_step(cluster: Cluster, job: LiveJob,
                  ev: dict[str, Any]) -> tuple[float | None, float]:
    """On virtual GPUs, the time the runner waited for a core and ran (over its
    cores) per sampled step (``cpu_wait_s``, ``cpu_run_s`` over ``sampled_steps``);
    (None, 0) elsewhere or unreported."""
    waited = number(ev, "cpu_wait_s", float)
    ran = number(ev, "cpu_run_s", float)
    steps = number(ev, "sampled_steps", int)
    if waited is None or not steps or not _virtual(cluster, job):
        return None, 0.0
    return max(0.0, waited) / steps, max(0.0, ran or 0.0) / steps


def _virtual(cluster: Cluster, job: LiveJob) -> bool:
    """Whether the job's fragments are all on virtual GPUs (CPU cores)."""
    node = cluster.nodes.get(job.node or "")
    infos = [node.gpus.get(split_gpu_id(f.gpu)[1]) for f in job.fragments] if node else []
    return bool(infos) and all(i is not None and i.virtual for i in infos)


def _sampled_util(cluster: Cluster, job: LiveJob, ev: dict[str, Any]) -> float:
    """The job's single-tenant utilisation over its sampled steps, in [0, 1].

    On virtual GPUs: the runner's own CPU time over the sampled window, as
    a share of the cores it may use (``cpu_util``). On real GPUs: the
    device utilisation the agent reported while the job sampled alone,
    from the heartbeats inside the sampled window. 1 (the safe guess)
    when neither was measured.
    """
    if _virtual(cluster, job):
        util = number(ev, "cpu_util", float)
    else:
        start = number(ev, "window_start", float)
        seen = [u for t, u in job.solo_util if start is None or t >= start]
        util = sum(seen) / len(seen) if seen else None
    return 1.0 if util is None else min(1.0, max(0.0, util))


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
