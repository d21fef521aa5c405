"""The run report: job completion, waiting, utilisation and move metrics.

One code path for the simulator and the live coordinator (see PAPER.md,
"Metrics"). Both keep each job's ``JobAccount`` (one set of counters, changed
only through its methods, so every figure means the same on both sides) and a
``Timeline`` of cluster usage built with ``held_share`` and ``kernel_share``.
Callers hand in a ``JobRecord`` per job (its account closed at a moment);
``compute_report`` turns records and timeline into a ``Report``, and
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
from dataclasses import asdict, dataclass, field, fields
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


@dataclass(slots=True, kw_only=True, eq=False)
class JobAccount:
    """What happened to one job, kept as it happens; both sides fill it the same way.

    The live coordinator's ``LiveJob`` and the simulator's ``SimJob`` are
    accounts (they subclass this), and every change goes through the methods
    below, so each figure has one meaning (PAPER.md, "Metrics"). A job
    *holds* GPUs from the moment it is started on fragments until it gives
    them back: the live runner exits, or the simulator frees them (a finish,
    a suspend, a failure, a lost node). Times are seconds on the caller's
    clock.

    - ``submit_time``: when it was submitted.
    - ``first_start``: its first start on any fragment (sampling included).
    - ``finish_time``: when it ended (finished, failed or cancelled).
    - ``run_time_s``: wall time it held GPUs, in closed holds; ``last_start``
      is when the current hold began (None while it holds nothing).
    - ``waited_s``: waiting time, "time not running between submit and
      finish (queued and suspended)": wall time holding nothing, in closed
      waits; ``last_wait_start`` is when the current wait began (None while
      it holds GPUs).
    - ``suspends``: suspends asked (by the policy or a user), migrations apart.
    - ``resumes``: starts of a suspended job from its checkpoint (the start
      after sampling is not a resume).
    - ``migrations``: moves of a running job to other fragments.
    - ``move_cost_s``: the time suspends, resumes and migrations cost it: a
      suspend costs from the request until its checkpoint is saved and it has
      given back its GPUs; a resume from its start until it trains again
      (start-up, restore, and any wait for a save on its GPUs); a migration
      from the request until it trains again on the new fragments. Time
      queued between a suspend and its resume is waiting, not move cost.
      ``move_started`` is when the open move began (None when none is open).
    - ``predicted_total_s``: the remaining run time predicted when it was
      first sampled; ``run_at_prediction_s`` the run time it had then.
    """

    submit_time: float = 0.0
    first_start: float | None = None
    finish_time: float | None = None
    last_start: float | None = None
    run_time_s: float = 0.0
    last_wait_start: float | None = None
    waited_s: float = 0.0
    suspends: int = 0
    resumes: int = 0
    migrations: int = 0
    move_cost_s: float = 0.0
    move_started: float | None = None
    predicted_total_s: float | None = None
    run_at_prediction_s: float = 0.0

    # ---- what happens to it --------------------------------------------------

    def begin_hold(self, now: float) -> None:
        """It starts on fragments: the current wait (if any) ends."""
        if self.last_wait_start is not None:
            self.waited_s += max(0.0, now - self.last_wait_start)
            self.last_wait_start = None
        if self.first_start is None:
            self.first_start = now
        self.last_start = now

    def end_hold(self, now: float) -> None:
        """It gives its GPUs back: the hold and any open move end."""
        if self.last_start is not None:
            self.run_time_s += max(0.0, now - self.last_start)
            self.last_start = None
        self.end_move(now)

    def begin_wait(self, now: float) -> None:
        """It waits from ``now`` (queued, sampled, suspended)."""
        self.last_wait_start = now

    def begin_move(self, now: float) -> None:
        """A suspend, resume or migration starts costing time."""
        self.move_started = now

    def end_move(self, now: float) -> None:
        """The open move (if any) stops costing time at ``now``."""
        if self.move_started is not None:
            self.move_cost_s += max(0.0, now - self.move_started)
            self.move_started = None

    def note_prediction(self, remaining_s: float, now: float) -> None:
        """Its remaining run time was predicted; the first prediction is kept."""
        if self.predicted_total_s is None:
            self.predicted_total_s = float(remaining_s)
            self.run_at_prediction_s = self.run_until(now)

    def end(self, now: float) -> None:
        """It finished, failed or was cancelled at ``now`` (after ``end_hold``)."""
        if self.last_wait_start is not None:
            self.waited_s += max(0.0, now - self.last_wait_start)
            self.last_wait_start = None
        self.finish_time = now

    # ---- what it comes to ----------------------------------------------------

    def run_until(self, now: float) -> float:
        """Run time up to ``now`` (the current hold included)."""
        open_s = now - self.last_start if self.last_start is not None else 0.0
        return self.run_time_s + max(0.0, open_s)

    def waited_until(self, now: float) -> float:
        """Waiting time up to ``now`` (the current wait included)."""
        open_s = now - self.last_wait_start if self.last_wait_start is not None else 0.0
        return self.waited_s + max(0.0, open_s)

    def actual_after_prediction_s(self) -> float | None:
        """Run time from its first prediction to its end; None if never predicted."""
        if self.predicted_total_s is None or self.finish_time is None:
            return None
        return self.run_time_s - self.run_at_prediction_s


@dataclass(slots=True)
class JobRecord(JobAccount):
    """One job's account as the report reads it: closed at a moment, with its size.

    ``finish_time`` is set only for jobs that finished their training (failed
    and cancelled jobs have none); ``actual_total_s`` is the run time from its
    first prediction to its finish (both None when it never was predicted).
    """

    id: str
    num_gpus: int
    actual_total_s: float | None = None

    @property
    def jct(self) -> float | None:
        """Job completion time (finish - submit), None while unfinished."""
        return None if self.finish_time is None else self.finish_time - self.submit_time

    @classmethod
    def of(cls, job_id: str, num_gpus: int, acct: JobAccount, now: float,
           finished: bool = True) -> "JobRecord":
        """The record of ``acct`` at ``now``: open holds, waits and moves closed then."""
        values = {name: getattr(acct, name) for name in _ACCOUNT_FIELDS}
        rec = cls(id=job_id, num_gpus=num_gpus, **values)
        if rec.last_start is not None:
            rec.end_hold(now)
        rec.end_move(now)
        rec.waited_s = rec.waited_until(now)
        rec.last_wait_start = None
        if not finished:
            rec.finish_time = None
        rec.actual_total_s = rec.actual_after_prediction_s()
        return rec


_ACCOUNT_FIELDS = tuple(f.name for f in fields(JobAccount))


def held_share(fraction: float, reserve_mb: float, memory_mb: float) -> float:
    """The share of a GPU's memory one tenant takes: its fraction plus its CUDA-context reserve.

    A GPU held by one exclusive job (fraction = 1 less the reserve) counts 1.
    """
    return fraction + reserve_mb / memory_mb


def kernel_share(tenants: Iterable[tuple[float, float]]) -> float:
    """The share of time a GPU's kernels run, from its training tenants' (utilisation, speed).

    Each tenant's single-tenant utilisation times its co-location speed (its
    step rate shared over its step rate alone, at most 1), summed and capped at
    1. Tenants that hold the GPU but do not train (starting up, restoring,
    saving) are left out by the caller.
    """
    total = 0.0
    for util, speed in tenants:
        total += util * speed
    return total if total < 1.0 else 1.0


class Timeline:
    """Cluster usage over time as a step function (the utilisations' raw data).

    Each point holds from its time until the next point, all in GPUs:
    ``allocated`` is the sum of ``held_share`` over the fragments held,
    ``effective`` the sum over GPUs of ``kernel_share`` of the tenants' useful
    training (estimated from each job's sampled single-tenant utilisation and
    its co-location speed), ``device`` the sum over GPUs of the device
    utilisation an operator reads from ``nvidia-smi`` (measured live where
    the agent reports it; on the simulator it is the same kernel share), and
    ``busy`` the number of GPUs holding at least one job; ``queued`` counts
    waiting jobs. Points must come in time order; a point at the same time as
    the last one replaces it.
    """

    COLUMNS = ("allocated", "effective", "queued", "device", "busy")

    def __init__(self) -> None:
        self.times = array("d")
        self.allocated = array("d")
        self.effective = array("d")
        self.queued = array("d")
        self.device = array("d")
        self.busy = array("d")

    def __len__(self) -> int:
        return len(self.times)

    def add(self, time: float, allocated: float, effective: float, queued: float = 0,
            device: float = 0.0, busy: float = 0) -> None:
        """Record the usage from ``time`` on."""
        if self.times:
            last = self.times[-1]
            if time < last:
                raise ValueError(f"timeline point at {time} is before the last one at {last}")
            if time == last:
                self.allocated[-1], self.effective[-1], self.queued[-1] = allocated, effective, queued
                self.device[-1], self.busy[-1] = device, busy
                return
        self.times.append(time)
        self.allocated.append(allocated)
        self.effective.append(effective)
        self.queued.append(queued)
        self.device.append(device)
        self.busy.append(busy)

    @classmethod
    def from_points(cls, points: Iterable[Sequence[float]]) -> "Timeline":
        """Build from (time, allocated, effective[, queued[, device[, busy]]]) tuples."""
        tl = cls()
        for p in points:
            tl.add(*(0.0 if v is None else v for v in p))
        return tl

    def time_average(self, end: float) -> dict[str, float]:
        """Each column's time average from the first point to ``end`` (0 when empty)."""
        if not self.times:
            return dict.fromkeys(self.COLUMNS, 0.0)
        t = np.frombuffer(self.times, dtype=float)
        start = t[0]
        if end <= start:
            return dict.fromkeys(self.COLUMNS, 0.0)
        edges = np.minimum(np.append(t[1:], end), end)
        width = np.maximum(edges - np.minimum(t, end), 0.0)
        span = end - start
        return {c: float(np.dot(width, np.frombuffer(getattr(self, c), dtype=float)) / span)
                for c in self.COLUMNS}


@dataclass
class Report:
    """A run's metrics. Times in seconds; utilisations are fractions (see ``compute_report``)."""

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
    util_device: float = 0.0
    util_device_busy: float = 0.0
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
    first submit to the last finish. The four utilisations are time averages
    from the first timeline point to ``end`` (default: the last finish), each
    reported beside the others:

    - ``util_allocated``: the GPU memory held, as PAPER.md says "sum of
      fragment fractions held / GPUs", each fragment counted with its process's
      CUDA-context reserve (``held_share``), so a GPU held whole counts 1.
    - ``util_effective``: useful compute, "each job's measured single-tenant
      utilisation, slowed by its co-tenants, capped at 1 per GPU", summed over
      GPUs and divided by all the cluster's GPUs (``kernel_share``).
    - ``util_device``: the device utilisation an operator reads from
      ``nvidia-smi`` (the share of time a GPU's kernels run), averaged over
      all the cluster's GPUs. Live it is the agents' telemetry where they
      report it; on the simulator it equals the effective figure by
      construction (nothing there runs kernels without training).
    - ``util_device_busy``: the same over busy GPUs only (those holding at
      least one job): device-utilisation GPU-seconds over busy GPU-seconds.
    """
    if num_gpus <= 0:
        raise ValueError(f"num_gpus must be positive, got {num_gpus}")
    if not isinstance(timeline, Timeline):
        timeline = Timeline.from_points(timeline)
    records = list(records)
    done = [r for r in records if r.finish_time is not None]
    jcts = [r.finish_time - r.submit_time for r in done]
    jct_mean, jct_median, jct_p95 = _stats(jcts)
    by_size: dict[str, list[float]] = {}
    for r, j in zip(done, jcts):
        by_size.setdefault(size_class(r.num_gpus), []).append(j)
    order = [label for label, _, _ in SIZE_CLASSES]
    jct_by_size = {k: float(np.mean(by_size[k])) for k in order if k in by_size}
    jobs_by_size = {k: len(by_size[k]) for k in order if k in by_size}

    first_submit = min((r.submit_time for r in records), default=0.0)
    last_finish = max((r.finish_time for r in done), default=first_submit)
    if end is None:
        end = last_finish
    avg = timeline.time_average(end)

    errors = [abs(r.predicted_total_s - r.actual_total_s) / r.actual_total_s
              for r in done if r.predicted_total_s is not None
              and r.actual_total_s is not None and r.actual_total_s > 0]
    return Report(
        jobs=len(records), finished=len(done),
        jct_mean=jct_mean, jct_median=jct_median, jct_p95=jct_p95,
        wait_mean=float(np.mean([r.waited_s for r in done])) if done else math.nan,
        util_allocated=avg["allocated"] / num_gpus, util_effective=avg["effective"] / num_gpus,
        makespan=last_finish - first_submit if done else 0.0,
        suspends=sum(r.suspends for r in records), resumes=sum(r.resumes for r in records),
        migrations=sum(r.migrations for r in records),
        move_cost_s=float(sum(r.move_cost_s for r in records)),
        pred_error_mean=float(np.mean(errors)) if errors else None,
        pred_error_median=float(np.median(errors)) if errors else None,
        pred_error_p90=float(np.percentile(errors, 90)) if errors else None,
        queue_mean=avg["queued"], util_device=avg["device"] / num_gpus,
        util_device_busy=avg["device"] / avg["busy"] if avg["busy"] > 0 else 0.0,
        jct_by_size=jct_by_size, jobs_by_size=jobs_by_size,
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
    """A short human duration with its units: 42s, 3m12s, 1h05m, 2d04h ("-" for none)."""
    if seconds is None or math.isnan(seconds) or math.isinf(seconds):
        return "-"
    sign, left = ("-" if seconds < 0 else ""), round(abs(seconds))
    if left < 60:
        return f"{sign}{left}s"
    if left < 3600:
        return f"{sign}{left // 60}m{left % 60:02d}s"
    left = round(abs(seconds) / 60)   # minutes
    if left < 1440:
        return f"{sign}{left // 60}h{left % 60:02d}m"
    left = round(abs(seconds) / 3600)   # hours
    return f"{sign}{left // 24}d{left % 24:02d}h"


# the report table's columns, what each means, and the order they go in to fit the width
TABLE_LEGEND = (
    ("JCT", "mean job completion time (submit to finish)"), ("p50", "median JCT"),
    ("p95", "95th-percentile JCT"), ("wait", "mean time not running (queued or suspended)"),
    ("alloc%", "GPU memory held"), ("eff%", "GPU compute put to use"),
    ("dev%", "device busy as nvidia-smi reads it"),
    ("busy%", "dev% over the GPUs holding a job"), ("span", "first submit to last finish"),
    ("s/r/m", "suspends/resumes/migrations"), ("pred err", "run-time prediction error, mean/p90"),
    ("JCT /", "{base}'s mean JCT / this policy's (above 1: faster)"),
    ("util x", "alloc% / {base}'s"), ("eff x", "eff% / {base}'s"),
    ("", "utilisations in % of all GPUs over the run; times as 42s, 3m12s, 1h05m, 2d04h"),
)
TABLE_DROP = ("p50", "busy%", "dev%", "span", "eff x", "pred err", "p95", "s/r/m", "util x")


def format_table(reports_by_policy: Mapping[str, Report], baseline: str = "fifo",
                 width: int | None = 100, legend: bool = True, wide_hint: str = "") -> str:
    """A plain-text table, a row per policy, with ratios against ``baseline`` (when it
    ran beside another policy), at most ``width`` columns wide (None: every column);
    with ``legend``, lines under it saying what each column means (and ``wide_hint``:
    how to see the columns hidden to fit)."""
    from tfgshare.textfit import legend as legend_lines, plain_table
    base = reports_by_policy.get(baseline)
    with_ratios = base is not None and len(reports_by_policy) > 1
    header = ["policy", "jobs", "JCT", "p50", "p95", "wait", "alloc%", "eff%", "dev%",
              "busy%", "span", "s/r/m", "pred err"]
    if with_ratios:
        header += ["JCT /", "util x", "eff x"]
    rows = []
    for name, r in reports_by_policy.items():
        jobs = f"{r.finished}/{r.jobs}" if r.finished != r.jobs else str(r.jobs)
        row = [
            name, jobs, format_duration(r.jct_mean), format_duration(r.jct_median),
            format_duration(r.jct_p95), format_duration(r.wait_mean),
            f"{100 * r.util_allocated:.1f}", f"{100 * r.util_effective:.1f}",
            f"{100 * r.util_device:.1f}", f"{100 * r.util_device_busy:.1f}",
            format_duration(r.makespan), f"{r.suspends}/{r.resumes}/{r.migrations}",
            "-" if r.pred_error_mean is None else
            f"{100 * r.pred_error_mean:.0f}%/{100 * (r.pred_error_p90 or 0):.0f}%",
        ]
        if with_ratios:
            rat = ratios(r, base)
            row += ["-" if math.isnan(rat[k]) else f"{rat[k]:.2f}"
                    for k in ("jct_ratio", "util_ratio", "eff_util_ratio")]
        rows.append(row)
    lines, hidden = plain_table(header, rows, width, drop=TABLE_DROP, left=("policy",))
    if legend:
        entries = [(k, v.format(base=baseline)) for k, v in TABLE_LEGEND]
        shown = [h for h in header if h not in hidden]
        lines += legend_lines(entries, shown, width, hidden, wide_hint=wide_hint)
    return "\n".join(lines)
