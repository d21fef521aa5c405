"""The simulator's prediction of a ``tfgshare reproduce four-models`` run.

The batch's jobs (same models, batch sizes, steps and arrivals) go through the simulator
under each policy that ran live, on the live cluster's GPUs (``replay_plan.live_cluster``
of the coordinator's node list), with a profile made from what the live runs measured
per (model, batch size):

- ``step_time_s``: the job's step time alone: fifo's jobs each ran alone on their
  device (their measured step time); without a fifo run, samples taken with no co-tenant;
- ``gpu_util`` and ``memory_mb``: the sampling phases' (a virtual GPU's utilisation is
  the runner's share of the device's cores, ``runner.cpu.solo_share``);
- ``startup_s``: fifo's measured start costs; ``resume_startup_s``: the measured start
  cost of a job's later starts (a sampled job's restart from its checkpoint).

A value no run measured is the CPU profile's (``data/profiles/cpu-virtual-gpu.yaml``).
The co-location model is the simulator's default (``sim.colocation.Colocation``: an
estimate, not fitted on this run), so a packed run's slowdown is predicted, not read
back: the CPU profile's own fit was made on one-core devices that each job saturates and
does not describe a device one job leaves partly idle.
"""

from __future__ import annotations

import csv
import dataclasses
import statistics
from pathlib import Path

from tfgshare.metrics import Report

FIELDS = (("JCT mean s", "jct_mean", 1.0), ("makespan s", "makespan", 1.0),
          ("device util %", "util_device", 100.0), ("effective util %", "util_effective", 100.0))


def _key_of(batch_jobs: list[tuple[float, object]]) -> dict[str, tuple[str, int]]:
    """Job name -> (model, batch size) of the schedule's specs."""
    return {spec.name: (spec.model_name, spec.batch_size) for _, spec in batch_jobs}


def measured_profiles(schedule: list, results: dict[str, dict], base_path: Path | None = None):
    """``Profiles`` for the batch's (model, batch size) keys from the live runs' records
    (see the module doc); ValueError when the base profile lacks a model."""
    from tfgshare.sim.profiles import Profiles, load_profiles

    base = load_profiles(base_path or Path(__file__).resolve().parents[1] / "data" / "profiles"
                         / "cpu-virtual-gpu.yaml")
    key_of = _key_of(schedule)
    alone, utils, memory, starts, resumes = {}, {}, {}, {}, {}
    for policy, r in results.items():
        for job in r["jobs"]:
            key = key_of.get(job.get("name"))
            if key is None:
                continue
            sample = job.get("sample") or {}
            if policy == "fifo" and job.get("measured_step_s"):
                alone.setdefault(key, []).append(job["measured_step_s"])
            elif "fifo" not in results and sample and not sample.get("co_tenants"):
                alone.setdefault(key, []).append(sample["step_time_s"])
            if sample:
                utils.setdefault(key, []).append(sample["gpu_util"])
                memory.setdefault(key, []).append(sample["peak_memory_mb"])
            if job.get("restart_s"):
                (starts if (job.get("attempt") or 1) <= 1 else resumes).setdefault(
                    key, []).append(job["restart_s"])
    by_key = {}
    for key in dict.fromkeys(key_of.values()):
        model, size = key
        rows = [p for (m, _), p in base.by_key.items() if m == model]
        if not rows:
            raise ValueError(f"the CPU profile has no {model!r} to complete the measurements")
        row = base.by_key.get(key) or rows[0]
        mean = statistics.fmean
        by_key[key] = dataclasses.replace(
            row, batch_size=size,
            step_time_s=mean(alone[key]) if key in alone else row.step_time_s,
            gpu_util=min(1.0, mean(utils[key])) if key in utils else row.gpu_util,
            memory_mb=max(memory[key]) if key in memory else row.memory_mb,
            startup_s=mean(starts[key]) if key in starts else row.startup_s,
            resume_startup_s=mean(resumes[key]) if key in resumes else row.resume_startup_s)
    return Profiles(base.reference_gpu, by_key, None, base.storage_mb_s, base.virtual,
                    None, "measured by this run")


def predict(schedule: list, results: dict[str, dict], nodes: list[dict]) -> dict[str, Report]:
    """The simulated report of the batch under each policy that ran live."""
    from philly.jobs import TraceJob

    from .replay_plan import live_cluster, simulate_same

    profiles = measured_profiles(schedule, results)
    cluster = live_cluster(nodes)
    trace = [TraceJob(spec.name, at, spec.num_gpus, 1.0, model=spec.model_name,
                      batch_size=spec.batch_size, total_steps=spec.max_number_of_steps)
             for at, spec in schedule]
    return {p: simulate_same(trace, profiles, p, cluster).report for p in results}


def _rel(live: float, sim: float) -> float | None:
    return (sim - live) / live if live else None


def comparison(live: dict[str, Report], sim: dict[str, Report]) -> list[dict]:
    """Per policy and figure: live, simulated and the relative difference; then, against
    the first policy, the ratios (its JCT over the policy's, the policy's device
    utilisation over its) live and simulated."""
    rows = []
    for policy in live:
        for name, attr, scale in FIELDS:
            a, b = scale * getattr(live[policy], attr), scale * getattr(sim[policy], attr)
            rows.append({"policy": policy, "figure": name, "live": round(a, 2),
                         "simulated": round(b, 2), "sim_vs_live": _rel(a, b)})
    first = next(iter(live))
    for policy in list(live)[1:]:
        for name, attr, invert in (("JCT ratio", "jct_mean", True),
                                   ("device util ratio", "util_device", False)):
            def ratio(reports):
                x, y = getattr(reports[first], attr), getattr(reports[policy], attr)
                num, den = (x, y) if invert else (y, x)
                return num / den if den else float("nan")
            a, b = ratio(live), ratio(sim)
            rows.append({"policy": f"{first} vs {policy}", "figure": name, "live": round(a, 3),
                         "simulated": round(b, 3), "sim_vs_live": _rel(a, b)})
    return rows


def format_comparison(rows: list[dict]) -> str:
    """The comparison as an aligned text table (at most 80 columns)."""
    lines = [f"{'policy':16} {'figure':18} {'live':>9} {'simulated':>10} {'sim vs live':>12}"]
    for r in rows:
        d = r["sim_vs_live"]
        lines.append(f"{r['policy']:16} {r['figure']:18} {r['live']:9.2f} {r['simulated']:10.2f} "
                     f"{'-' if d is None else f'{100 * d:+.1f} %':>12}")
    return "\n".join(lines)


def write_comparison(path: Path, rows: list[dict]) -> None:
    """``rows`` as CSV."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
