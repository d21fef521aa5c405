"""Chaos: a live cluster on loopback under a seeded schedule of faults; every job must finish.

    python tools/chaos.py --seed 1 --jobs 6 --steps 300 --faults 10 --baseline

starts a coordinator and two agents (virtual GPUs, real TF-Slim lenet runners on
the CPU) as processes (each agent in its own network namespace where ``--netns``
allows, see ``cut_agent``), submits a batch of small jobs and, while they train,
injects faults drawn from ``--seed``:

- ``kill_runner``: SIGKILL one job's runner process;
- ``kill_agent``: SIGKILL an agent (its runners die with it), restart it 2 s later;
- ``kill_coordinator``: SIGKILL the coordinator, restart it 2 s later;
- ``cut_agent``: cut an agent's network until the coordinator has declared the node
  lost and a new attempt of the job has started on the other node (at least 1.5 node
  timeouts, at most ``--timeout``), then join it again. With ``--netns`` (default
  ``auto``: where the machine allows) each agent runs in its own network namespace
  (``tfgshare.netns``) and the cut sets its veth link down: the agent, hearing nothing,
  stops its runners at half the node timeout, and re-registers once the link is up.
  Without namespaces the cut is a stand-in: SIGSTOP the agent (the coordinator hears
  nothing, while its runners go on training and saving), then SIGCONT it: the stale
  runner is fenced off the new attempt's checkpoints, and the agent kills it. The report
  says which kind of cut was used;
- ``fill_disk``: fill the checkpoint file system (a tmpfs mounted for the run; skipped,
  with a message, where it cannot be mounted) for ``--disk-full-s``, then free it;
- ``stall_runner``: SIGSTOP one job's runner and its agent (a stalled node: the runner
  cannot be killed by it, nor does the node answer) until the coordinator has declared
  the node lost and the job's next attempt has started elsewhere; then SIGCONT the old
  runner alone (its agent still stopped, so nothing kills it): it trains on and, at its
  next save, must be refused by the checkpoint fence (exit 76) without touching the new
  attempt's checkpoints; then SIGCONT the agent. Not in the default schedule (``--kinds``
  names the kinds to draw from).

One fault at a time: the next is injected once the cluster is whole again and a
job is training. At the end every job must have finished with its full step
count, and every restart must have resumed from the job's newest checkpoint
saved before it (so the steps redone are at most those since that checkpoint).
The report lists each fault, what recovered it, the seconds until every affected
job trained again, the steps redone against that bound, and, with ``--baseline``, the
extra time against the same batch without faults. Exit status 0 when all holds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tfgshare import netns  # noqa: E402
from tfgshare.localcluster import LocalCluster  # noqa: E402
from tfgshare.schema import JobSpec  # noqa: E402

KINDS = ("kill_runner", "kill_agent", "kill_coordinator", "cut_agent", "fill_disk")
EXTRA_KINDS = ("stall_runner",)      # only when --kinds names them
STALL_FENCE_WAIT_S = 60.0            # the longest a resumed stale runner may take to its save
NODES = ("n1", "n2")
RESTART_AFTER_S = 2.0
# a job's log line that tells how a fault was recovered -> the words for the report
RECOVERIES = (("re-adopted on", "runner re-adopted after the restart"),
              ("re-registered without it", "node re-registered; job re-queued from its checkpoint"),
              (" lost (", "node declared lost; job re-queued from its checkpoint"),
              ("crashed (", "runner exit reported; job retried from its checkpoint"),
              ("exit 0, reported after", "runner finished while cut off; exit reported late"),
              ("checkpoint at step", "failed save skipped; training went on"))


@dataclass
class Fault:
    """One injected fault and what became of it."""

    kind: str
    target: str = ""
    at_s: float = 0.0                 # seconds after the batch was submitted
    jobs: list[str] = field(default_factory=list)
    attempts: dict[str, int] = field(default_factory=dict)   # job -> attempt when injected
    recovered_by: str = ""
    recovery_s: float | None = None   # until an affected job trained again
    note: str = ""
    fenced: bool | None = None        # stall_runner: the old runner was refused by the fence
    wall: float = 0.0                 # time.time() when injected
    back_wall: float = 0.0            # time.time() when the faulty part was back


@dataclass
class JobOutcome:
    """How one job ended, and the steps it redid."""

    id: str
    state: str
    steps_done: int
    attempts: int
    redone: int                # progress steps run more than once
    bound: int                 # steps since the newest checkpoint before each restart
    resumed_right: bool        # each restart resumed from that checkpoint


def lenet_job(steps: int, save_every: int, index: int) -> JobSpec:
    """A small lenet job that logs every step and checkpoints every ``save_every`` steps."""
    return JobSpec(model_name="lenet", name=f"chaos{index}", batch_size=4,
                   max_number_of_steps=steps, memory_fraction=0.9, optimizer="sgd",
                   extra=["--warmup_steps", "1", "--num_sample_steps", "3",
                          "--log_every_n_steps", "1", "--save_interval_secs", "0",
                          "--save_interval_steps", str(save_every), "--max_to_keep", "2"])


def plan(seed: int, count: int, disk: bool, kinds: tuple[str, ...] = KINDS) -> list[str]:
    """The kinds of ``count`` faults in order: every kind once (when count allows), then
    seeded draws, shuffled by ``seed``."""
    kinds = [k for k in kinds if disk or k != "fill_disk"]
    rng = random.Random(seed)
    chosen = kinds[:count] + [rng.choice(kinds) for _ in range(count - len(kinds))]
    rng.shuffle(chosen)
    return chosen


@contextlib.contextmanager
def checkpoint_fs(path: Path, size_mb: int):
    """A tmpfs of ``size_mb`` at ``path`` (yield True), or a plain folder (yield False)."""
    path.mkdir(parents=True, exist_ok=True)
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        print(f"chaos: cannot mount a tmpfs for the checkpoints ({made.stderr.strip()}); "
              "the fill_disk fault is skipped", flush=True)
        yield False
        return
    try:
        yield True
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


class Chaos:
    """One chaos run: the cluster, the jobs, the faults and their outcomes."""

    def __init__(self, root: Path, args: argparse.Namespace, disk: bool,
                 nets: dict[str, netns.Netns] | None = None, host: str = "127.0.0.1") -> None:
        self.args = args
        self.rng = random.Random(args.seed + 1)
        self.nets = nets or {}             # node -> its network namespace (none: loopback)
        self.cluster = LocalCluster(root, host=host, node_timeout=args.node_timeout,
                                    coordinator_flags=["--max-retries", str(args.max_retries)])
        kinds = tuple(args.kinds.split(",")) if getattr(args, "kinds", None) else KINDS
        self.kinds = plan(args.seed, args.faults, disk, kinds) if args.faults else []
        self.faults: list[Fault] = []
        self.later: list[tuple[float, str, object]] = []   # (when, what, arg): restarts
        self.start = 0.0
        self.ids: list[str] = []
        self.gpus = f"{args.gpus_per_agent}x16GiB"

    # ---- the run ------------------------------------------------------------

    def run(self) -> float:
        """Start the cluster, run the batch through the faults; the batch's seconds."""
        c = self.cluster
        c.start_coordinator(timeout_s=120)
        for node in NODES:
            self._start_agent(node)
        c.wait_nodes(set(NODES), timeout_s=120)
        with c.client(timeout_s=10) as client:
            self.ids = client.submit([lenet_job(self.args.steps, self.args.save_every, i)
                                      for i in range(self.args.jobs)])
        self.start = time.monotonic()
        deadline = self.start + self.args.timeout
        quiet_until = self.start + self.args.first_fault_s
        while True:
            now = time.monotonic()
            if now > deadline:
                raise TimeoutError(f"the batch did not finish within {self.args.timeout:g}s; "
                                   f"see {c.root / 'logs'}")
            self._due_restarts(now)
            jobs = self._jobs()
            if jobs is not None and all(j["state"] in ("finished", "failed", "cancelled")
                                        for j in jobs):
                return now - self.start
            if (jobs is not None and not self.later and now >= quiet_until
                    and len(self.faults) < len(self.kinds) and self._whole()):
                training = [j for j in jobs if j["state"] == "running" and self._training(j)]
                if training:
                    self._inject(self.kinds[len(self.faults)], training)
                    quiet_until = time.monotonic() + self.args.gap_s
            time.sleep(0.3)

    def _start_agent(self, node: str) -> None:
        net = self.nets.get(node)
        self.cluster.start_agent(node, self.gpus, prefix=net.prefix if net else None)

    def _training(self, job: dict, steps: int = 3) -> bool:
        """Whether ``job``'s current runner has trained ``steps`` steps past its start."""
        path = (self.cluster.root / "agents" / str(job["node"]) / job["id"]
                / f"attempt-{job['attempt']}.events.jsonl")
        events = read_events(path)
        start = next((e["global_step"] for e in events if e["event"] == "started"), None)
        return start is not None and any(e["event"] == "progress" and e["step"] >= start + steps
                                         for e in events)

    def _jobs(self) -> list[dict] | None:
        try:
            with self.cluster.client(timeout_s=3) as client:
                return [j for j in client.jobs() if j["id"] in self.ids]
        except Exception:      # the coordinator is down or busy: try again
            return None

    def _whole(self) -> bool:
        try:
            with self.cluster.client(timeout_s=3) as client:
                return {n["name"] for n in client.nodes() if n["state"] == "up"} >= set(NODES)
        except Exception:
            return False

    def _due_restarts(self, now: float) -> None:
        for item in [x for x in self.later if x[0] <= now]:
            _, what, arg = item
            if what in ("sigcont", "link_up", "wake_runner") and not self._moved(*arg[-2:]) and \
                    now < self.start + self.args.timeout / 2:
                continue                   # the cut lasts until the job runs elsewhere
            if what == "wake_agent" and not self._stale_done(*arg) and now < item[0] + \
                    STALL_FENCE_WAIT_S:
                continue                   # the old runner goes on alone until it has exited
            self.later.remove(item)
            if what == "agent":
                self._start_agent(arg)
            elif what == "coordinator":
                self.cluster.start_coordinator(timeout_s=120)
            elif what == "sigcont":
                os.kill(arg[0], signal.SIGCONT)
            elif what == "link_up":
                self.nets[arg[0]].restore()
            elif what == "free":
                arg.unlink(missing_ok=True)
            elif what == "wake_runner":    # the old runner alone: its agent stays stopped
                runner, agent = arg[:2]
                with contextlib.suppress(ProcessLookupError):
                    os.kill(runner, signal.SIGCONT)
                self.later.append((now, "wake_agent", (runner, agent, *arg[2:])))
            elif what == "wake_agent":
                os.kill(arg[1], signal.SIGCONT)
                self.faults[-1].fenced = self._fenced_log(*arg[2:])
            self.faults[-1].back_wall = time.time()

    def _stale_done(self, runner: int, agent: int, job: str, attempt: int) -> bool:
        """Whether the old runner of a stall has exited (fenced, or finished)."""
        if self._fenced_log(job, attempt):
            return True
        try:
            return psutil.Process(runner).status() == psutil.STATUS_ZOMBIE
        except psutil.Error:
            return True

    def _fenced_log(self, job: str, attempt: int) -> bool:
        """Whether attempt ``attempt`` of ``job`` says it was fenced off."""
        return any("is fenced off" in p.read_text(errors="replace") for p in
                   (self.cluster.root / "agents").glob(f"*/{job}/attempt-{attempt}.log"))

    def _moved(self, job: str, attempt: int) -> bool:
        """Whether a later attempt than ``attempt`` of ``job`` has started."""
        return any(n > attempt and any(e["event"] == "started" for e in events)
                   for n, events in self.numbered(job).items())

    # ---- faults -------------------------------------------------------------

    def _inject(self, kind: str, training: list[dict]) -> None:
        job = self.rng.choice(sorted(training, key=lambda j: j["id"]))
        node = job["node"]
        fault = Fault(kind, at_s=round(time.monotonic() - self.start, 1))
        now = time.monotonic()
        agent = self.cluster.procs[f"agent-{node}"]
        if kind == "kill_runner":
            pid = runner_pid(agent.pid, self.cluster.log(f"agent-{node}"), job["id"],
                             job["attempt"])
            if pid is None:
                fault.note = "no runner process found; nothing killed"
            else:
                os.kill(pid, signal.SIGKILL)
            fault.target, fault.jobs = f"runner of {job['id']} on {node}", [job["id"]]
        elif kind == "kill_agent":
            self.cluster.kill(f"agent-{node}")
            self.later.append((now + RESTART_AFTER_S, "agent", node))
            fault.target, fault.jobs = f"agent {node}", self._on(node, training)
        elif kind == "kill_coordinator":
            self.cluster.kill("coordinator")
            self.later.append((now + RESTART_AFTER_S, "coordinator", None))
            fault.target, fault.jobs = "coordinator", [j["id"] for j in training]
        elif kind == "cut_agent":
            if node in self.nets:          # a real cut: the agent's veth link down
                self.nets[node].cut()
                self.later.append((now + 1.5 * self.args.node_timeout, "link_up",
                                   (node, job["id"], job["attempt"])))
                fault.note = "network cut: veth link down"
            else:                          # the stand-in: the agent stopped
                os.kill(agent.pid, signal.SIGSTOP)
                self.later.append((now + 1.5 * self.args.node_timeout, "sigcont",
                                   (agent.pid, job["id"], job["attempt"])))
                fault.note = "SIGSTOP stand-in for a network cut"
            fault.target, fault.jobs = f"agent {node}", self._on(node, training)
        elif kind == "stall_runner":
            pid = runner_pid(agent.pid, self.cluster.log(f"agent-{node}"), job["id"],
                             job["attempt"])
            fault.target, fault.jobs = f"runner of {job['id']} and agent {node}", [job["id"]]
            if pid is None:
                fault.note = "no runner process found; nothing stalled"
            else:
                os.kill(pid, signal.SIGSTOP)
                os.kill(agent.pid, signal.SIGSTOP)
                self.later.append((now + 1.5 * self.args.node_timeout, "wake_runner",
                                   (pid, agent.pid, job["id"], job["attempt"])))
        elif kind == "fill_disk":
            filler = self.cluster.checkpoints / "filler"
            fill(filler)
            self.later.append((now + self.args.disk_full_s, "free", filler))
            fault.target = f"checkpoint fs for {self.args.disk_full_s:g}s"
            fault.jobs = [j["id"] for j in training]
        fault.wall = time.time()
        fault.attempts = {j["id"]: j["attempt"] for j in training if j["id"] in fault.jobs}
        self.faults.append(fault)
        print(f"chaos: t={fault.at_s:6.1f}s {kind:17s} {fault.target}", flush=True)

    @staticmethod
    def _on(node: str, training: list[dict]) -> list[str]:
        return [j["id"] for j in training if j["node"] == node]

    # ---- the outcome ----------------------------------------------------------

    def outcomes(self) -> list[JobOutcome]:
        """Each job's end and its steps redone, from the coordinator and the runners' events."""
        with self.cluster.client(timeout_s=10) as client:
            jobs = {j["id"]: j for j in client.jobs() if j["id"] in self.ids}
            self.logs = {j: client.logs(j) for j in self.ids}
        out = []
        for jid in self.ids:
            runs = self.attempts(jid)
            redone = bound = 0
            right = True
            for i in range(1, len(runs)):
                started = next((e for e in runs[i] if e["event"] == "started"), None)
                if started is None:
                    continue
                before = [e for r in runs[:i] for e in r if e["time"] <= started["time"]]
                ran = max((e["step"] for e in before if e["event"] == "progress"), default=0)
                saved = max((e["step"] for e in before if e["event"] == "checkpoint"), default=0)
                redone += max(0, ran - started["global_step"])
                bound += max(0, ran - saved)
                right &= started["global_step"] >= saved
            info = jobs[jid]
            out.append(JobOutcome(jid, info["state"], info["steps_done"], info["attempt"],
                                  redone, bound, right))
        return out

    def attempts(self, job: str) -> list[list[dict]]:
        """The events of every attempt of ``job`` on any agent, by attempt number."""
        found = []
        for path in (self.cluster.root / "agents").glob(f"*/{job}/attempt-*.events.jsonl"):
            n = int(re.search(r"attempt-(\d+)", path.name).group(1))
            found.append((n, read_events(path)))
        return [events for _, events in sorted(found)]

    def numbered(self, job: str) -> dict[int, list[dict]]:
        """attempt number -> its events, for ``job``."""
        return {int(re.search(r"attempt-(\d+)", p.name).group(1)): read_events(p)
                for p in (self.cluster.root / "agents").glob(f"*/{job}/attempt-*.events.jsonl")}

    def fenced(self) -> int:
        """Runner attempts that stopped because a newer attempt had taken their checkpoints."""
        return sum("is fenced off" in p.read_text(errors="replace")
                   for p in (self.cluster.root / "agents").glob("*/*/attempt-*.log"))

    def explain(self) -> None:
        """Fill in each fault's recovery from the job logs and the runners' events."""
        for i, fault in enumerate(self.faults):
            end = self.faults[i + 1].wall if i + 1 < len(self.faults) else float("inf")
            lines = [(when, line) for j in fault.jobs for when, line in
                     timed(self.logs.get(j, []), fault.wall) if fault.wall <= when < end]
            lines.sort()
            found = next((words for _, line in lines for key, words in RECOVERIES
                          if key in line), None)
            if fault.kind == "fill_disk" and found is None:
                warned = [e for j in fault.jobs for r in self.attempts(j) for e in r
                          if e["event"] == "warning" and "failed" in e.get("message", "")
                          and fault.wall <= e["time"] < end]
                found = (f"{len(warned)} failed save(s) skipped, training went on; "
                         "the next save after the disk was freed succeeded" if warned
                         else "no save fell in the full period")
            fault.recovered_by = found or "nothing needed (no job noticed)"
            stale = [log for j, n in fault.attempts.items() for log in
                     (self.cluster.root / "agents").glob(f"*/{j}/attempt-{n}.log")]
            if any("is fenced off" in p.read_text(errors="replace") for p in stale):
                fault.recovered_by += "; the stale runner's save was fenced off (exit 76)"
            # training again: progress after the fault; after a runner died (or was cut
            # off), progress of a later attempt
            later = fault.kind in ("kill_runner", "kill_agent", "cut_agent", "stall_runner")
            since = fault.back_wall if fault.kind == "kill_coordinator" else fault.wall
            if fault.kind == "stall_runner" and fault.fenced is False:
                fault.recovered_by += "; the stale runner was NOT seen refused by the fence"
            if fault.kind == "cut_agent" and fault.back_wall:
                fault.target += f" for {fault.back_wall - fault.wall:.1f}s"
            back = []
            for j in fault.jobs:
                first = fault.attempts.get(j, 0) + (1 if later else 0)
                times = [e["time"] for n, events in self.numbered(j).items() if n >= first
                         for e in events if e["event"] in ("progress", "started")
                         and e["time"] > since]
                back.append(min(times) if times else None)
            if back and None not in back:
                fault.recovery_s = round(max(back) - fault.wall, 1)


