"""Planning a ``tfgshare replay`` before anything is submitted.

The slice's jobs get a model and batch size from ``philly.mapping`` (or one profiled
``--as-model``) and are compressed by the speed-up (``compress``); the live cluster is
read from the coordinator's node list (``live_cluster``), and the simulator runs the
same jobs on it with the live runner's settings (``simulate_same``). Its makespan is
the replay's expected wall time, printed before the replay starts; ``choose_speedup``
finds the smallest speed-up whose expected wall time fits ``--within``.
"""

from __future__ import annotations

import dataclasses
import math

# LocalCluster's coordinator tick: the simulator calls the policy as often (but fifo,
# tiresias and fgs, called at events and their own timed events: tick_s None, wake_at)
RUNNER_TICK_S = 0.5
MAX_SPEEDUP = 1e7     # past this every job is one step: a faster replay is no shorter


def parse_as_model(text: str, profiles) -> tuple[str, int]:
    """``MODEL:BATCH`` (or ``MODEL``, at its one or smallest profiled batch size) as a
    (model, batch) the profile has; ValueError naming what it has otherwise."""
    name, _, batch = text.partition(":")
    if batch and not batch.isdigit():
        raise ValueError(f"--as-model takes MODEL:BATCH, got {text!r}")
    batches = sorted(b for m, b in profiles.by_key if m == name)
    if not batches:
        models = sorted({m for m, _ in profiles.by_key})
        raise ValueError(f"--as-model {text}: the profile has no model {name!r}; it has "
                         + ", ".join(models))
    if not batch:
        return name, batches[0]
    if int(batch) not in batches:
        sizes = ", ".join(str(b) for b in batches)
        raise ValueError(f"--as-model {text}: the profile has {name} at batch size "
                         f"{sizes} only (e.g. --as-model {name}:{batches[0]})")
    return name, int(batch)


def mapped_slice(trace: str, profiles, *, num_jobs: int | None = None, start=None, end=None,
                 vcs: list[str] | None = None, seed: int = 0,
                 as_model: tuple[str, int] | None = None) -> list:
    """The slice's jobs with their mapped (or ``as_model``) model and batch size."""
    from philly.mapping import assign_models
    from philly.trace import load_trace

    jobs = load_trace(trace, vcs=vcs, start=start, end=end, max_jobs=num_jobs)
    if not jobs:
        raise ValueError(f"trace {trace!r} has no jobs left after the filters")
    mapped = assign_models(jobs, profiles.step_times(), seed)
    if as_model is not None:
        profiles.get(*as_model)           # a clear error when it is not profiled
        mapped = [dataclasses.replace(j, model=as_model[0], batch_size=as_model[1])
                  for j in mapped]
    return mapped


def compress(mapped: list, profiles, speedup: float, *, max_gpus: int = 1,
             shares: dict[str, float] | None = None) -> list:
    """``mapped`` jobs compressed by ``speedup``: arrivals and durations divided by it, and
    the step count each duration needs at a whole core's step time (see ``replay``)."""
    from philly.filters import compress_time

    if not (speedup > 0 and math.isfinite(speedup)):
        raise ValueError(f"--speedup must be a positive number, got {speedup}")
    if max_gpus < 1:
        raise ValueError(f"--max-gpus-per-job must be >= 1, got {max_gpus}")
    out = []
    for job in compress_time(mapped, speedup, durations=True):
        step = profiles.get(job.model, job.batch_size).step_time_s * (shares or {}).get(
            job.model, 1.0)
        out.append(dataclasses.replace(job, num_gpus=min(job.num_gpus, max_gpus),
                                       total_steps=max(1, round(job.duration / step))))
    return out


