"""``tfgshare demo``: a local cluster trains small TF-Slim jobs; the policy moves one.

It starts a coordinator and one agent with two virtual GPUs on loopback (jobs
train on the CPU), submits two long jobs (lenet, cifarnet) that take both
GPUs, then a short lenet job that has to wait. fgs runs with its default
parameters and every job with ``--memory_fraction auto`` (its fragment sized
from its sample). Nothing but fgs moves a job: once the short job has waited
past its bound, fgs promotes it and suspends (or migrates) a long job that has
run its minimum run (its measured move cost over ``move_share``); the long job
resumes from its checkpoint when a GPU frees. The demo ends with the per-job
table (predicted and actual run times, prediction error), the utilisation
figures, the policy actions the coordinator refused (none expected) and the
moves the policy made. Every process it started is stopped at the end, on
Ctrl-C and on error.
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

from tfgshare.client.api import ClientError
from tfgshare.localcluster import LocalCluster
from tfgshare.metrics import format_duration
from tfgshare.schema import JobSpec

NODE = "node1"
# model, image size, batch, steps: small enough for a 2-core CPU. Two long jobs take
# the two virtual GPUs (each one CPU core: a job that keeps its core busy leaves no
# room beside it); a short job comes once both run and must wait behind them. The long
# jobs must outlast the short one's promotion: it waits its promote floor (10 moves'
# measured cost, about 37 s) after sampling. On the 2-core build VM of 2026-12-05 a step
# of either long job takes 0.055-0.068 s on its core (0.021 s on the VM of 2026-12-02):
# the short job is promoted about 73 s into the demo, the long jobs ran about 120 s at
# 1,800 steps. On 2026-12-06 they finished 65-78 s in, before the promotion (no move in
# 1 test run of 5, 2 more failed there unread): 3,000 steps, 3-4 minutes on the 12-05 VM.
LONG = [
    ("lenet", None, 8, 3000),
    ("cifarnet", None, 8, 3000),
]
SHORT = ("lenet", None, 8, 150)
SHORT_AFTER_S = 10.0   # submitted this long after both long jobs run
RUNNER_FLAGS = ["--log_every_n_steps", "5", "--save_interval_secs", "0"]
# the narration: what the short job's state means, and a long job's move
SHORT_NOTES = {
    "sampling": "is sampled: a few steps beside a long job measure its speed and memory",
    "sampled": "is sampled and waits: no GPU has room until {policy} makes some",
    "queued": "waits in the queue: no GPU has room",
    "running": "runs now",
    "finished": "finished",
}
LONG_NOTES = {
    "suspending": "is suspended by {policy} to make room: it saves a checkpoint",
    "migrating": "is moved by {policy} to make room",
    "suspended": "waits, suspended; it resumes from its checkpoint when a GPU frees",
}


def spec(row: tuple, name: str) -> JobSpec:
    """A job of the catalogue as a JobSpec, its fragment sized from its sample."""
    model, size, batch, steps = row
    return JobSpec(model_name=model, name=name, batch_size=batch, max_number_of_steps=steps,
                   image_size=size, memory_fraction="auto", extra=list(RUNNER_FLAGS))


def demo_jobs() -> tuple[list[JobSpec], JobSpec]:
    """The demo's long jobs (submitted first) and the short job submitted later."""
    first = [spec(row, f"demo-{i}-{row[0]}-long") for i, row in enumerate(LONG, 1)]
    return first, spec(SHORT, f"demo-{len(LONG) + 1}-{SHORT[0]}-short")


@dataclass
class Script:
    """What the demo does by itself: it only submits. Every move is the policy's.

    The short job is submitted once every long job has run for ``SHORT_AFTER_S``;
    it then waits behind them until fgs promotes it (its wait passes its bound)
    and makes room by suspending or migrating a long job that has run its
    minimum run (its measured move cost over fgs's ``move_share``).
    """

    short: JobSpec
    long_ids: list[str]
    short_id: str | None = None
    policy: str = "fgs"
    notes: list[str] = field(default_factory=list)
    _running_since: dict[str, float] = field(default_factory=dict)
    _states: dict[str, str] = field(default_factory=dict)

    def step(self, client, jobs: dict[str, dict], now: float) -> list[str]:
        """Submit the short job when due; narrate what the jobs do; return the ids it
        submitted."""
        for jid in self.long_ids:
            j = jobs.get(jid)
            if j is not None and j["state"] == "running":
                self._running_since.setdefault(jid, now)
        self.narrate(jobs)
        if self.short_id is None and all(
                now - self._running_since.get(jid, now) >= SHORT_AFTER_S
                for jid in self.long_ids) and len(self._running_since) == len(self.long_ids):
            (self.short_id,) = client.submit([self.short])
            self.notes.append(f"submit {self.short_id}: a short {self.short.model_name} job, "
                              "while the long jobs hold both GPUs")
            return [self.short_id]
        return []

    def narrate(self, jobs: dict[str, dict]) -> None:
        """A note for each change of the short job's state, and for each long job the
        policy moves: what happens, in words."""
        for jid, j in jobs.items():
            state = j["state"]
            before = self._states.get(jid)
            if before == state:
                continue
            self._states[jid] = state
            if jid == self.short_id:
                note = SHORT_NOTES.get(state)
            elif state == "running" and before in ("suspended", "suspending"):
                note = "resumes from its checkpoint"
            elif state == "running" and before == "migrating":
                note = "runs on its new GPU, from its checkpoint"
            else:
                note = LONG_NOTES.get(state)
            if note:
                self.notes.append(f"{jid} {note.format(policy=self.policy)}")


def policy_moves(client, ids) -> list[str]:
    """The suspends and migrations the policy made, from the jobs' logs."""
    moves = []
    for jid in ids:
        for line in client.logs(jid):
            if "suspend" in line and "(policy" in line:
                moves.append(f"{jid}: {line}")
    return moves


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
                   format_duration(left) if isinstance(left, (int, float))
                   and j["state"] == "running" else "")
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
    """Run the demo; 0 when every job finished and the policy moved at least one job."""
    p = argparse.ArgumentParser(prog="tfgshare demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--policy", default="fgs", help="scheduling policy (default fgs)")
    p.add_argument("--dir", type=Path, help="where state and logs go (default: a temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the state and logs afterwards")
    p.add_argument("--timeout", type=float, default=1800.0,
                   help="give up after this many seconds (default 1800)")
    p.add_argument("--plain", action="store_true", help="print changes instead of a live view")
    args = p.parse_args(argv)
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
            first, short = demo_jobs()
            ids = client.submit(first)
            console.print(f"submitted {len(ids)} long jobs: {', '.join(ids)}")
            script = Script(short, list(ids), policy=args.policy)
            finished = watch(client, ids, script, console, args, t0)
            moves = policy_moves(client, [*ids, *([script.short_id] if script.short_id else [])])
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
        console.print(f"\nmoves made by the policy (no user moves in this demo): {len(moves)}")
        for m in moves:
            console.print(f"  {m}", highlight=False)
        if not moves:
            console.print("[yellow]the policy made no move: the short job was never "
                          "promoted before a long job finished[/]")
        ok = finished and bool(moves)
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
    """Show progress until every job is done, submitting the short job when due.

    True if every job finished.
    """
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
            if done and script.short_id in by_id:
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
    return not failed