def read_events(path: Path) -> list[dict]:
    """The JSON events of one runner's events file (a torn last line is skipped)."""
    events = []
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                events.append(json.loads(line))
    return events


def timed(lines: list[str], near: float) -> list[tuple[float, str]]:
    """Job log lines with their wall time (they carry only HH:MM:SS.mmm, on ``near``'s day)."""
    day = datetime.fromtimestamp(near).replace(hour=0, minute=0, second=0, microsecond=0)
    out = []
    for line in lines:
        found = re.match(r"(\d\d):(\d\d):(\d\d)\.(\d\d\d) ", line)
        if found:
            h, m, s, ms = map(int, found.groups())
            out.append((day.timestamp() + h * 3600 + m * 60 + s + ms / 1000, line))
    return out


def runner_pid(agent_pid: int, agent_log: Path, job: str, attempt: int) -> int | None:
    """The pid of ``job``'s runner (this attempt), a live child of the agent ``agent_pid``.

    Read from the agent's log: a warm spare runner that took the job has no job flags
    in its command line.
    """
    found = re.findall(rf"started {job} attempt {attempt} on GPU\(s\) \S+ \(pid (\d+)\)",
                       agent_log.read_text(errors="replace"))
    try:
        children = {p.pid for p in psutil.Process(agent_pid).children(recursive=True)}
    except psutil.Error:
        return None
    return int(found[-1]) if found and int(found[-1]) in children else None


