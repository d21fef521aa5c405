"""The run report: job completion, waiting, utilisation and move metrics.

One code path for the simulator and the live coordinator (see PAPER.md,
"Metrics"). Callers hand in a ``JobRecord`` per job and a ``Timeline`` of
cluster usage; ``compute_report`` turns them into a ``Report``, and
``format_table`` / ``table_rows`` compare reports of several policies against a
baseline (fifo) run on the same jobs.

Conventions: times are seconds. Percentiles interpolate linearly between order
statistics (numpy's default). Utilisation is time-averaged over the run, from
the first timeline point to the end of the run (the last finish unless given).
Ratios follow the paper's headline: ``jct_ratio`` = baseline mean JCT / policy
mean JCT (the paper's "/3.6" is a ratio of 3.6), ``util_ratio`` = policy
allocated utilisation / baseline allocated utilisation (the paper's "x4.1").
"""

from __future__ import annotations

import math
from array import array
from dataclasses import asdict, dataclass, field
from typing import Iterable, Mapping, Sequence

import numpy as np

# (label, smallest GPU count, largest GPU count) of the job size classes.
SIZE_CLASSES: tuple[tuple[str, int, int], ...] = (
    ("1", 1, 1), ("2-4", 2, 4), ("5-8", 5, 8), (">8", 9, 1 << 30),
)


def size_class(num_gpus: int) -> str:
    """The size-class label of a job using ``num_gpus`` GPUs."""
    for label, lo, hi in SIZE_CLASSES:
        if lo <= num_gpus <= hi:
            return label
    raise ValueError(f"num_gpus must be >= 1, got {num_gpus}")


@dataclass
class JobRecord:
    """What happened to one job.

    ``waited_s`` is the time it did not run between submit and finish (queued,
    sampled-and-waiting, suspended). ``move_cost_s`` is the time its suspends,
    resumes and migrations cost it. ``predicted_total_s`` / ``actual_total_s``
    are the remaining run time predicted right after sampling and the run time
    (time holding GPUs, waits excluded) it actually took from then to finish;
    both None when it was never predicted.
    """

    id: str
    num_gpus: int
    submit: float
    first_start: float | None = None
    finish: float | None = None
    waited_s: float = 0.0
    suspends: int = 0
    resumes: int = 0
    migrations: int = 0
    move_cost_s: float = 0.0
    predicted_total_s: float | None = None
    actual_total_s: float | None = None

    @property
    def jct(self) -> float | None:
        """Job completion time (finish - submit), None while unfinished."""
        return None if self.finish is None else self.finish - self.submit


class Timeline:
    """Cluster usage over time as a step function.

    Each point holds from its time until the next point: ``allocated`` is the
    sum of fragment fractions held (in GPUs), ``effective`` the useful compute
    (in GPUs, each GPU capped at 1), ``queued`` the number of waiting jobs.
    Points must come in time order; a point at the same time as the last one
    replaces it.
    """

    def __init__(self) -> None:
        self.times = array("d")
        self.allocated = array("d")
        self.effective = array("d")
        self.queued = array("d")

    def __len__(self) -> int:
        return len(self.times)

    def add(self, time: float, allocated: float, effective: float, queued: float = 0) -> None:
        """Record the usage from ``time`` on."""
        if self.times:
            last = self.times[-1]
            if time < last:
                raise ValueError(f"timeline point at {time} is before the last one at {last}")
            if time == last:
                self.allocated[-1], self.effective[-1], self.queued[-1] = allocated, effective, queued
                return
        self.times.append(time)
        self.allocated.append(allocated)
        self.effective.append(effective)
        self.queued.append(queued)

    @classmethod
    def from_points(cls, points: Iterable[Sequence[float]]) -> "Timeline":
        """Build from (time, allocated, effective[, queued]) tuples."""
        tl = cls()
        for p in points:
            tl.add(*p)
        return tl

    def time_average(self, end: float) -> tuple[float, float, float]:
        """Time-averaged (allocated, effective, queued) from the first point to ``end``."""
        if not self.times:
            return 0.0, 0.0, 0.0
        t = np.frombuffer(self.times, dtype=float)
        start = t[0]
        if end <= start:
            return 0.0, 0.0, 0.0
        edges = np.minimum(np.append(t[1:], end), end)
        width = np.maximum(edges - np.minimum(t, end), 0.0)
        span = end - start
        return tuple(float(np.dot(width, np.frombuffer(col, dtype=float)) / span)
                     for col in (self.allocated, self.effective, self.queued))


@dataclass
class Report:
    """A run's metrics. Times in seconds, utilisations as fractions of all GPUs."""

    jobs: int
    finished: int
    jct_mean: float
    jct_median: float
    jct_p95: float
    wait_mean: float
    util_allocated: float
    util_effective: float
    makespan: float
    suspends: int
    resumes: int
    migrations: int
    move_cost_s: float
    pred_error_mean: float | None
    pred_error_median: float | None
    queue_mean: float = 0.0
    pred_error_p90: float | None = None
    jct_by_size: dict[str, float] = field(default_factory=dict)
    jobs_by_size: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict:
        """The report as plain JSON-ready data (NaN becomes None)."""
        def clean(v):
            if isinstance(v, dict):
                return {k: clean(x) for k, x in v.items()}
            if isinstance(v, float) and math.isnan(v):
                return None
            return v
        return clean(asdict(self))


def _stats(values: Sequence[float]) -> tuple[float, float, float]:
    if not len(values):
        return math.nan, math.nan, math.nan
    a = np.asarray(values, dtype=float)
    return float(a.mean()), float(np.median(a)), float(np.percentile(a, 95))


