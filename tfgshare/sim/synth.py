"""Synthetic traces at any size, drawn from production distributions, seeded.

``tfgshare trace generate --jobs N --cluster NxG --load L --seed S --out FILE`` writes a
trace that ``tfgshare simulate --trace FILE`` replays. What is fitted to what, all by
empirical distributions (seeded resampling, no parametric model):

* **GPU count, duration and VC, jointly**: each synthetic job copies the
  ``(num_gpus, duration, vc)`` of a Philly job drawn uniformly with replacement from the
  82,247 jobs of ``philly.trace.load_trace("philly")``, among those that fit the chosen
  cluster (``num_gpus <= its GPUs``). So the GPU-count shares, the duration distribution
  of each GPU count and the VC mix are Philly's.
* **Fractional requests**: a one-GPU job draws its ``gpu_milli`` from the ``gpu_milli`` of
  the one-GPU pods of Alibaba's GPU-sharing trace (``tfgshare.sim.alibaba.load_pods()``,
  6,989 pods, 44 % of them below 1000, i.e. asking for a share). A multi-GPU job asks for
  whole GPUs (1000), as the Alibaba trace's multi-GPU pods all do.
* **Arrivals**: a non-homogeneous Poisson process whose rate follows Philly's
  hour-of-week profile (168 hourly rates: submissions in each hour of the week, divided
  by how many times that hour occurs in the trace's span; wall-clock from the trace's
  origin, 2017-09-04 10:30:41), repeating every week, so the daily and weekly pattern is
  Philly's. Synthetic time 0 is a Monday 00:00.
* **Offered load**: ``L = sum(duration x GPUs x share) / (span x cluster GPUs)``, with the
  span from time 0 to the last arrival. After the jobs are drawn, the rate is scaled so
  that the N-th arrival falls at ``span = work / (L x cluster GPUs)``: the arrival times
  are the process conditioned on that (exact given the draws; the simulator re-bases the
  first arrival to 0, which shortens the span by about one inter-arrival time).

The file is an Alibaba-format pod list (``name, cpu_milli, memory_mib, num_gpu,
gpu_milli, gpu_spec, qos, pod_phase, creation_time, deletion_time, scheduled_time``),
the one trace format the simulator reads fractional requests from:
``creation_time = scheduled_time = submit``, ``deletion_time = submit + duration``,
``qos`` carries the Philly VC, ``pod_phase`` is ``Succeeded``, ``cpu_milli`` and
``memory_mib`` are 0 (Philly gives none) and ``gpu_spec`` is empty (any GPU type). A name
ending in ``.gz`` is written gzip-compressed.

numpy only (Philly's loader brings pandas, imported when the sources are fitted).
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import math
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

HOURS_PER_WEEK = 168
HEADER = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos",
          "pod_phase", "creation_time", "deletion_time", "scheduled_time")


@dataclass(frozen=True)
class Sources:
    """The empirical distributions a synthetic trace is drawn from."""

    num_gpus: np.ndarray        # Philly jobs: GPUs, duration (s), VC (index into vcs)
    durations: np.ndarray
    vc_index: np.ndarray
    vcs: tuple[str, ...]
    hour_rate: np.ndarray       # 168 arrivals/hour in Philly, hour 0 = Monday 00:00-01:00
    one_gpu_milli: np.ndarray   # Alibaba one-GPU pods' gpu_milli (1..1000)


def philly_hour_of_week(submit_times: np.ndarray, origin) -> np.ndarray:
    """Hour of the week (0 = Monday 00:00) of each submit time, seconds from ``origin``."""
    start = (origin.weekday() * 24 + origin.hour) * 3600.0 + origin.minute * 60 + origin.second
    return ((start + np.asarray(submit_times, float)) // 3600 % HOURS_PER_WEEK).astype(int)


def hour_profile(hours: np.ndarray, first_hour: float, last_hour: float) -> np.ndarray:
    """Arrivals per hour for each hour of the week: counts / times that hour was observed.

    ``first_hour`` and ``last_hour`` are absolute hours (from a Monday 00:00) of the
    observed span."""
    counts = np.bincount(hours, minlength=HOURS_PER_WEEK).astype(float)
    seen = np.bincount(np.arange(int(first_hour), int(last_hour) + 1) % HOURS_PER_WEEK,
                       minlength=HOURS_PER_WEEK).astype(float)
    return counts / np.maximum(seen, 1.0)


@lru_cache(maxsize=1)
def fit_sources() -> Sources:
    """Fit the sources: Philly (``load_trace("philly")``) and Alibaba's one-GPU pods."""
    from philly.report import LoadReport
    from philly.trace import load_trace

    from .alibaba import load_pods

    report = LoadReport()
    jobs = load_trace("philly", report=report)
    origin = report.origin
    if origin is None:
        raise ValueError("the Philly trace has no wall-clock origin: cannot fit arrivals")
    submit = np.array([j.submit_time for j in jobs], float)
    hours = philly_hour_of_week(submit, origin)
    start = (origin.weekday() * 24 + origin.hour) * 3600.0 + origin.minute * 60 + origin.second
    rate = hour_profile(hours, start // 3600, (start + submit.max()) // 3600)
    vcs = tuple(sorted({j.vc for j in jobs}))
    where = {v: i for i, v in enumerate(vcs)}
    milli = np.array([p.gpu_milli for p in load_pods() if p.num_gpu == 1], int)
    return Sources(num_gpus=np.array([j.num_gpus for j in jobs], int),
                   durations=np.array([j.duration for j in jobs], float),
                   vc_index=np.array([where[j.vc] for j in jobs], int), vcs=vcs,
                   hour_rate=rate, one_gpu_milli=milli)


@dataclass(frozen=True)
class SynthTrace:
    """A drawn trace: per job its submit time (s from a Monday 00:00), GPUs, duration,
    gpu_milli and VC."""

    submit: np.ndarray
    num_gpus: np.ndarray
    durations: np.ndarray
    gpu_milli: np.ndarray
    vcs: list[str]
    cluster_gpus: int

    def offered_load(self) -> float:
        """sum(duration x GPUs x share) / (span x cluster GPUs), span = first to last."""
        span = float(self.submit[-1] - self.submit[0]) if len(self.submit) > 1 else 0.0
        work = float(np.sum(self.durations * self.num_gpus * self.gpu_milli / 1000.0))
        return work / (span * self.cluster_gpus) if span > 0 else math.inf


def _cum_hours(rate: np.ndarray):
    """The cumulative profile U(t) over one week (hours) and its weekly total."""
    cum = np.concatenate([[0.0], np.cumsum(rate)])
    return cum, cum[-1]


def _u_of(t_hours: float, rate: np.ndarray) -> float:
    """Integral of the hourly profile from 0 to ``t_hours``."""
    cum, week = _cum_hours(rate)
    weeks, rem = divmod(t_hours, HOURS_PER_WEEK)
    h = int(rem)
    return weeks * week + cum[h] + (rem - h) * rate[min(h, HOURS_PER_WEEK - 1)]


def _t_of(u: np.ndarray, rate: np.ndarray) -> np.ndarray:
    """The inverse of :func:`_u_of`, elementwise (hours)."""
    cum, week = _cum_hours(rate)
    weeks, rem = np.divmod(u, week)
    h = np.clip(np.searchsorted(cum, rem, side="right") - 1, 0, HOURS_PER_WEEK - 1)
    return weeks * HOURS_PER_WEEK + h + (rem - cum[h]) / rate[h]


def generate(num_jobs: int, cluster_gpus: int, load: float, seed: int,
             sources: Sources | None = None) -> SynthTrace:
    """Draw ``num_jobs`` jobs for a cluster of ``cluster_gpus`` GPUs at offered ``load``."""
    if num_jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {num_jobs}")
    if not (math.isfinite(load) and load > 0):
        raise ValueError(f"--load must be a finite number > 0, got {load}")
    if cluster_gpus < 1:
        raise ValueError(f"the cluster must have at least one GPU, got {cluster_gpus}")
    src = fit_sources() if sources is None else sources
    rng = np.random.default_rng(seed)
    pool = np.flatnonzero(src.num_gpus <= cluster_gpus)
    if pool.size == 0:
        raise ValueError(f"no Philly job fits a cluster of {cluster_gpus} GPUs")
    pick = pool[rng.integers(0, pool.size, num_jobs)]
    gpus, durations = src.num_gpus[pick], src.durations[pick]
    vcs = [src.vcs[i] for i in src.vc_index[pick]]
    milli = np.full(num_jobs, 1000, int)
    one = gpus == 1
    milli[one] = src.one_gpu_milli[rng.integers(0, src.one_gpu_milli.size, int(one.sum()))]
    work = float(np.sum(durations * gpus * milli / 1000.0))
    span_hours = work / (load * cluster_gpus) / 3600.0
    rate = np.maximum(src.hour_rate, 1e-9 * max(src.hour_rate.max(), 1e-9))
    # unit-rate Poisson clock, scaled so that the N-th arrival lands at span_hours
    e = np.cumsum(rng.exponential(1.0, num_jobs))
    u = e * (_u_of(span_hours, rate) / e[-1])
    submit = _t_of(u, rate) * 3600.0
    submit = np.maximum.accumulate(submit)
    return SynthTrace(submit, gpus, durations, milli, vcs, cluster_gpus)


def write_pod_list(trace: SynthTrace, out: str | Path) -> Path:
    """Write ``trace`` as an Alibaba-format pod list (see the module doc)."""
    out = Path(out)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(HEADER)
    width = len(str(len(trace.submit)))
    for i in range(len(trace.submit)):
        t = round(float(trace.submit[i]), 3)
        w.writerow((f"synth-{i:0{width}d}", 0, 0, int(trace.num_gpus[i]),
                    int(trace.gpu_milli[i]), "", trace.vcs[i], "Succeeded", f"{t:.3f}",
                    f"{t + float(trace.durations[i]):.3f}", f"{t:.3f}"))
    data = buf.getvalue().encode("utf-8")
    if out.suffix == ".gz":
        data = gzip.compress(data, mtime=0)
    out.write_bytes(data)
    return out


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tfgshare trace",
                                description="Make traces for the simulator.")
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    g = sub.add_parser(
        "generate", prog="tfgshare trace generate",
        help="draw a synthetic trace from Philly's and Alibaba's distributions",
        description="Draw a synthetic trace: arrivals (Philly's hour-of-week pattern), GPU "
                    "counts, durations and VCs (resampled Philly jobs), fractional requests "
                    "of one-GPU jobs (Alibaba's GPU-sharing trace), at an offered load for "
                    "a cluster. Writes an Alibaba-format pod list that "
                    "'tfgshare simulate --trace FILE' reads.")
    g.add_argument("--jobs", type=int, required=True, help="number of jobs (>= 1)")
    g.add_argument("--cluster", required=True,
                   help="the cluster the load is for: NxG (e.g. 64x8) or any "
                        "'tfgshare simulate --cluster' spec")
    g.add_argument("--load", type=float, required=True,
                   help="offered load: sum(duration x GPUs x share) / (span x cluster GPUs)")
    g.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    g.add_argument("--out", required=True, help="output file (.csv, or .csv.gz)")
    return p


