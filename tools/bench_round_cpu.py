"""Coordinator round CPU at 10,000 queued / 1,000 GPUs, in one process, by part.

``bench_coordinator.py`` measures rounds in a live coordinator process, whose
wall times follow the machine's load, and whose rounds grow with their own
length (a longer round carries out more finishes' worth of starts). This bench
drives a ``Coordinator`` object directly with the same load and no sockets, on
simulated time, so that every round carries the same events: 125 simulated
agents with 8 virtual 16 GiB GPUs each, 10,000 jobs queued (100 a message),
the GPUs filled (sampling runs exit at once with a sampling record), then rounds
``--gap`` simulated seconds apart, each after that gap's events: 50 finishes/s
and a heartbeat from every node once a second (the bench's steady phase). The
round runs in this thread (plan, ``policy.decide``, carry out) and each part's
CPU time is measured, with the garbage collector's, and the interpreter tuned
as ``tfgshare coordinator`` tunes it (``--default-gc``: Python's defaults).
The turn's commit after each round is timed by the wall clock too: CPU time
does not show a wait for the disk.

``--nodes 1250 --jobs 100000`` gives issue 32's ten-thousand-GPU setting (the
finishes and heartbeats scale with the nodes). Each running job also reports its
progress every ``--progress-every-s`` (10 s: the agents' pacing in those runs; 0: none),
as a runner's progress event with its fields. ``--replace`` makes the rounds a soak:
each finished job is replaced by a new submit (as ``--soak-s`` live), and the
process's resident memory is read every 500 rounds.

Usage: python tools/bench_round_cpu.py [--rounds 150] [--policy fgs] [--profile PATH]
       [--nodes 125] [--jobs 10000]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tfgshare import schema as s  # noqa: E402
from tfgshare.coordinator.config import CoordinatorConfig  # noqa: E402
from tfgshare.coordinator.server import Coordinator, tune_interpreter  # noqa: E402

GPUS_PER_NODE = 8
FINISH_PER_S_PER_NODE = 0.4     # 50 finishes/s on 125 nodes; every node heartbeats each second
SPEC = s.JobSpec("inception_v3", max_number_of_steps=1000)   # every job submitted


def resident_mib() -> float:
    """This process's resident memory, MiB."""
    return round(psutil.Process().memory_info().rss / 2**20, 1)


class Clock:
    """Simulated time for the coordinator."""

    def __init__(self) -> None:
        self.t = 1.7e9

    def __call__(self) -> float:
        return self.t


def sample_event(job: str, now: float) -> dict:
    """A sampling record with the real runner's fields, as ``bench_coordinator`` sends."""
    return {"event": "sample", "time": now, "warmup_steps": 5, "sampled_steps": 20,
            "step_time_mean_s": 0.2, "step_time_std_s": 0.01, "images_per_sec": 160.0,
            "peak_memory_mb": 3000.0 + 100 * (hash(job) % 40),
            "memory_source": "gpu_allocator_peak", "predicted_remaining_s": 200.0,
            "predicted_total_s": 205.0, "window_start": now - 4.0, "cpu_util": 0.3}


def progress_event(step: int, now: float, step_s: float = 0.2, total: int = 1000) -> dict:
    """A runner's progress report with its fields, as ``agent_load`` sends it."""
    return {"event": "progress", "time": now, "step": step, "loss": 2.0, "step_time_s": step_s,
            "images_per_sec": 32 / step_s,
            "predicted_remaining_s": max(0, total - step) * step_s}