def fill(path: Path) -> None:
    """Write ``path`` until its file system is full."""
    block = b"\0" * 2**20
    with open(path, "wb") as out:
        try:
            while True:
                out.write(block)
                out.flush()
        except OSError:
            pass


def agent_networks(mode: str, stack: contextlib.ExitStack) -> tuple[dict, str, str]:
    """Per ``--netns`` (auto, on, off): each node's namespace (none: all on loopback), the
    coordinator's address, and the words for the report."""
    if mode == "off":
        return {}, "127.0.0.1", "none (--netns off): agents on loopback"
    why = netns.unavailable()
    if why is None:
        try:
            with contextlib.ExitStack() as made:
                host = made.enter_context(netns.host_address())
                nets = {node: made.enter_context(netns.namespace(i))
                        for i, node in enumerate(NODES)}
                stack.push(made.pop_all())
            return nets, host, f"one per agent, coordinator at {host}"
        except netns.NetnsUnavailable as e:    # a namespace, but no veth pair (say)
            why = str(e)
    if mode == "on":
        raise SystemExit(f"chaos: --netns on, but {why}")
    print(f"chaos: agents on loopback, no network namespaces ({why})", flush=True)
    return {}, "127.0.0.1", f"none ({why}): agents on loopback"


def run_batch(root: Path, args: argparse.Namespace, faults: bool) -> dict:
    """One batch (with the seeded faults, or none): its seconds, faults and job outcomes."""
    size = max(256, args.jobs * 3 * 16 + 64)
    with checkpoint_fs(root / "checkpoints", size) as disk, contextlib.ExitStack() as stack:
        nets, host, net_words = agent_networks(getattr(args, "netns", "auto"), stack)
        run_args = argparse.Namespace(**{**vars(args), "faults": args.faults if faults else 0})
        chaos = Chaos(root, run_args, disk, nets, host)
        try:
            seconds = chaos.run()
            jobs = chaos.outcomes()
            chaos.explain()
        finally:
            chaos.cluster.stop_all(timeout_s=10)
    return {"seconds": round(seconds, 1), "disk": disk, "planned": chaos.kinds,
            "netns": net_words,
            "faults": chaos.faults, "jobs": jobs, "fenced": chaos.fenced(),
            "logs": getattr(chaos, "logs", {})}


