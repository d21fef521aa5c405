"""``tfgshare demo``: a local cluster trains a mixed batch of small TF-Slim jobs.

It starts a coordinator and one agent with two virtual GPUs on loopback (jobs
train on the CPU), submits small lenet / cifarnet / mobilenet_v1 jobs, shows
live progress, migrates one running job to the other GPU, suspends and resumes
another (moves a user asks for), then submits one more job. fgs runs with its
default parameters and every job with ``--memory_fraction auto`` (its fragment
sized from its sample). It ends with the per-job table (predicted and actual
run times), the utilisation figures, the policy actions the coordinator
refused (none expected) and the prediction error. Every process it started is stopped at the end, on Ctrl-C and on error.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table

from tfgshare.client.api import ClientError, Refused
from tfgshare.localcluster import LocalCluster
from tfgshare.schema import JobSpec

NODE = "node1"
# model, image size, batch, steps, fraction: small enough for a 2-core CPU; every
# fraction "auto" (sized from the job's sample)
SMALL = [
    ("lenet", None, 8, 300, "auto"),
    ("cifarnet", None, 8, 100, "auto"),
    ("mobilenet_v1", 32, 8, 40, "auto"),
    ("lenet", None, 8, 200, "auto"),
    ("mobilenet_v1", 32, 8, 40, "auto"),
]
# submitted once the moves are done, while the small jobs hold both GPUs
BIG = ("cifarnet", None, 8, 60, "auto")
LATE_AFTER_S = 50.0   # submit it by then even if the moves have not happened yet
MAX_JOBS = len(SMALL) + 1
RUNNER_FLAGS = ["--log_every_n_steps", "5", "--save_interval_secs", "0"]


def spec(row: tuple, name: str) -> JobSpec:
    """A job of the catalogue as a JobSpec."""
    model, size, batch, steps, fraction = row
    return JobSpec(model_name=model, name=name, batch_size=batch, max_number_of_steps=steps,
                   image_size=size, memory_fraction=fraction, extra=list(RUNNER_FLAGS))


def demo_jobs(n: int) -> tuple[list[JobSpec], JobSpec]:
    """The demo's first batch (``n - 1`` small jobs) and the big job submitted later."""
    small = [spec(row, f"demo-{i}-{row[0]}") for i, row in enumerate(SMALL[:n - 1], 1)]
    return small, spec(BIG, f"demo-{n}-{BIG[0]}-big")


@dataclass
class Script:
    """What the demo forces: a migration to the other GPU, a suspend + resume, a late big job.

    A move goes to a running job that has made a few steps in its current
    attempt and is not near its end; a migration is retried until the other GPU
    has room. The big job is submitted once both moves are done (or after
    ``LATE_AFTER_S``), when both GPUs hold small jobs, so it has to wait.
    """

    big: JobSpec
    t0: float
    mover: str | None = None
    holder: str | None = None
    big_id: str | None = None
    suspended_at: float | None = None
    resumed: bool = False
    notes: list[str] = field(default_factory=list)
    _run_from: dict[str, int] = field(default_factory=dict)   # job -> steps when seen running

    def step(self, client, jobs: dict[str, dict], now: float) -> list[str]:
        """Issue the moves that are due; return ids of jobs it submitted."""
        for j in jobs.values():
            if j["state"] == "running":
                self._run_from.setdefault(j["id"], j["steps_done"])
            else:
                self._run_from.pop(j["id"], None)
        ready = [j for j in jobs.values() if j["state"] == "running"
                 and j["steps_done"] >= self._run_from[j["id"]] + 5
                 and j["steps_done"] <= 0.7 * j["total_steps"]]
        if self.mover is None:
            for job in ready:
                here = job["fragments"][0][0]
                there = f"{NODE}:{1 - int(here.split(':')[1])}"
                if self._try(lambda: client.migrate(job["id"], there),
                             f"migrate {job['id']} from {here} to {there}"):
                    self.mover = job["id"]
                    break
        if self.holder is None:
            for job in ready:
                if job["id"] != self.mover and self._try(lambda: client.suspend(job["id"]),
                                                          f"suspend {job['id']}"):
                    self.holder, self.suspended_at = job["id"], now
                    break
        elif not self.resumed and jobs[self.holder]["state"].startswith("suspended") \
                and now - self.suspended_at > 2:
            self.resumed = self._try(lambda: client.resume(self.holder),
                                     f"resume {self.holder}")
        if self.big_id is None and ((self.mover and self.resumed)
                                    or now - self.t0 > LATE_AFTER_S):
            (self.big_id,) = client.submit([self.big])
            self.notes.append(f"submit {self.big_id}: {self.big.model_name}")
            return [self.big_id]
        return []

    @property
    def done(self) -> bool:
        return bool(self.mover and self.resumed and self.big_id)

    def _try(self, call, what: str) -> bool:
        try:
            call()
        except Refused as exc:
            if "not fit" not in str(exc):
                self.notes.append(f"{what} refused: {exc}")
            return False
        self.notes.append(what)
        return True


def render(jobs: list[dict], nodes: list[dict], elapsed: float, notes: list[str]) -> Group:
    """The live view: jobs with progress bars, GPUs with their fragments."""
    jt = Table(title=f"tfgshare demo - {elapsed:5.1f}s", expand=False)
    for col in ("job", "model", "state", "GPU", "progress", "steps", "remaining"):
        jt.add_column(col)
    for j in jobs:
        where = ", ".join(f"{g} ({f:.2f})" for g, f in j["fragments"]) or "-"
        left = j.get("predicted_remaining_s")
        jt.add_row(j["id"], j["model"], j["state"], where,
                   ProgressBar(total=j["total_steps"], completed=j["steps_done"], width=24),
                   f"{j['steps_done']}/{j['total_steps']}",
                   f"{left:.0f}s" if isinstance(left, (int, float)) and j["state"] == "running"
                   else "")
    gt = Table(title="GPUs", expand=False)
    for col in ("GPU", "allocated", "fragments"):
        gt.add_column(col)
    for node in nodes:
        for g in node["gpus"]:
            used = sum(f["fraction"] for f in g["fragments"])
            gt.add_row(g["id"], ProgressBar(total=1.0, completed=min(used, 1.0), width=24),
                       " ".join(f"{f['job']}:{f['fraction']:.2f}" for f in g["fragments"]))
    return Group(jt, gt, *(f"- {n}" for n in notes[-4:]))