class Agents:
    """The simulated agents: they read the coordinator's commands and answer as
    ``bench_coordinator.SimAgents`` do (acks, instant sampling runs, a start's
    ``started`` event, exits)."""

    def __init__(self, coord: Coordinator, clock: Clock, nodes: int) -> None:
        self.coord, self.clock = coord, clock
        self.running: dict[str, tuple[str, int]] = {}   # job -> (node, attempt)
        self.inbox: list[tuple[str, s.Message]] = []    # what they send next
        self.nodes = [f"node{n:04d}" for n in range(nodes)]
        self.names = set(self.nodes)

    def send(self, node: str, msg: s.Message) -> None:
        self.coord.handle([node.encode()], s.encode(msg))

    def react(self) -> None:
        """Commit the coordinator's turn and read its commands."""
        self.coord.step()
        out = list(self.coord._out)
        self.coord._out.clear()
        for envelope, msg in out:
            node = envelope[0].decode() if envelope else ""
            if node not in self.names or isinstance(msg, (s.Ok, s.Error)):
                continue
            self.inbox.append((node, s.reply_ok(msg)))
            if isinstance(msg, s.StartJob) and msg.sample_only:
                now = self.clock()
                self.inbox.append((node, s.JobEvent(node=node, job=msg.job, attempt=msg.attempt,
                                                    event=sample_event(msg.job, now))))
                self.inbox.append((node, s.JobExit(node=node, job=msg.job, attempt=msg.attempt,
                                                   exit_code=75)))
            elif isinstance(msg, s.StartJob):
                self.running[msg.job] = (node, msg.attempt)
                self.inbox.append((node, s.JobEvent(node=node, job=msg.job, attempt=msg.attempt,
                                                    event={"event": "started",
                                                           "time": self.clock(),
                                                           "global_step": 0,
                                                           "restored": False})))
            elif isinstance(msg, (s.SuspendJob, s.CancelJob)):
                self.running.pop(msg.job, None)
                code = 75 if isinstance(msg, s.SuspendJob) else -9
                self.inbox.append((node, s.JobExit(node=node, job=msg.job, attempt=msg.attempt,
                                                   exit_code=code)))

    def register(self) -> None:
        for n in self.nodes:
            self.send(n, s.Register(node=n, gpus=[s.GpuInfo(i, "virtual", 16384, True)
                                                  for i in range(GPUS_PER_NODE)]))
        self.react()

    def deliver(self) -> None:
        """Send what the agents have to say, and their answers to the commands that brings."""
        while self.inbox:
            batch, self.inbox = self.inbox, []
            for node, msg in batch:
                self.send(node, msg)
            self.react()


