"""``tfgshare reproduce four-models``: the paper's four models on a local live cluster, per policy.

The batch (models, batch sizes, step counts, arrivals, cluster) is
``tfgshare/data/four_models.yaml`` (its comments give the reasoning). For each policy a
fresh ``LocalCluster`` (new coordinator state, checkpoints and agents) runs the batch to
the end (its checkpoints are deleted once its records are read); then the folder gets ``report.txt`` / ``report.csv`` (the metrics table with
ratios against fifo, or the first policy), ``jobs.json`` (every job's record as the
coordinator reported it, per policy), ``jct.png`` (JCT per job per policy) and
``gantt.png`` (which job held which fraction of which GPU when, per policy). On virtual
GPUs it also prints the simulator's prediction of the same run, from this run's
measurements, beside the live figures and writes it to ``predicted.csv``
(``four_models_sim``).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path

import yaml

from tfgshare.metrics import Report, format_table, table_rows

EXPERIMENTS = ("four-models",)
# the paper's traditional methods, the two research baselines and fgs (tiresias-promote,
# a variant of tiresias, is run only when named)
DEFAULT_POLICIES = ("fifo", "sjf", "tiresias", "gandiva", "fgs")


def default_config() -> Path:
    """The shipped batch definition."""
    return Path(str(resources.files("tfgshare") / "data" / "four_models.yaml"))


def load_batch(path: Path, scale: str, max_jobs: int | None = None) -> dict:
    """The ``scale`` section of a batch YAML, checked; ``max_jobs`` keeps the first N jobs."""
    from slim_models import nets_factory

    data = yaml.safe_load(Path(path).read_text())
    scales = (data or {}).get("scales") or {}
    if scale not in scales:
        raise ValueError(f"{path}: no scale {scale!r}; scales: {', '.join(scales) or 'none'}")
    batch = dict(scales[scale])
    jobs = list(batch.get("jobs") or [])[:max_jobs]
    if not jobs:
        raise ValueError(f"{path}: scale {scale!r} has no jobs")
    for i, j in enumerate(jobs):
        for key in ("model", "batch_size", "steps"):
            if key not in j:
                raise ValueError(f"{path}: scales.{scale}.jobs[{i}] lacks {key!r}")
        nets_factory.check_model(j["model"], j.get("image_size"))
    from typing import get_args

    from tfgshare.schema import Optimizer
    for where, opt in [("optimizer", batch.get("optimizer"))] + [
            (f"jobs[{i}].optimizer", j.get("optimizer")) for i, j in enumerate(jobs)]:
        if opt is not None and opt not in get_args(Optimizer):
            raise ValueError(f"{path}: scales.{scale}.{where}: {opt!r} is not one of "
                             f"{', '.join(get_args(Optimizer))}")
    batch["jobs"] = jobs
    return batch


def schedule(batch: dict) -> list:
    """``(arrival s, JobSpec)`` per job: ``burst`` at 0, then one every ``interval_s``."""
    from tfgshare.schema import JobSpec

    burst, interval = int(batch.get("burst", len(batch["jobs"]))), float(batch.get("interval_s", 0))
    optimizer = batch.get("optimizer")      # the scale's, unless a job names its own
    out = []
    for i, j in enumerate(batch["jobs"]):
        at = 0.0 if i < burst else (i - burst + 1) * interval
        out.append((at, JobSpec(model_name=j["model"], name=f"{i + 1:02d}-{j['model']}",
                                batch_size=int(j["batch_size"]),
                                max_number_of_steps=int(j["steps"]),
                                image_size=j.get("image_size"),
                                optimizer=j.get("optimizer", optimizer))))
    return out


def run_policy(policy: str, batch: dict, root: Path, quiet: bool = False) -> dict:
    """One fresh local cluster under ``policy`` running the batch; its report and records."""
    from tfgshare.agent.config import default_spares
    from tfgshare.localcluster import LocalCluster

    from .live import live_report, run_schedule, wait_warm

    c = batch["cluster"]
    load_before = os.getloadavg()
    cpu_before = _children_cpu_s()
    with LocalCluster(root, policy=policy) as cluster:
        cluster.start_coordinator()
        names = {f"node{i + 1}" for i in range(int(c.get("nodes", 1)))}
        for name in sorted(names):
            cluster.start_agent(name, virtual_gpus=c.get("virtual_gpus"))
        cluster.wait_nodes(names)
        # the batch starts on a warmed-up cluster (each agent's spare runner ready), as a
        # cluster that has been running does; not ready in time: it starts anyway
        gpus = c.get("virtual_gpus")
        wait_warm(cluster.root, names,
                  spares=default_spares(int(str(gpus).split("x")[0])) if gpus else 1)
        with cluster.client(timeout_s=10.0) as client:
            run = run_schedule(client, schedule(batch), float(batch.get("timeout_s", 900)),
                               quiet=quiet)
            metrics = client.metrics()
            records = {j["id"]: j for j in client.jobs()}
            nodes = client.nodes()
    # the reset before the next policy: the batch's checkpoints are not needed once its
    # records are read (vgg_16 leaves up to 3 x 1.5 GB per job; a full disk stopped a run)
    shutil.rmtree(cluster.checkpoints, ignore_errors=True)
    report = live_report(metrics)
    return {"policy": policy, "report": report, "wall_s": run.wall_s,
            # CPU the cluster used (coordinator, agent and every runner it reaped), which
            # unlike the wall time does not depend on the load, and the load around it
            "cpu_s": _children_cpu_s() - cpu_before,
            "load": [round(x, 1) for x in (*load_before, *os.getloadavg())],
            "timed_out": run.timed_out, "fragments": run.fragments,
            "jobs": [records[i] for i in run.ids], "job_rows": metrics["jobs"],
            "nodes": nodes,
            "state": str(root / "state.db")}


def predicted(batch: dict, results: dict[str, dict], out: Path) -> None:
    """Print the simulator's prediction of the same run beside the live figures and write
    it to ``predicted.csv`` (``four_models_sim``); a failure is reported, not raised."""
    from .four_models_sim import comparison, format_comparison, predict, write_comparison

    try:
        sim = predict(schedule(batch), results, results[next(iter(results))]["nodes"])
    except (ValueError, KeyError) as err:
        print(f"no simulated prediction: {err}", file=sys.stderr)
        return
    rows = comparison({p: r["report"] for p, r in results.items()}, sim)
    write_comparison(out / "predicted.csv", rows)
    print("the simulator on this run's measurements (four_models_sim):")
    print(format_comparison(rows))


def _children_cpu_s() -> float:
    """User + system CPU seconds of this process's ended, reaped children (and theirs)."""
    t = os.times()
    return t.children_user + t.children_system