def main(argv: list[str] | None = None) -> int:
    """Run the demo; 0 when every job finished and the moves happened."""
    p = argparse.ArgumentParser(prog="tfgshare demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=4,
                   help=f"jobs to submit, 2..{MAX_JOBS} (default 5)")
    p.add_argument("--policy", default="fgs", help="scheduling policy (default fgs)")
    p.add_argument("--dir", type=Path, help="where state and logs go (default: a temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the state and logs afterwards")
    p.add_argument("--timeout", type=float, default=400.0,
                   help="give up after this many seconds (default 400)")
    p.add_argument("--plain", action="store_true", help="print changes instead of a live view")
    args = p.parse_args(argv)
    if not 3 <= args.jobs <= MAX_JOBS:
        p.error(f"--jobs must be between 3 and {MAX_JOBS}")
    console = Console(soft_wrap=True)
    for sig in (signal.SIGTERM, signal.SIGINT):   # a kill also stops what we started
        signal.signal(sig, _interrupt)
    root = args.dir or Path(tempfile.mkdtemp(prefix="tfgshare-demo-"))
    # the policy with its default parameters
    cluster = LocalCluster(root, policy=args.policy)
    ok, t0 = False, time.monotonic()
    try:
        console.print(f"[bold]tfgshare demo[/] in {root}")
        cluster.start_coordinator()
        cluster.start_agent(NODE, "2x16GiB", threads=1)
        cluster.wait_nodes({NODE})
        console.print(f"coordinator {cluster.address}, agent {NODE} with 2 virtual 16 GiB GPUs")
        with cluster.client(timeout_s=5.0) as client:
            small, big = demo_jobs(args.jobs)
            ids = client.submit(small)
            console.print(f"submitted {len(ids)} jobs: {', '.join(ids)}")
            ok = watch(client, ids, Script(big, t0), console, args, t0)
            report = client.metrics()
        console.print()
        console.print(report["report"], highlight=False)
        s = report.get("summary") or {}
        if s:
            console.print(f"\nGPU utilisation over the run: allocated "
                          f"{100 * s['util_allocated']:.1f}%, effective "
                          f"{100 * s['util_effective']:.1f}%, device "
                          f"{100 * s['util_device']:.1f}% (busy GPUs "
                          f"{100 * s['util_device_busy']:.1f}%) of {report['gpus']} GPUs; "
                          f"{s['suspends']} suspends, {s['resumes']} resumes, "
                          f"{s['migrations']} migrations")
    except KeyboardInterrupt:
        console.print("\ninterrupted; stopping everything")
    except (ClientError, RuntimeError, TimeoutError) as exc:
        console.print(f"[red]demo failed:[/] {exc}")
    finally:
        cluster.stop_all(timeout_s=15)
        took = time.monotonic() - t0
        if args.keep or not ok:
            console.print(f"state: {cluster.state}\ncheckpoints: {cluster.checkpoints}\n"
                          f"logs: {root / 'logs'} (agent runs: {root / 'agents'})")
        elif args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
            console.print(f"removed {root} (--keep keeps the state and logs)")
        console.print(f"demo {'done' if ok else 'did not complete'} in {took:.0f}s; "
                      "all processes stopped")
    return 0 if ok else 1


def _interrupt(signum, _frame):
    raise KeyboardInterrupt


def watch(client, ids: list[str], script: Script, console: Console, args, t0: float) -> bool:
    """Show progress until every job is done, forcing the scripted moves; True if all finished."""
    wanted = set(ids)
    live = None if args.plain or not console.is_terminal else Live(console=console,
                                                                   refresh_per_second=4)
    seen: dict[str, str] = {}
    noted = 0
    try:
        if live:
            live.start()
        while True:
            now = time.monotonic()
            jobs = [j for j in client.jobs() if j["id"] in wanted]
            by_id = {j["id"]: j for j in jobs}
            wanted.update(script.step(client, by_id, now))
            if live:
                live.update(render(jobs, client.nodes(), now - t0, script.notes))
            else:
                for j in jobs:
                    if seen.get(j["id"]) != j["state"]:
                        seen[j["id"]] = j["state"]
                        where = ",".join(g for g, _ in j["fragments"])
                        console.print(f"[{now - t0:6.1f}s] {j['id']} {j['model']:<12} "
                                      f"{j['state']}{' on ' + where if where else ''}")
                for n in script.notes[noted:]:
                    console.print(f"[{now - t0:6.1f}s] -> {n}")
                noted = len(script.notes)
            done = all(j["state"] in ("finished", "failed", "cancelled") for j in jobs)
            if done and script.big_id in by_id:
                break
            if now - t0 > args.timeout:
                console.print(f"[red]not all jobs finished within {args.timeout:g}s[/]")
                return False
            time.sleep(0.5)
    finally:
        if live:
            live.stop()
    failed = [j["id"] for j in jobs if j["state"] != "finished"]
    if failed:
        console.print(f"[red]jobs not finished: {', '.join(failed)}[/]")
    if not script.done:
        console.print("[yellow]the forced migration and suspend/resume did not both happen[/]")
    return not failed and script.done