def compute_report(records: Iterable[JobRecord], timeline: Timeline | Iterable[Sequence[float]],
                   num_gpus: int, end: float | None = None) -> Report:
    """Compute the run's metrics from its job records and usage timeline.

    JCT and waiting statistics cover finished jobs only. Makespan runs from the
    first submit to the last finish; utilisation is averaged up to ``end``
    (default: the last finish).
    """
    if num_gpus <= 0:
        raise ValueError(f"num_gpus must be positive, got {num_gpus}")
    if not isinstance(timeline, Timeline):
        timeline = Timeline.from_points(timeline)
    records = list(records)
    done = [r for r in records if r.finish is not None]
    jcts = [r.finish - r.submit for r in done]
    jct_mean, jct_median, jct_p95 = _stats(jcts)
    by_size: dict[str, list[float]] = {}
    for r, j in zip(done, jcts):
        by_size.setdefault(size_class(r.num_gpus), []).append(j)
    order = [label for label, _, _ in SIZE_CLASSES]
    jct_by_size = {k: float(np.mean(by_size[k])) for k in order if k in by_size}
    jobs_by_size = {k: len(by_size[k]) for k in order if k in by_size}

    first_submit = min((r.submit for r in records), default=0.0)
    last_finish = max((r.finish for r in done), default=first_submit)
    if end is None:
        end = last_finish
    alloc, eff, queue = timeline.time_average(end)

    errors = [abs(r.predicted_total_s - r.actual_total_s) / r.actual_total_s
              for r in done if r.predicted_total_s is not None
              and r.actual_total_s is not None and r.actual_total_s > 0]
    return Report(
        jobs=len(records), finished=len(done),
        jct_mean=jct_mean, jct_median=jct_median, jct_p95=jct_p95,
        wait_mean=float(np.mean([r.waited_s for r in done])) if done else math.nan,
        util_allocated=alloc / num_gpus, util_effective=eff / num_gpus,
        makespan=last_finish - first_submit if done else 0.0,
        suspends=sum(r.suspends for r in records), resumes=sum(r.resumes for r in records),
        migrations=sum(r.migrations for r in records),
        move_cost_s=float(sum(r.move_cost_s for r in records)),
        pred_error_mean=float(np.mean(errors)) if errors else None,
        pred_error_median=float(np.median(errors)) if errors else None,
        pred_error_p90=float(np.percentile(errors, 90)) if errors else None,
        queue_mean=queue, jct_by_size=jct_by_size, jobs_by_size=jobs_by_size,
    )


def ratios(report: Report, baseline: Report) -> dict[str, float]:
    """Headline ratios of ``report`` against ``baseline`` (see module doc)."""
    def div(a: float, b: float) -> float:
        return a / b if b and not math.isnan(a) and not math.isnan(b) else math.nan
    return {
        "jct_ratio": div(baseline.jct_mean, report.jct_mean),
        "util_ratio": div(report.util_allocated, baseline.util_allocated),
        "eff_util_ratio": div(report.util_effective, baseline.util_effective),
    }


def table_rows(reports_by_policy: Mapping[str, Report], baseline: str = "fifo") -> list[dict]:
    """One flat dict per policy (report fields plus ratios against ``baseline``)."""
    base = reports_by_policy.get(baseline)
    rows = []
    for name, rep in reports_by_policy.items():
        row = {"policy": name}
        for k, v in rep.as_dict().items():
            if isinstance(v, dict):
                row.update({f"{k}[{c}]": x for c, x in v.items()})
            else:
                row[k] = v
        if base is not None:
            row.update({k: (None if math.isnan(v) else v) for k, v in ratios(rep, base).items()})
        rows.append(row)
    return rows


def format_duration(seconds: float | None) -> str:
    """A short human duration: 42s, 3.5m, 2.1h, 4.0d."""
    if seconds is None or math.isnan(seconds):
        return "-"
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if abs(seconds) >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"


def format_table(reports_by_policy: Mapping[str, Report], baseline: str = "fifo") -> str:
    """A plain-text table, a row per policy, with ratios against ``baseline``."""
    base = reports_by_policy.get(baseline)
    header = ["policy", "jobs", "JCT mean", "median", "p95", "wait", "alloc%", "eff%",
              "makespan", "susp/res/mig", "pred err mean/p90", "JCT /", "util x", "eff x"]
    rows = [header]
    for name, r in reports_by_policy.items():
        rat = ratios(r, base) if base is not None else {}

        def fmt_ratio(key: str) -> str:
            v = rat.get(key, math.nan)
            return "-" if math.isnan(v) else f"{v:.2f}"
        jobs = f"{r.finished}/{r.jobs}" if r.finished != r.jobs else str(r.jobs)
        rows.append([
            name, jobs, format_duration(r.jct_mean), format_duration(r.jct_median),
            format_duration(r.jct_p95), format_duration(r.wait_mean),
            f"{100 * r.util_allocated:.1f}", f"{100 * r.util_effective:.1f}",
            format_duration(r.makespan), f"{r.suspends}/{r.resumes}/{r.migrations}",
            "-" if r.pred_error_mean is None else
            f"{100 * r.pred_error_mean:.0f}%/{100 * (r.pred_error_p90 or 0):.0f}%",
            fmt_ratio("jct_ratio"), fmt_ratio("util_ratio"), fmt_ratio("eff_util_ratio"),
        ])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                       for i, (c, w) in enumerate(zip(row, widths))) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
