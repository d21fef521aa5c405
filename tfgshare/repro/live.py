"""Driving a live coordinator through a run: timed submissions, progress, fragment history.

``run_schedule`` submits each job at its time (seconds after the start), follows every
job with a progress bar until all are done, and records which job held which fraction
of which GPU at each poll (the Gantt chart's data). ``live_report`` turns the
coordinator's run report into ``metrics.Report``. ``wait_warm`` waits until a local
cluster's agents have their spare runner ready, so a run starts on a warmed-up cluster.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from pathlib import Path

from tfgshare.client.api import Client
from tfgshare.metrics import Report
from tfgshare.runner import protocol as rp
from tfgshare.schema import JobSpec

DONE = {"finished", "failed", "cancelled"}


@dataclass
class LiveRun:
    """What a live run left: job ids in submit order, fragment history, wall time."""

    ids: list[str] = field(default_factory=list)
    # (seconds since start, job id, gpu, fraction) at each poll for each held fragment
    fragments: list[tuple[float, str, str, float]] = field(default_factory=list)
    jobs: list[dict] = field(default_factory=list)     # the coordinator's last view of each
    wall_s: float = 0.0
    timed_out: bool = False


def run_schedule(client: Client, schedule: list[tuple[float, JobSpec]], timeout_s: float,
                 poll_s: float = 0.5, quiet: bool = False) -> LiveRun:
    """Submit ``(time, spec)`` pairs at their times and follow the jobs until all are done."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, \
        TimeElapsedColumn

    pending = sorted(schedule, key=lambda p: p[0])
    out = LiveRun()
    t0 = time.monotonic()
    console = Console(stderr=True, quiet=quiet)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=False) as bar:
        task = bar.add_task("jobs done", total=len(pending))
        while True:
            now = time.monotonic() - t0
            due = [spec for t, spec in pending if t <= now]
            if due:
                out.ids += client.submit(due)
                pending = pending[len(due):]
            jobs = [j for j in client.jobs() if j["id"] in set(out.ids)]
            for j in jobs:
                for gpu, fraction in j["fragments"] or ():
                    out.fragments.append((now, j["id"], gpu, float(fraction)))
            done = sum(j["state"] in DONE for j in jobs)
            running = sum(j["state"] == "running" for j in jobs)
            bar.update(task, completed=done,
                       description=f"jobs done ({running} running, "
                                   f"{len(out.ids) - done - running} waiting, "
                                   f"{len(pending)} to submit)")
            if not pending and done == len(out.ids):
                out.jobs = jobs
                break
            if now > timeout_s:
                out.jobs, out.timed_out = jobs, True
                break
            time.sleep(poll_s)
    out.wall_s = time.monotonic() - t0
    order = {i: n for n, i in enumerate(out.ids)}
    out.jobs.sort(key=lambda j: order[j["id"]])
    return out


def live_report(metrics: dict) -> Report:
    """The coordinator's run report (``Client.metrics()``) as a ``metrics.Report``."""
    summary = dict(metrics["summary"])
    known = set(Report.__dataclass_fields__)
    return Report(**{k: (float("nan") if v is None and k.startswith(("jct", "wait")) else v)
                     for k, v in summary.items() if k in known})


def wait_warm(root: Path, nodes: set[str], spares: int = 1, timeout_s: float = 180.0) -> bool:
    """Wait until each node's agent under ``LocalCluster`` root ``root`` has ``spares`` spare
    runners with TensorFlow imported (their log says so); False if not in time."""
    end = time.monotonic() + timeout_s
    logs = [Path(root) / "agents" / n / "spare-runner.log" for n in sorted(nodes)]
    while time.monotonic() < end:
        if all(f.exists() and f.read_text(errors="replace").count(rp.WARM_READY) >= spares
               for f in logs):
            return True
        time.sleep(0.2)
    return False