def percentiles(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {"p50_ms": round(1000 * xs[len(xs) // 2], 2),
            "p99_ms": round(1000 * xs[min(len(xs) - 1, int(0.99 * len(xs)))], 2),
            "mean_ms": round(1000 * sum(xs) / len(xs), 2)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=150)
    p.add_argument("--gap", type=float, default=0.06,
                   help="simulated seconds between rounds (a round's own length)")
    p.add_argument("--policy", default="fgs")
    p.add_argument("--default-gc", action="store_true",
                   help="keep Python's garbage collection thresholds")
    p.add_argument("--profile", metavar="PATH",
                   help="write a CPU-time cProfile of the measured rounds here")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--nodes", type=int, default=125, help="simulated agents, 8 GPUs each")
    p.add_argument("--jobs", type=int, default=10_000, help="jobs queued before the rounds")
    p.add_argument("--progress-every-s", type=float, default=10.0,
                   help="each running job's progress report period (0: none)")
    p.add_argument("--warmup", type=int, default=5,
                   help="rounds run after the fill and before the measured ones")
    p.add_argument("--replace", action="store_true",
                   help="replace each finished job by a new submit; report memory as it goes")
    args = p.parse_args(argv)
    if not args.default_gc:
        tune_interpreter()
    clock = Clock()
    with tempfile.TemporaryDirectory() as tmp:
        coord = Coordinator(CoordinatorConfig(state=Path(tmp) / "state.db", policy=args.policy,
                                              node_timeout=600), clock=clock)
        agents = Agents(coord, clock, args.nodes)
        agents.register()
        for _ in range(args.jobs // 100):
            coord.handle([b"client"], s.encode(s.Submit(jobs=[SPEC] * 100)))
            coord.step()
            coord._out.clear()
        fill = time.thread_time()
        for i in range(400):                  # fill the GPUs: sample and start
            clock.t += 0.05
            if i % 20 == 0:
                coord.tick(clock.t)
            coord.schedule(clock.t)
            agents.react()
            agents.deliver()
            if len(agents.running) >= args.nodes * GPUS_PER_NODE * 3 and not agents.inbox:
                break
        fill = time.thread_time() - fill
        for _ in range(args.warmup):          # the fill's last changes, out of the figures
            clock.t += args.gap
            coord.schedule(clock.t)
            agents.react()
            agents.deliver()
        res = measure(coord, agents, clock, args)
        res["fill_cpu_s"] = round(fill, 2)     # submits, sampling runs and starts
        res["waiting"] = sum(j.state.waiting for j in coord.cluster.active.values())
        res["running"] = len(agents.running)
    print(json.dumps(res, indent=1))
    return 0


def measure(coord: Coordinator, agents: Agents, clock: Clock, args) -> dict:
    """Run the rounds; CPU time per part (ms), and the garbage collector's."""
    rng = random.Random(args.seed)
    cpu = time.thread_time
    collected = [0.0, 0, 0.0]   # CPU seconds, collections, the current one's start

    def on_gc(phase: str, _info: dict) -> None:
        if phase == "start":
            collected[2] = cpu()
        else:
            collected[0] += cpu() - collected[2]
            collected[1] += 1
    prof = cProfile.Profile(cpu) if args.profile else None
    parts: dict[str, list[float]] = {k: [] for k in ("events", "plan", "decide", "apply",
                                                     "commit", "tick", "round")}
    commit_wall: list[float] = []   # the turn's commit, wall time (disk waits show here)
    next_tick = clock.t + 1.0
    k, nodes = 0, len(agents.nodes)
    steps: dict[str, int] = {}         # job -> the step it last reported
    turn: list[str] = []               # the running jobs left to report this period

    def next_reporter() -> str | None:
        """The next running job to report progress, each in turn."""
        while True:
            if not turn:
                turn.extend(reversed(list(agents.running)))
                if not turn:
                    return None
            job = turn.pop()
            if job in agents.running:
                return job
    memory: list[tuple[int, float]] = []   # (round, resident MiB), with --replace
    gc.callbacks.append(on_gc)
    try:
        for r in range(args.rounds):
            if args.replace and r % 500 == 0:
                memory.append((r, resident_mib()))
            finished = 0
            for _ in range(round(FINISH_PER_S_PER_NODE * nodes * args.gap)):
                if agents.running:
                    job = rng.choice(list(agents.running))
                    node, attempt = agents.running.pop(job)
                    agents.inbox.append((node, s.JobExit(node=node, job=job, attempt=attempt,
                                                         exit_code=0)))
                    finished += 1
            if args.progress_every_s > 0:
                for _ in range(round(len(agents.running) * args.gap / args.progress_every_s)):
                    reporter = next_reporter()
                    if reporter is not None:
                        node, attempt = agents.running[reporter]
                        step = steps[reporter] = steps.get(reporter, 0) + 10
                        agents.inbox.append((node, s.JobEvent(
                            node=node, job=reporter, attempt=attempt, event=progress_event(
                                step, clock.t))))
            on_node: dict[str, list[str]] = {}
            for j, (n, _) in agents.running.items():
                on_node.setdefault(n, []).append(j)
            for _ in range(round(nodes * args.gap)):
                node = agents.nodes[k % nodes]
                k += 1
                jobs = [s.JobTelemetry(j, 10, {0: 2000.0}) for j in on_node.get(node, [])[:16]]
                agents.inbox.append((node, s.Heartbeat(
                    node=node, gpus=[s.GpuTelemetry(i, 0.5, 4000.0)
                                     for i in range(GPUS_PER_NODE)], jobs=jobs)))
            if prof:
                prof.enable()
            c0 = cpu()
            agents.deliver()
            if args.replace and finished:
                coord.handle([b"client"], s.encode(s.Submit(jobs=[SPEC] * finished)))
            c1 = cpu()
            clock.t += args.gap
            if clock.t >= next_tick:          # in the gap after a round, as the loop does
                next_tick += 1.0
                coord.tick(clock.t)
            c2 = cpu()
            plan = coord.rounds.plan(clock.t)
            c3 = cpu()
            if plan is not None:
                coord.rounds.decide(plan)
            c4 = cpu()
            if plan is not None:
                coord.rounds.apply(plan)
            c5, w5 = cpu(), time.perf_counter()
            agents.react()
            c6 = cpu()
            commit_wall.append(time.perf_counter() - w5)
            if prof:
                prof.disable()
            for name, took in (("events", c1 - c0), ("tick", c2 - c1), ("plan", c3 - c2),
                               ("decide", c4 - c3), ("apply", c5 - c4), ("commit", c6 - c5),
                               ("round", c5 - c2)):
                parts[name].append(took)
    finally:
        gc.callbacks.remove(on_gc)
    if prof:
        prof.dump_stats(args.profile)
    out = {f"{name}_cpu": percentiles(xs) for name, xs in parts.items()}
    out["commit_wall"] = percentiles(commit_wall)
    out["commit_wall"]["max_ms"] = round(1000 * max(commit_wall), 2)
    out["commit_wall"]["over_5ms"] = sum(w > 0.005 for w in commit_wall)
    out["rounds"] = args.rounds
    if args.replace:
        memory.append((args.rounds, resident_mib()))
        out["resident_mib_by_round"] = memory
    out["gc_collections"] = collected[1]
    out["gc_cpu_ms_per_round"] = round(1000 * collected[0] / args.rounds, 2)
    return out


if __name__ == "__main__":
    sys.exit(main())