def compressed_jobs(trace: str, profiles, speedup: float, *, num_jobs: int | None = None,
                    start=None, end=None, vcs: list[str] | None = None, seed: int = 0,
                    max_gpus: int = 1, as_model: tuple[str, int] | None = None,
                    shares: dict[str, float] | None = None) -> list:
    """The slice's jobs, mapped and compressed by ``speedup`` (``mapped_slice``, then
    ``compress``). ``as_model`` (model, batch size) runs every job as that profiled model;
    ``shares`` (each model's ``cpu_share`` in a CPU profile) turns the profile's step
    times into a whole core's before the step counts are chosen."""
    if not (speedup > 0 and math.isfinite(speedup)):
        raise ValueError(f"--speedup must be a positive number, got {speedup}")
    mapped = mapped_slice(trace, profiles, num_jobs=num_jobs, start=start, end=end, vcs=vcs,
                          seed=seed, as_model=as_model)
    return compress(mapped, profiles, speedup, max_gpus=max_gpus, shares=shares)


def job_specs(jobs: list, profiles) -> list[tuple[float, "object"]]:
    """``(arrival time, JobSpec)`` for each job, arrivals counted from the first."""
    from tfgshare.schema import JobSpec

    first = min(j.submit_time for j in jobs)
    return [(j.submit_time - first,
             JobSpec(model_name=j.model, name=f"replay-{j.id}", batch_size=j.batch_size,
                     max_number_of_steps=j.total_steps, num_gpus=j.num_gpus,
                     image_size=profiles.get(j.model, j.batch_size).image_size))
            for j in jobs]


@dataclasses.dataclass
class LiveCluster:
    """The live cluster's up GPUs, as the simulator takes them and as a user reads them."""

    sim: object          # tfgshare.sim.cluster.SimCluster
    spec: str            # "NxG:MEM" when its nodes are alike, else "node:GxMEM,..."
    text: str            # e.g. "3 GPUs on 2 nodes (a: 2 x 8192 MiB, b: 1 x 8192 MiB)"

    @property
    def num_gpus(self) -> int:
        """How many GPUs it has."""
        return len(self.sim.gpus)


def live_cluster(nodes: list[dict]) -> LiveCluster:
    """The coordinator's up nodes with GPUs (``Client.nodes()``), each GPU as it is."""
    from tfgshare.policies.base import GPU
    from tfgshare.sim.cluster import SimCluster

    up = [n for n in nodes if n["state"] == "up" and n["gpus"]]
    if not up:
        raise ValueError("the coordinator has no node up with GPUs")
    gpus = tuple(GPU(f"{n['name']}:{g['index']}", n["name"], int(g["index"]),
                     int(g["memory_mb"])) for n in up for g in n["gpus"])
    shapes = [(len(n["gpus"]), min(int(g["memory_mb"]) for g in n["gpus"]),
               max(int(g["memory_mb"]) for g in n["gpus"])) for n in up]
    if len(set(shapes)) == 1 and shapes[0][1] == shapes[0][2]:
        spec = f"{len(up)}x{shapes[0][0]}:{shapes[0][1]}"
    else:
        spec = ",".join(f"{n['name']}:{c}x{lo}" + (f"-{hi}" if hi != lo else "")
                        for n, (c, lo, hi) in zip(up, shapes))
    per_node = ", ".join(f"{n['name']}: {c} x {lo}" + (f"-{hi}" if hi != lo else "") + " MiB"
                         for n, (c, lo, hi) in zip(up, shapes))
    text = (f"{len(gpus)} GPU{'s' * (len(gpus) != 1)} on {len(up)} "
            f"node{'s' * (len(up) != 1)} ({per_node})")
    return LiveCluster(SimCluster(spec, gpus), spec, text)


def simulate_same(jobs: list, profiles, policy_name: str, cluster, seed: int = 0):
    """The same jobs through the simulator on ``cluster`` (a SimCluster, a LiveCluster or a
    spec), with the profile's measured costs, the live tick, the runner's default
    sampling warm-up and share, and its final checkpoint."""
    from tfgshare.policies.registry import get_policy
    from tfgshare.runner.config import TrainConfig
    from tfgshare.sim.cluster import load_cluster
    from tfgshare.sim.config import SimConfig
    from tfgshare.sim.engine import simulate

    if isinstance(cluster, LiveCluster):
        cluster = cluster.sim
    elif isinstance(cluster, str):
        cluster = load_cluster(cluster)
    # the live runner's sampling phase: its default warm-up and share of the job
    config = SimConfig(seed=seed, tick_s=RUNNER_TICK_S, warmup_steps=TrainConfig.warmup_steps,
                       sample_share=TrainConfig.max_sample_share, runner_checkpoints=True,
                       **profiles.sim_overrides())
    return simulate(cluster, jobs, profiles, get_policy(policy_name), config)


