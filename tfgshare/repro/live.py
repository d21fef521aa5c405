"""Driving a live coordinator through a run: timed submissions, progress, fragment history.

``run_schedule`` submits each job at its time (seconds after the start), follows every
job with a progress bar until all are done, and records which job held which fraction
of which GPU at each poll (the Gantt chart's data); stopped (its timeout, Ctrl-C or
SIGTERM), it cancels the jobs it submitted that have not ended, so none is left behind.
``live_report`` turns the coordinator's run report into ``metrics.Report``. ``wait_warm``
waits until a local cluster's agents have their spare runner ready, so a run starts on a
warmed-up cluster.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from dataclasses import dataclass, field

from pathlib import Path

from tfgshare.client.api import Client, ClientError, Refused
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
    """Submit ``(time, spec)`` pairs at their times and follow the jobs until all are done;
    stopped before, cancel those not done."""
    from rich.console import Console

    pending = sorted(schedule, key=lambda p: p[0])
    out = LiveRun()
    t0 = time.monotonic()
    console = Console(stderr=True, quiet=quiet)
    try:
        with _sigterm_interrupts():
            _follow(client, pending, out, t0, console, timeout_s, poll_s)
    except KeyboardInterrupt:
        _cancel_left(client, out, "stopped")
        raise
    if out.timed_out:
        _cancel_left(client, out, f"stopped after its {timeout_s:g} s timeout")
    out.wall_s = time.monotonic() - t0
    order = {i: n for n, i in enumerate(out.ids)}
    out.jobs.sort(key=lambda j: order[j["id"]])
    return out


@contextlib.contextmanager
def _sigterm_interrupts():
    """SIGTERM (``timeout``, ``kill``) stops the run as Ctrl-C does (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt
    before = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def _cancel_left(client: Client, out: LiveRun, why: str) -> None:
    """Cancel the submitted jobs that have not ended, and say so."""
    try:
        ours = set(out.ids)
        left = [j["id"] for j in client.jobs() if j["id"] in ours and j["state"] not in DONE]
        for job in left:
            with contextlib.suppress(Refused):   # it ended meanwhile
                client.cancel(job)
    except ClientError as err:   # the coordinator gone: nothing left to cancel there
        print(f"{why}; could not cancel its jobs: {err}", file=sys.stderr)
        return
    if left:
        print(f"{why}: cancelled {len(left)} unfinished job{'s' if len(left) > 1 else ''} of "
              f"the {len(out.ids)} it submitted ({', '.join(left)})", file=sys.stderr)


def _follow(client: Client, pending: list, out: LiveRun, t0: float, console,
            timeout_s: float, poll_s: float) -> None:
    """Submit the due jobs and follow them until all are done or ``timeout_s`` passes."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, \
        TimeElapsedColumn

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


def run_report_of(metrics: dict, run: LiveRun) -> tuple[Report, int]:
    """The live row for ``run``'s jobs only, and how many other jobs the coordinator's
    report (``Client.metrics()``) also counted (0: its report is the row as it is).

    With other jobs, the job figures (count, JCT, waits, makespan, moves, prediction
    error) are taken over ``run.jobs`` by ``metrics.compute_report``'s definitions; the
    utilisations stay the coordinator's, over its whole run.
    """
    import dataclasses
    import math
    import statistics

    report = live_report(metrics)
    others = report.jobs - len(run.ids)
    if others <= 0:
        return report, 0
    done = [j for j in run.jobs if j["state"] == "finished" and j.get("finish_time")]
    jcts = sorted(j["finish_time"] - j["submit_time"] for j in done)
    errors = sorted(abs(j["prediction_error"]) for j in done
                    if isinstance(j.get("prediction_error"), (int, float)))

    def pct(values: list[float], q: float) -> float:   # numpy's linear percentile
        at = (len(values) - 1) * q
        lo = math.floor(at)
        return values[lo] + (values[min(lo + 1, len(values) - 1)] - values[lo]) * (at - lo)

    first = min((j["submit_time"] for j in run.jobs), default=0.0)
    nan = math.nan
    return dataclasses.replace(
        report, jobs=len(run.jobs), finished=len(done),
        jct_mean=statistics.fmean(jcts) if jcts else nan,
        jct_median=statistics.median(jcts) if jcts else nan,
        jct_p95=pct(jcts, 0.95) if jcts else nan,
        wait_mean=statistics.fmean(j["waited_s"] for j in done) if done else nan,
        makespan=max(j["finish_time"] for j in done) - first if done else 0.0,
        suspends=sum(j["suspends"] for j in run.jobs),
        resumes=sum(j["resumes"] for j in run.jobs),
        migrations=sum(j["migrations"] for j in run.jobs),
        move_cost_s=float(sum(j.get("move_cost_s") or 0.0 for j in run.jobs)),
        pred_error_mean=statistics.fmean(errors) if errors else None,
        pred_error_median=statistics.median(errors) if errors else None,
        pred_error_p90=pct(errors, 0.9) if errors else None,
        jct_by_size={}, jobs_by_size={}), others
