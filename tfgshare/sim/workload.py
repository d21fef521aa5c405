"""The jobs a simulation replays: a trace, filtered, with models assigned.

A trace job that names a model keeps it if it is profiled; otherwise a known
foreign name is mapped to the profiled model of its family (``MODEL_ALIASES``:
the Tiresias simulator's ``tf_cnn_benchmarks`` names such as ``vgg19`` or
``resnet50``, and TF-Slim names), at the trace's batch size or, when the trace
has none (the Tiresias CSV has no batch column), at ``DEFAULT_BATCH`` (32, the
``tf_cnn_benchmarks`` default). Its step count comes from its ``duration``
(``round(duration / step time)``, so it runs as long on the reference GPU as
the trace says: the Tiresias simulator times jobs by ``duration`` and ignores
``iterations``), or with ``steps_from="iterations"`` from the trace's
``iterations``. Jobs without a model, or with an unknown one, get one from
``philly.mapping.assign_models``. Every job dropped or changed on the way is
counted in the :class:`Workload`, by reason.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from philly.filters import compress_time, rebase, select
from philly.jobs import TraceJob
from philly.mapping import assign_models
from philly.report import LoadReport
from philly.trace import load_trace

from .gc_pause import no_cycle_collection
from .profiles import Profiles
from .utilisation import apply_workload, describe

DEFAULT_BATCH = 32

# foreign model name -> the profiled model that stands in for it (same family)
MODEL_ALIASES: dict[str, str] = {
    # the Tiresias simulator's names (its models.py, from tf_cnn_benchmarks)
    "vgg11": "vgg_16", "vgg16": "vgg_16", "vgg19": "vgg_16",
    "alexnet": "alexnet_v2",
    "resnet50": "resnet_v1_50", "resnet101": "resnet_v1_50", "resnet152": "resnet_v1_50",
    "inception3": "inception_v3", "inception4": "inception_v3",
    # TF-Slim names that are not profiled
    "vgg_a": "vgg_16", "vgg_19": "vgg_16",
    "resnet_v1_101": "resnet_v1_50", "resnet_v1_152": "resnet_v1_50",
    "resnet_v2_50": "resnet_v1_50", "resnet_v2_101": "resnet_v1_50",
    "resnet_v2_152": "resnet_v1_50",
    "inception_v1": "inception_v3", "inception_v2": "inception_v3",
    "inception_v4": "inception_v3", "inception_resnet_v2": "inception_v3",
}

STEPS_FROM = ("duration", "iterations")


@dataclass
class Workload:
    """Jobs ready to simulate, those left out, and what was changed on the way.

    ``dropped`` and ``changed`` count jobs by reason; ``notes`` say which trace
    columns were not used. ``too_wide`` jobs could never start on the cluster.
    """

    jobs: list[TraceJob]
    too_wide: list[TraceJob] = field(default_factory=list)
    dropped: Counter = field(default_factory=Counter)
    changed: Counter = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)

    def summary_lines(self) -> list[str]:
        """One line per reason a job was dropped or changed, and per note."""
        lines = [f"dropped {n} job(s): {why}" for why, n in sorted(self.dropped.items()) if n]
        lines += [f"changed {n} job(s): {why}" for why, n in sorted(self.changed.items()) if n]
        return lines + self.notes


@no_cycle_collection()   # loading makes no cycles
def load_workload(trace: str, profiles: Profiles, cluster_gpus: int, *, seed: int = 0,
                  num_jobs: int | None = None, vcs: list[str] | None = None,
                  start: float | str | None = None, end: float | str | None = None,
                  time_compression: float = 1.0, steps_from: str = "duration",
                  workload: str = "profile") -> Workload:
    """Jobs of ``trace`` ("philly" or a trace file) to replay on ``cluster_gpus`` GPUs.

    ``num_jobs`` keeps the earliest submitted jobs (after the VC and time
    filters), so arrivals keep the trace's density. Models and step counts as
    in the module doc. Jobs wider than the cluster are set aside in ``too_wide``.
    ``workload`` is the workload model (:mod:`tfgshare.sim.utilisation`): ``profile``
    keeps each model's profiled utilisation, ``measured`` draws each job's own.
    """
    if num_jobs is not None and num_jobs < 1:
        raise ValueError(f"num_jobs must be >= 1, got {num_jobs}")
    if steps_from not in STEPS_FROM:
        raise ValueError(f"steps_from must be one of {', '.join(STEPS_FROM)}, got {steps_from!r}")
    report = LoadReport()
    if is_alibaba(trace):
        jobs = load_alibaba_jobs(trace, report, vcs=vcs, start=start, end=end,
                                 max_jobs=num_jobs)
    else:
        jobs = load_trace(trace, vcs=vcs, start=start, end=end, max_jobs=num_jobs,
                          report=report)
    if not jobs:
        raise ValueError(f"trace {trace!r} has no jobs left after the filters")
    work = Workload([])
    for why, n in report.skipped.items():
        work.dropped[f"{why} (trace)"] += n
    if report.corrupt:
        work.dropped["corrupt line (trace)"] += report.corrupt
    work.notes += report.notes
    if time_compression != 1.0:
        jobs = compress_time(jobs, time_compression)
    named = {m for m, _ in profiles.by_key}
    bare: list[int] = []
    for i, j in enumerate(jobs):
        if not j.model:
            bare.append(i)
            continue
        model = j.model if j.model in named else MODEL_ALIASES.get(j.model)
        if model is None or model not in named:
            work.changed[f"model {j.model!r} unknown: drawn by philly.mapping"] += 1
            bare.append(i)
            continue
        if model != j.model:
            work.changed[f"model {j.model!r} mapped to {model!r}"] += 1
        batch = j.batch_size
        if (model, batch) not in profiles.by_key:
            sizes = sorted(b for m, b in profiles.by_key if m == model)
            batch = min(sizes, key=lambda b: (abs(b - DEFAULT_BATCH), b))
            if j.batch_size:
                work.changed[f"batch size {j.batch_size} of {model!r} not profiled: "
                             f"{batch} used"] += 1
        steps = _steps(j, j.duration / profiles.get(model, batch).step_time_s, steps_from)
        jobs[i] = j.copy_with(model=model, batch_size=batch, total_steps=steps)
    if bare:
        given = assign_models([jobs[i] for i in bare], profiles.step_times(), seed)
        for i, job in zip(bare, given):
            if steps_from == "iterations":
                steps = _steps(jobs[i], job.total_steps, steps_from)
                job = job.copy_with(total_steps=steps)
            jobs[i] = job
    if steps_from == "duration" and report.format == "tiresias":
        work.notes.append("iterations column not used: run length comes from duration "
                          "(as in the Tiresias simulator; --steps-from iterations uses it)")
    jobs = apply_workload(jobs, workload, seed)
    work.notes.append(describe(workload))
    keep = [j for j in jobs if j.total_steps >= 1]
    if len(keep) < len(jobs):
        work.dropped["no iterations (--steps-from iterations)"] += len(jobs) - len(keep)
    work.jobs = [j for j in keep if j.num_gpus <= cluster_gpus]
    work.too_wide = [j for j in keep if j.num_gpus > cluster_gpus]
    if work.too_wide:
        work.dropped[f"wider than the cluster's {cluster_gpus} GPUs"] += len(work.too_wide)
    if not work.jobs:
        raise ValueError(f"trace {trace!r}: no job left to simulate "
                         f"({'; '.join(work.summary_lines()) or 'none fit'})")
    return work


def is_alibaba(trace: str) -> bool:
    """Whether ``trace`` names Alibaba's GPU-sharing trace or a pod list in its format."""
    from .alibaba import TRACE_NAME, is_pod_list
    return str(trace) == TRACE_NAME or (Path(trace).is_file() and is_pod_list(trace))


def load_alibaba_jobs(trace: str, report: LoadReport, **filters) -> list[TraceJob]:
    """The replayable pods of an Alibaba pod list (the shipped one for its name), filtered
    as :func:`philly.filters.select` filters and re-based to start at 0."""
    from .alibaba import TRACE_NAME, load_pods, trace_jobs
    path = None if str(trace) == TRACE_NAME else trace
    report.format = "alibaba-pods"
    jobs = trace_jobs(load_pods(path, report=report), report)
    kept = rebase(select(jobs, **filters))
    report.filtered_out = len(jobs) - len(kept)
    return kept


def _steps(job: TraceJob, from_duration: float, steps_from: str) -> int:
    if steps_from == "iterations":
        return job.total_steps   # 0 (unknown) drops the job, counted by the caller
    return max(1, round(from_duration))