def check(result: dict, steps: int) -> list[str]:
    """What went wrong: jobs not finished with ``steps`` (with the tail of their log), or
    restarts that did not resume from the newest checkpoint."""
    problems = []
    for job in result["jobs"]:
        if job.state != "finished" or job.steps_done != steps:
            tail = result.get("logs", {}).get(job.id, [])[-8:]
            problems.append(f"{job.id} ended {job.state} at step {job.steps_done}, not "
                            f"finished at {steps}; its log ends:\n  " + "\n  ".join(tail))
        if not job.resumed_right or job.redone > job.bound:
            problems.append(f"{job.id} redid {job.redone} steps, more than the {job.bound} "
                            "since its checkpoints")
    for f in result["faults"]:
        if f.kind == "stall_runner" and not f.note and not f.fenced:
            problems.append(f"stall_runner at {f.at_s}s: the old runner of {f.target} was not "
                            "seen refused by the checkpoint fence")
    return problems


def report(result: dict, baseline: float | None, steps: int) -> str:
    """The run as Markdown: faults, recoveries, jobs, steps redone, extra time."""
    lines = ["| t (s) | fault | target | recovered by | all trained again after (s) |",
             "|---|---|---|---|---|"]
    for f in result["faults"]:
        back = "-" if f.recovery_s is None else f"{f.recovery_s:.1f}"
        lines.append(f"| {f.at_s:.1f} | {f.kind} | {f.target} | {f.recovered_by}"
                     f"{' (' + f.note + ')' if f.note else ''} | {back} |")
    kinds = {}
    for f in result["faults"]:
        kinds[f.kind] = kinds.get(f.kind, 0) + 1
    jobs = result["jobs"]
    done = sum(j.state == "finished" and j.steps_done == steps for j in jobs)
    lines += ["", f"faults by kind: {', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))}",
              f"jobs finished with all {steps} steps: {done} of {len(jobs)}",
              f"steps redone: {sum(j.redone for j in jobs)} (bound: "
              f"{sum(j.bound for j in jobs)} = steps since the newest checkpoint before each "
              f"restart; every restart resumed from it: "
              f"{all(j.resumed_right for j in jobs)})",
              f"attempts: {sum(j.attempts for j in jobs)} for {len(jobs)} jobs; stale runners "
              f"fenced off a newer attempt's checkpoints: {result['fenced']}",
              f"network namespaces: {result.get('netns', 'none')}",
              f"batch time: {result['seconds']:.1f} s"]
    stalls = [f for f in result["faults"] if f.kind == "stall_runner" and not f.note]
    if stalls:
        lines.insert(-1, f"stalled runners resumed after their job moved and refused by the "
                         f"checkpoint fence: {sum(bool(f.fenced) for f in stalls)} of "
                         f"{len(stalls)}")
    if len(result["faults"]) < len(result["planned"]):
        lines.append(f"the batch finished after {len(result['faults'])} of the "
                     f"{len(result['planned'])} planned faults")
    if not result["disk"]:
        lines.append("fill_disk skipped: no tmpfs could be mounted for the checkpoints")
    if baseline is not None:
        lines.append(f"without faults: {baseline:.1f} s; extra time "
                     f"{result['seconds'] - baseline:+.1f} s")
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    """The chaos tool's flags."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--jobs", type=int, default=6)
    p.add_argument("--steps", type=int, default=300, help="steps per job")
    p.add_argument("--save-every", type=int, default=40, help="checkpoint every N steps")
    p.add_argument("--faults", type=int, default=10, help="faults to inject, one at a time")
    p.add_argument("--gpus-per-agent", type=int, default=2,
                   help="virtual GPUs per agent (2 agents; each job takes one GPU)")
    p.add_argument("--node-timeout", type=float, default=6.0)
    p.add_argument("--max-retries", type=int, default=3)
    p.add_argument("--first-fault-s", type=float, default=5.0,
                   help="seconds after submit before the first fault")
    p.add_argument("--gap-s", type=float, default=8.0, help="least seconds between faults")
    p.add_argument("--disk-full-s", type=float, default=15.0)
    p.add_argument("--kinds", default="",
                   help=f"comma-separated fault kinds to draw from (default {','.join(KINDS)}; "
                        f"also {','.join(EXTRA_KINDS)})")
    p.add_argument("--netns", choices=("auto", "on", "off"), default="auto",
                   help="run each agent in its own network namespace, so that cut_agent "
                        "cuts its link (auto: where the machine allows; off: SIGSTOP stand-in)")
    p.add_argument("--timeout", type=float, default=1800.0, help="give up after (s)")
    p.add_argument("--baseline", action="store_true",
                   help="also run the batch without faults, for the extra time")
    p.add_argument("--root", type=Path, help="keep the cluster's files here")
    p.add_argument("--json", type=Path, help="write the result here")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the chaos batch (and the baseline); print the report; 0 when every check holds."""
    p = parser()
    args = p.parse_args(argv)
    unknown = set(filter(None, args.kinds.split(","))) - set(KINDS + EXTRA_KINDS)
    if unknown:
        p.error(f"unknown fault kind(s) {', '.join(sorted(unknown))}; "
                f"known: {', '.join(KINDS + EXTRA_KINDS)}")
    root = args.root or Path(tempfile.mkdtemp(prefix="tfgshare-chaos-"))
    baseline = None
    if args.baseline:
        baseline = run_batch(root / "baseline", args, faults=False)["seconds"]
        print(f"chaos: baseline batch without faults took {baseline:.1f}s", flush=True)
    result = run_batch(root / "chaos", args, faults=True)
    print(report(result, baseline, args.steps))
    problems = check(result, args.steps)
    for problem in problems:
        print(f"chaos: FAILED: {problem}")
    if args.json:
        args.json.write_text(json.dumps(
            {"args": {k: str(v) for k, v in vars(args).items()}, "baseline_s": baseline,
             "seconds": result["seconds"], "problems": problems, "fenced": result["fenced"],
             "netns": result["netns"],
             "faults": [asdict(f) for f in result["faults"]],
             "jobs": [asdict(j) for j in result["jobs"]]}, indent=1))
    print(f"chaos: cluster files in {root}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
