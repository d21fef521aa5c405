"""``tfgshare demo``: a local cluster trains a mixed batch of small TF-Slim jobs.

It starts a coordinator and one agent with two virtual GPUs on loopback (jobs
train on the CPU), submits small lenet / cifarnet / mobilenet_v1 jobs, one of
which needs most of a GPU and must wait for a fragment, shows live progress,
suspends and resumes one job and migrates another to the other GPU, and ends
with the per-job table and the utilisation figures. Every process it started
is stopped at the end, on Ctrl-C and on error.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table

from tfgshare.client import ClientError, Refused
from tfgshare.localcluster import LocalCluster
from tfgshare.schema import JobSpec

NODE = "node1"
# model, image size, batch, steps, fraction: small enough for a 2-core CPU
SMALL = [
    ("lenet", None, 16, 1500, 0.3),
    ("cifarnet", None, 8, 250, 0.3),
    ("mobilenet_v1", 32, 8, 200, 0.3),
    ("lenet", None, 16, 1000, 0.3),
    ("mobilenet_v1", 32, 8, 150, 0.3),
]
BIG = ("cifarnet", None, 8, 200, 0.9)   # needs almost a whole GPU: waits for one
MAX_JOBS = len(SMALL) + 1
RUNNER_FLAGS = ["--warmup_steps", "2", "--num_sample_steps", "8", "--log_every_n_steps", "5",
                "--save_interval_secs", "0"]


def demo_jobs(n: int) -> list[JobSpec]:
    """The demo's batch: ``n - 1`` small jobs, then the big one."""
    rows = SMALL[:n - 1] + [BIG]
    # the image size travels as a runner flag (the runner's name for it is --image_size)
    return [JobSpec(model_name=m, name=f"demo-{i}-{m}", batch_size=b,
                    max_number_of_steps=steps, memory_fraction=f,
                    extra=RUNNER_FLAGS + (["--image_size", str(size)] if size else []))
            for i, (m, size, b, steps, f) in enumerate(rows, 1)]


@dataclass
class Script:
    """The moves the demo forces: one suspend + resume, one migration."""

    mover: str | None
    holder: str | None
    migrated: bool = False
    suspended_at: float | None = None
    resumed: bool = False
    notes: list[str] = field(default_factory=list)

    def step(self, client, jobs: dict[str, dict], now: float) -> None:
        """Issue the next forced move when its job is ready for it."""
        if self.mover and not self.migrated:
            job = jobs[self.mover]
            if job["state"] == "running" and job["steps_done"] >= 0.15 * job["total_steps"]:
                here = job["fragments"][0][0]
                there = f"{NODE}:{1 - int(here.split(':')[1])}"
                self._try(lambda: client.migrate(self.mover, there),
                          f"migrate {self.mover} from {here} to {there}", "migrated")
        if self.holder and self.suspended_at is None:
            job = jobs[self.holder]
            if job["state"] == "running" and job["steps_done"] >= 0.2 * job["total_steps"]:
                if self._try(lambda: client.suspend(self.holder), f"suspend {self.holder}"):
                    self.suspended_at = now
        elif self.holder and not self.resumed and jobs[self.holder]["state"].startswith("suspended") \
                and now - self.suspended_at > 3:
            self.resumed = self._try(lambda: client.resume(self.holder),
                                     f"resume {self.holder}")

    def _try(self, call, what: str, flag: str | None = None) -> bool:
        try:
            call()
        except Refused as exc:
            if "not fit" not in str(exc):
                self.notes.append(f"{what} refused: {exc}")
            return False
        self.notes.append(what)
        if flag:
            setattr(self, flag, True)
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
    p.add_argument("--jobs", type=int, default=5,
                   help=f"jobs to submit, 2..{MAX_JOBS} (default 5)")
    p.add_argument("--policy", default="fgs", help="scheduling policy (default fgs)")
    p.add_argument("--dir", type=Path, help="where state and logs go (default: a temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the state and logs afterwards")
    p.add_argument("--timeout", type=float, default=170.0,
                   help="give up after this many seconds (default 170)")
    p.add_argument("--plain", action="store_true", help="print changes instead of a live view")
    args = p.parse_args(argv)
    if not 2 <= args.jobs <= MAX_JOBS:
        p.error(f"--jobs must be between 2 and {MAX_JOBS}")
    console = Console()
    root = args.dir or Path(tempfile.mkdtemp(prefix="tfgshare-demo-"))
    # every job looks GPU-bound on a CPU: let up to three share a GPU anyway,
    # and allow moves right after a start, so the demo shows both in minutes
    cluster = LocalCluster(root, policy=args.policy, node_timeout=8.0, coordinator_flags=(
        ["--policy-param", "slowdown_cap=3.0", "--policy-param", "min_run_s=0"]
        if args.policy == "fgs" else []))
    ok, t0 = False, time.monotonic()
    try:
        console.print(f"[bold]tfgshare demo[/] in {root}")
        cluster.start_coordinator()
        cluster.start_agent(NODE, "2x16GiB", threads=1)
        cluster.wait_nodes({NODE})
        console.print(f"coordinator {cluster.address}, agent {NODE} with 2 virtual 16 GiB GPUs")
        with cluster.client(timeout_s=5.0) as client:
            ids = client.submit(demo_jobs(args.jobs))
            console.print(f"submitted {len(ids)} jobs: {', '.join(ids)}")
            ok = watch(client, ids, console, args, t0)
            report = client.metrics()
        console.print()
        console.print(report["report"])
        s = report.get("summary") or {}
        if s:
            console.print(f"\nGPU utilisation over the run: allocated "
                          f"{100 * s['util_allocated']:.1f}%, effective "
                          f"{100 * s['util_effective']:.1f}% of {report['gpus']} GPUs; "
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
        console.print(f"demo {'done' if ok else 'did not complete'} in {took:.0f}s; "
                      "all processes stopped")
    return 0 if ok else 1


def watch(client, ids: list[str], console: Console, args, t0: float) -> bool:
    """Show progress until every job is done, forcing the scripted moves; True if all finished."""
    jobs_by_id = {j["id"]: j for j in client.jobs()}
    models = {i: jobs_by_id[i]["model"] for i in ids}
    mover = next((i for i in ids if models[i] == "lenet"), ids[0])
    holder = next((i for i in ids if models[i] == "cifarnet" and i != mover), ids[-1])
    script = Script(mover, holder)
    live = None if args.plain or not console.is_terminal else Live(console=console,
                                                                   refresh_per_second=4)
    seen: dict[str, str] = {}
    noted = 0
    try:
        if live:
            live.start()
        while True:
            now = time.monotonic()
            jobs = [j for j in client.jobs() if j["id"] in models]
            by_id = {j["id"]: j for j in jobs}
            script.step(client, by_id, now)
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
            if all(j["state"] in ("finished", "failed", "cancelled") for j in jobs):
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
    if not (script.migrated and script.resumed):
        console.print("[yellow]the forced suspend/migration did not both happen[/]")
    return not failed and script.migrated and script.resumed