def expected_wall_s(result) -> float:
    """The simulated replay's wall time: first arrival to last finish (inf when a job
    never finished)."""
    records = result.records
    if not records or any(r.finish_time is None for r in records):
        return math.inf
    return max(r.finish_time for r in records) - min(r.submit_time for r in records)


def cap_gpus(jobs: list, num_gpus: int) -> list:
    """``jobs`` with no GPU count above the cluster's ``num_gpus``."""
    return [dataclasses.replace(j, num_gpus=min(j.num_gpus, num_gpus)) for j in jobs]


def choose_speedup(within_s: float, expected, start: float = 1000.0,
                   iterations: int = 12) -> tuple[float, float]:
    """The smallest speed-up whose ``expected(speedup)`` wall time fits ``within_s``
    (searched on a log scale), and that wall time. ValueError when even ``MAX_SPEEDUP``
    does not fit (start-ups and one step a job take longer)."""
    if not (within_s > 0 and math.isfinite(within_s)):
        raise ValueError(f"--within must be a positive duration, got {within_s} s")
    fits, slow = None, None        # (speedup, wall) that fits / the fastest one that does not
    k = start
    while fits is None:
        wall = expected(k)
        if wall <= within_s:
            fits = (k, wall)
        else:
            slow = (k, wall)
            if k >= MAX_SPEEDUP:
                raise ValueError(
                    f"cannot fit --within {within_s:.0f} s: even at --speedup {k:g} the "
                    f"simulator expects {_minutes(wall)} (start-ups and one step a job)")
            k = min(MAX_SPEEDUP, k * max(2.0, 1.5 * wall / within_s))
    while slow is None:            # find one that does not fit, below
        k = fits[0] / max(2.0, 1.5 * within_s / max(fits[1], 1e-9))
        if k < 1:
            return fits
        wall = expected(k)
        if wall <= within_s:
            fits = (k, wall)
        else:
            slow = (k, wall)
    for _ in range(iterations):    # bisect between them on a log scale
        if fits[0] / slow[0] < 1.02:
            break
        k = math.sqrt(fits[0] * slow[0])
        wall = expected(k)
        if wall <= within_s:
            fits = (k, wall)
        else:
            slow = (k, wall)
    scale = 10 ** (math.floor(math.log10(fits[0])) - 2)
    rounded = math.ceil(fits[0] / scale) * scale           # 3 significant figures, up
    wall = expected(rounded)
    return (float(f"{rounded:.3g}"), wall) if wall <= within_s else fits


def _minutes(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "longer than any time (a job never finishes)"
    if seconds < 120:
        return f"about {seconds:.0f} s"
    if seconds < 7200:
        return f"about {seconds / 60:.0f} min"
    return f"about {seconds / 3600:.1f} h"


def expected_line(wall_s: float, speedup: float, within: str | None = None) -> str:
    """What the replay tells a user before it starts, e.g. ``expected to take about 14 min
    at --speedup 2000`` (the simulator's makespan of the same jobs on the live cluster)."""
    line = f"expected to take {_minutes(wall_s)} at --speedup {speedup:g}"
    if within is not None:
        line += f", the smallest speed-up expected to finish --within {within}"
    return line + " (simulated on the live cluster)"


_UNITS = {"s": 1, "m": 60, "min": 60, "h": 3600}


def parse_duration(text: str) -> float:
    """Seconds in ``10m``, ``90s``, ``1h30m`` or a plain number of seconds; ValueError else."""
    import re

    value = text.strip().lower()
    try:
        seconds = float(value)
    except ValueError:
        parts = re.findall(r"(\d+(?:\.\d+)?)\s*(min|h|m|s)", value)
        if not parts or re.sub(r"(\d+(?:\.\d+)?)\s*(min|h|m|s)", "", value).strip():
            raise ValueError(f"--within takes a duration such as 10m, 90s or 1h30m, "
                             f"got {text!r}") from None
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ValueError(f"--within must be a positive duration, got {text!r}")
    return seconds