def write_outputs(out: Path, results: dict[str, dict]) -> dict[str, Report]:
    """Write the table, per-job JSON and figures; return the reports by policy."""
    out.mkdir(parents=True, exist_ok=True)
    reports = {p: r["report"] for p, r in results.items()}
    baseline = "fifo" if "fifo" in reports else next(iter(reports))
    table = format_table(reports, baseline=baseline)
    (out / "report.txt").write_text(table + "\n")
    rows = table_rows(reports, baseline=baseline)
    with open(out / "report.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
        writer.writeheader()
        writer.writerows(rows)
    doc = {"baseline": baseline,
           "policies": {p: {"report": r["report"].as_dict(), "wall_s": r["wall_s"],
                            "cpu_s": r.get("cpu_s"), "load": r.get("load"),
                            "timed_out": r["timed_out"], "jobs": r["jobs"]}
                        for p, r in results.items()}}
    (out / "jobs.json").write_text(json.dumps(doc, indent=1, default=str))
    plot_jct(results, out / "jct.png")
    plot_gantt(results, out / "gantt.png")
    return reports


def plot_jct(results: dict[str, dict], path: Path) -> None:
    """Grouped bars: each job's JCT under each policy."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    policies = list(results)
    names = [j["name"] for j in next(iter(results.values()))["jobs"]]
    width = 0.8 / len(policies)
    fig, ax = plt.subplots(figsize=(max(6, len(names) * 0.9), 4))
    for k, p in enumerate(policies):
        by_name = {j["name"]: j for j in results[p]["jobs"]}
        jcts = [(by_name[n]["finish_time"] - by_name[n]["submit_time"])
                if n in by_name and by_name[n]["finish_time"] else 0.0 for n in names]
        ax.bar([i + k * width for i in range(len(names))], jcts, width, label=p)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(names))])
    ax.set_xticklabels(names, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("JCT (s)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def fragment_intervals(samples: list[tuple[float, str, str, float]],
                       poll_s: float = 0.5) -> list[tuple[str, str, float, float, float]]:
    """Polled ``(t, job, gpu, fraction)`` samples as ``(job, gpu, fraction, start, end)`` spans."""
    spans: list[list] = []
    open_: dict[tuple[str, str, float], list] = {}
    for t, job, gpu, frac in sorted(samples):
        key = (job, gpu, frac)
        span = open_.get(key)
        if span is not None and t - span[4] <= 2.5 * poll_s:
            span[4] = t
        else:
            span = [job, gpu, frac, t, t]
            open_[key] = span
            spans.append(span)
    return [(j, g, f, a, b + poll_s) for j, g, f, a, b in spans]


def plot_gantt(results: dict[str, dict], path: Path) -> None:
    """Per policy, per GPU lane, each job's fragment as a bar of height = its fraction."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    policies = list(results)
    fig, axes = plt.subplots(len(policies), 1, figsize=(10, 1.8 + 1.4 * len(policies)),
                             squeeze=False)
    names = sorted({j["id"] for r in results.values() for j in r["jobs"]})
    cmap = plt.get_cmap("tab20")
    for ax, p in zip(axes[:, 0], policies):
        label = {j["id"]: j["name"] for j in results[p]["jobs"]}
        spans = fragment_intervals(results[p]["fragments"])
        gpus = sorted({g for _, g, *_ in spans})
        for job, gpu, frac, a, b in spans:
            # stack a GPU's concurrent fragments: offset = fractions of earlier-starting
            # spans on that GPU that overlap this one
            lane = gpus.index(gpu)
            below = sum(f for j2, g2, f, a2, b2 in spans if g2 == gpu and j2 != job
                        and a2 < b and b2 > a and (a2, j2) < (a, job))
            ax.broken_barh([(a, b - a)], (lane + min(below, 1 - frac), frac * 0.95),
                           color=cmap(names.index(job) % 20), edgecolor="black", linewidth=0.3)
            if b - a > 8:
                ax.text(a + 0.5, lane + min(below, 1 - frac) + frac * 0.4,
                        label.get(job, job)[:14], fontsize=6, va="center")
        ax.set_yticks([i + 0.5 for i in range(len(gpus))])
        ax.set_yticklabels(gpus, fontsize=7)
        ax.set_ylim(0, max(1, len(gpus)))
        ax.set_title(f"{p}: GPU fragments over time (bar height = fraction)", fontsize=9)
    axes[-1, 0].set_xlabel("seconds since the first submission")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tfgshare reproduce",
        description="Run the paper's four-model batch on a local live cluster once per "
                    "policy (fresh cluster each time); write the table, records and figures.")
    p.add_argument("experiment", choices=EXPERIMENTS)
    p.add_argument("--policy", default=",".join(DEFAULT_POLICIES),
                   help=f"comma-separated (default {','.join(DEFAULT_POLICIES)})")
    p.add_argument("--scale", default="small",
                   help="small (CPU, minutes), long (CPU: the small batch with about 20 s "
                        "of steps a job), underused (CPU: one virtual GPU of all the cores, "
                        "which one job leaves partly idle), underused-long (the same device, lenet "
                        "jobs of 600 steps) or paper (GPUs)")
    p.add_argument("--config", default=None, help="batch YAML (default: the shipped one)")
    p.add_argument("--jobs", type=int, default=None, help="only the first N jobs of the batch")
    p.add_argument("--real-gpus", action="store_true",
                   help="agents use the node's GPUs (NVML) instead of the scale's virtual GPUs")
    p.add_argument("--out", default=None, help="output folder (default: a new temp folder)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the reproduce command; 0 when every job finished under every policy."""
    from tfgshare.policies.registry import get_policy

    args = _parser().parse_args(argv)
    try:
        names = [n.strip() for n in args.policy.split(",") if n.strip()]
        if not names:
            raise ValueError("--policy needs at least one policy")
        for n in names:
            get_policy(n)
        if args.jobs is not None and args.jobs < 1:
            raise ValueError(f"--jobs must be >= 1, got {args.jobs}")
        batch = load_batch(Path(args.config) if args.config else default_config(),
                           args.scale, args.jobs)
        if args.real_gpus:
            batch["cluster"] = {**batch["cluster"], "virtual_gpus": None}
    except (ValueError, KeyError, FileNotFoundError) as err:
        msg = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"tfgshare reproduce: error: {msg}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="tfgshare-four-models-"))
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    t0 = time.monotonic()
    for name in names:
        print(f"--- {name}: {len(batch['jobs'])} jobs on a fresh local cluster", file=sys.stderr)
        results[name] = run_policy(name, batch, out / "clusters" / name)
        r = results[name]
        print(f"{name}: {r['report'].finished}/{r['report'].jobs} finished in "
              f"{r['wall_s']:.0f} s; the cluster used {r['cpu_s']:.0f} CPU s; load average "
              f"{r['load'][0]:.1f} before, {r['load'][3]:.1f} after", file=sys.stderr)
        # written after each policy, so a run stopped part-way keeps the policies it finished
        write_outputs(out, results)
    print((out / "report.txt").read_text())
    if batch["cluster"].get("virtual_gpus"):
        predicted(batch, results, out)
    print(f"{len(names)} policies in {time.monotonic() - t0:.0f} s; wrote report.txt, "
          f"report.csv, jobs.json, jct.png, gantt.png (and predicted.csv) to {out}")
    ok = all(r["report"].finished == r["report"].jobs and not r["timed_out"]
             for r in results.values())
    return 0 if ok else 1