def main(argv: list[str] | None = None) -> int:
    """``tfgshare trace generate ...``; 0 on success, 2 on bad input."""
    p = _parser()
    try:
        args = p.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as stop:
        return int(stop.code or 0)
    if args.action is None:
        p.print_help(sys.stderr)
        return 2
    err = "tfgshare trace generate: error:"
    if args.jobs < 1:
        print(f"{err} --jobs must be >= 1, got {args.jobs}", file=sys.stderr)
        return 2
    if not (math.isfinite(args.load) and args.load > 0):
        print(f"{err} --load must be a finite number > 0, got {args.load}", file=sys.stderr)
        return 2
    from .cluster import load_cluster
    try:
        cluster = load_cluster(args.cluster)
    except (ValueError, OSError) as e:
        print(f"{err} --cluster: {e}", file=sys.stderr)
        return 2
    out = Path(args.out)
    if not out.parent.is_dir():
        print(f"{err} --out: folder {out.parent} does not exist", file=sys.stderr)
        return 2
    trace = generate(args.jobs, cluster.num_gpus, args.load, args.seed)
    write_pod_list(trace, out)
    one = trace.num_gpus == 1
    shares = float(np.mean(trace.gpu_milli[one] < 1000)) if one.any() else 0.0
    span = float(trace.submit[-1] - trace.submit[0])
    print(f"wrote {out}: {args.jobs} jobs for {args.cluster} ({cluster.num_gpus} GPUs), "
          f"seed {args.seed}")
    print(f"  offered load {trace.offered_load():.3f} (asked {args.load:g}) over "
          f"{span / 86400:.2f} days of arrivals")
    print(f"  one-GPU jobs {one.mean():.1%}, of them asking for a share {shares:.1%}; "
          f"median duration {np.median(trace.durations):.0f} s")
    print(f"  replay: tfgshare simulate --trace {out} --cluster {args.cluster}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
