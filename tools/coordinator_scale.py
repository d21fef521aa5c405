"""The coordinator at scale: a full queue, real agents' load, a long soak (``--soak-s``).

``bench_coordinator.py --soak-s S`` runs this setting (issue 32 item 3, "a coordinator for
ten thousand GPUs": ``--gpus 10000 --jobs 100000 --soak-s 1800``). Against one
``tfgshare coordinator`` process (its default node timeout, so agents heartbeat at the
period it hands out: a quarter of it) the simulated agents (``agent_load.SimAgents``,
real GPUs) register, then:

- fill: ``--jobs`` jobs are submitted one a message through a raw DEALER, pipelined
  (at most ``WINDOW`` unanswered) while the agents run what the coordinator starts;
  submits/s is jobs over the time to the last reply;
- soak: for S seconds the agents run on, and every job that finishes is replaced by a
  new submit, so the queue and the running jobs stay near their level.

Every ``--sample-s`` (and at each phase's end) a sample is taken: the coordinator's
resident memory and CPU time (and this process's), the 1-minute load average, the
heartbeats' lag from send to reply (``SimAgents.lags``) and what the coordinator's
Prometheus endpoint counts (``tfgshare_messages_handled_total`` by type,
``tfgshare_db_commit_seconds``, ``tfgshare_db_rows_written_total``,
``tfgshare_db_write_seconds_total``, the rounds' histogram, lost nodes, jobs by state),
and the size of the state database's WAL file.
At the end the coordinator's metrics request gives the soak's round times (p50/p99/max,
exact, from its own record of every round) and ``policy.decide``'s CPU time.
"""

from __future__ import annotations

import csv
import json
import os
import sqlite3
import statistics
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil
import zmq
from prometheus_client.parser import text_string_to_metric_families

from agent_load import SimAgents
from tfgshare import schema as s

WINDOW = 500                 # unanswered submits at most
GOAL_ROUND_P99_MS = 50.0
GOAL_SUBMITS_PER_S = 1000.0
# memory is flat when its least-squares slope over the soak stays within this, per 10 min
FLAT_MIB_PER_10_MIN = 2.0


class Submitter:
    """One-job submits through a raw DEALER, pipelined; ``want`` asks for more."""

    def __init__(self, ctx: zmq.Context, address: str, steps: int) -> None:
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(address)
        self.spec = {"model_name": "inception_v3", "max_number_of_steps": steps}
        self.wanted = self.sent = self.acked = 0

    def want(self, n: int) -> None:
        self.wanted += n

    def step(self) -> None:
        """Send what is wanted within the window; take the replies that came."""
        while self.sent < self.wanted and self.sent - self.acked < WINDOW:
            self.sock.send(json.dumps({"v": 1, "type": "submit", "id": s.new_id(),
                                       "jobs": [self.spec]}).encode())
            self.sent += 1
        while True:
            try:
                reply = json.loads(self.sock.recv(zmq.NOBLOCK))
            except zmq.Again:
                return
            assert reply["type"] == "ok", reply
            self.acked += 1


@dataclass
class Sample:
    """What one sample saw; the counters are totals since the coordinator started."""

    t_s: float                       # seconds since its phase began
    phase: str
    rss_mb: float
    cpu_s: float                     # the coordinator's CPU seconds (all its threads)
    bench_cpu_s: float               # this process's (the agents and the submits)
    load1: float
    beats_sent: int
    beats_handled: float
    lag_p50_ms: float | None         # heartbeats answered since the last sample
    lag_p99_ms: float | None
    lag_max_ms: float | None
    commits: float
    commit_s: float
    commit_buckets: dict[float, float]
    rows: float
    write_s: float
    rounds: float
    rounds_over_50ms: float
    node_losses: float
    jobs: dict[str, float]
    wal_mb: float
    submits_acked: int


@dataclass
class Run:
    """A scale run's samples and phase figures."""

    fill_s: float = 0.0
    filled: int = 0
    soak_s: float = 0.0
    soak_rounds_from: int = 0
    samples: list[Sample] = field(default_factory=list)


def scrape(port: int) -> dict[str, list]:
    """The coordinator's Prometheus samples: name -> [(labels, value)]."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read()
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text.decode()):
        for smp in family.samples:
            out.setdefault(smp.name, []).append((smp.labels, smp.value))
    return out


def _one(m: dict, name: str, **labels) -> float:
    for got, value in m.get(name, ()):
        if all(got.get(k) == v for k, v in labels.items()):
            return value
    return 0.0


def _buckets(m: dict, name: str) -> dict[float, float]:
    return {float(lab["le"]): v for lab, v in m.get(name + "_bucket", ())}


def pct(values: list[float], q: float) -> float | None:
    """The q-quantile (0..1) of ``values`` by the nearest rank, None if empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def take_sample(t_s: float, phase: str, pid: int, port: int, agents: SimAgents,
                wal: Path, sub: Submitter) -> Sample:
    """One sample of the coordinator and the agents (see the module's docstring)."""
    m = scrape(port)
    lags = agents.lags.take()
    ms = [1000 * x for x in lags]
    rounds = _buckets(m, "tfgshare_scheduling_round_seconds")
    count = _one(m, "tfgshare_scheduling_round_seconds_count")
    coord = psutil.Process(pid)
    return Sample(
        t_s=round(t_s, 1), phase=phase,
        rss_mb=round(coord.memory_info().rss / 2**20, 1),
        cpu_s=round(sum(coord.cpu_times()[:2]), 2), bench_cpu_s=round(time.process_time(), 2),
        load1=round(os.getloadavg()[0], 2),
        beats_sent=agents.lags.sent,
        beats_handled=_one(m, "tfgshare_messages_handled_total", type="heartbeat"),
        lag_p50_ms=pct(ms, 0.5), lag_p99_ms=pct(ms, 0.99), lag_max_ms=max(ms, default=None),
        commits=_one(m, "tfgshare_db_commit_seconds_count"),
        commit_s=_one(m, "tfgshare_db_commit_seconds_sum"),
        commit_buckets=_buckets(m, "tfgshare_db_commit_seconds"),
        rows=_one(m, "tfgshare_db_rows_written_total"),
        write_s=_one(m, "tfgshare_db_write_seconds_total"),
        rounds=count, rounds_over_50ms=count - rounds.get(0.05, 0.0),
        node_losses=_one(m, "tfgshare_node_losses_total"),
        jobs={lab["state"]: v for lab, v in m.get("tfgshare_jobs", ())},
        wal_mb=round(wal.stat().st_size / 2**20, 2) if wal.exists() else 0.0,
        submits_acked=sub.acked)


def drive(agents: SimAgents, sub: Submitter, phase: str, seconds: float, sample_s: float,
          sampler, run: Run, until=lambda: False, refill: bool = False) -> float:
    """Play the agents and the submits for ``seconds`` (or ``until()``), sampling every
    ``sample_s``; with ``refill``, a submit replaces each job the agents finish.
    Returns the seconds it ran."""
    t0 = time.monotonic()
    next_sample = t0 + sample_s
    finished0 = agents.finished
    while True:
        now = time.monotonic()
        if now - t0 >= seconds or until():
            break
        if refill:
            sub.want(agents.finished - finished0 - (sub.wanted - run.filled))
        sub.step()
        agents.pump(1)
        if now >= next_sample:
            run.samples.append(sampler(now - t0, phase))
            next_sample += sample_s
    took = time.monotonic() - t0
    run.samples.append(sampler(took, phase))
    return took


def ask_metrics(ctx: zmq.Context, address: str, agents: SimAgents, since_round: int) -> dict:
    """The coordinator's metrics answer, the agents played meanwhile (it takes a while)."""
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(address)
    sock.send(s.encode(s.MetricsRequest(since_round=since_round)))
    deadline = time.monotonic() + 300
    while not sock.poll(0):
        if time.monotonic() > deadline:
            raise TimeoutError("no answer to the metrics request")
        agents.pump(5)
    reply = s.decode(sock.recv())
    sock.close(0)
    assert isinstance(reply, s.Ok), reply
    return reply.fields


def scale_run(address: str, pid: int, metrics_port: int, state: Path, args) -> dict:
    """Fill and soak (see the module's docstring); the figures as a dict."""
    nodes = args.gpus // args.gpus_per_node
    agents = SimAgents(address, nodes, args.gpus_per_node, virtual=False, step_s=args.step_s,
                       progress_every_s=args.progress_every_s)
    ctx = zmq.Context()
    sub = Submitter(ctx, address, args.steps)
    wal = state.with_name(state.name + "-wal")
    run = Run()

    def sampler(t_s: float, phase: str) -> Sample:
        return take_sample(t_s, phase, pid, metrics_port, agents, wal, sub)

    try:
        rss_idle = psutil.Process(pid).memory_info().rss / 2**20
        agents.register()
        sub.want(args.jobs)
        run.fill_s = drive(agents, sub, "fill", float("inf"), args.sample_s, sampler, run,
                           until=lambda: sub.acked >= args.jobs)
        run.filled = sub.acked
        run.soak_rounds_from = int(run.samples[-1].rounds)
        run.soak_s = drive(agents, sub, "soak", args.soak_s, args.sample_s, sampler, run,
                           refill=True)
        answer = ask_metrics(ctx, address, agents, run.soak_rounds_from)
        journal = sqlite3.connect(f"file:{state}?mode=ro", uri=True).execute(
            "PRAGMA journal_mode").fetchone()[0]
    finally:
        agents.close()
        sub.sock.close(0)
        ctx.term()
    return summarise(run, answer, agents, args, nodes, rss_idle, journal)


def _hist_pct(buckets_end: dict[float, float], buckets_start: dict[float, float],
              q: float) -> float | None:
    """The q-quantile of a Prometheus histogram's observations between two scrapes,
    interpolated within its bucket (as PromQL's histogram_quantile)."""
    bounds = sorted(buckets_end)
    counts = [buckets_end[b] - buckets_start.get(b, 0.0) for b in bounds]
    total = counts[-1] if counts else 0.0
    if not total:
        return None
    rank, lower, below = q * total, 0.0, 0.0
    for bound, cum in zip(bounds, counts):
        if cum >= rank:
            if bound == float("inf"):
                return lower
            return lower + (bound - lower) * (rank - below) / max(cum - below, 1e-12)
        lower, below = bound, cum
    return lower


def slope_per_10_min(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) points, per 10 minutes."""
    if len(points) < 2:
        return 0.0
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return 600 * sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var if var else 0.0


def summarise(run: Run, answer: dict, agents: SimAgents, args, nodes: int, rss_idle: float,
              journal: str) -> dict:
    """The run's figures: fill, rounds, heartbeats, memory, the state database."""
    soak = [x for x in run.samples if x.phase == "soak"]
    first, last = [x for x in run.samples if x.phase == "fill"][-1], soak[-1]
    lags = [x for x in soak if x.lag_p99_ms is not None]
    commits = last.commits - first.commits
    rounds, decide = answer["rounds"], answer["decide_cpu"]
    behind = [x.beats_sent - x.beats_handled for x in soak]
    return {
        "gpus": nodes * args.gpus_per_node, "nodes": nodes, "policy": args.policy,
        "heartbeat_s": agents.heartbeat_s, "step_s": args.step_s, "steps": args.steps,
        "jobs_filled": run.filled, "fill_s": round(run.fill_s, 1),
        "fill_submits_per_s": round(run.filled / run.fill_s),
        "soak_s": round(run.soak_s, 1),
        "soak_submits": last.submits_acked - first.submits_acked,
        "jobs_end": {k: int(v) for k, v in last.jobs.items() if v},
        "coordinator_cores": round((last.cpu_s - first.cpu_s) / run.soak_s, 2),
        "bench_cores": round((last.bench_cpu_s - first.bench_cpu_s) / run.soak_s, 2),
        "rounds": rounds, "decide_cpu": decide,
        "round_parts": {k: (v["p50_ms"], v["p99_ms"]) for k, v in answer["round_parts"].items()},
        "rounds_over_50ms": int(last.rounds_over_50ms - first.rounds_over_50ms),
        "beats_sent": last.beats_sent - first.beats_sent,
        "beats_handled": int(last.beats_handled - first.beats_handled),
        "beats_behind_max": max(behind, default=0),
        "lag_p50_ms": statistics.median(x.lag_p50_ms for x in lags) if lags else None,
        "lag_p99_ms_worst_window": max((x.lag_p99_ms for x in lags), default=None),
        "lag_max_ms": max((x.lag_max_ms for x in lags), default=None),
        "node_losses": int(last.node_losses),
        "agent_errors": dict(agents.errors),
        "messages_sent": dict(agents.sent_by_type),
        "job_events_sent": dict(sorted(agents.events_by_name.items(), key=lambda kv: -kv[1])),
        "progress_every_s": args.progress_every_s,
        "rss_idle_mb": round(rss_idle, 1), "rss_first_mb": soak[0].rss_mb,
        "rss_last_mb": last.rss_mb, "rss_max_mb": max(x.rss_mb for x in run.samples),
        "rss_slope_mb_per_10_min": round(slope_per_10_min([(x.t_s, x.rss_mb)
                                                           for x in soak]), 2),
        # the second half alone: past the warm-up of the queue's mix (jobs sampled, moved)
        "rss_slope_second_half_mb_per_10_min": round(slope_per_10_min(
            [(x.t_s, x.rss_mb) for x in soak if x.t_s >= soak[-1].t_s / 2]), 2),
        "db_journal_mode": journal,
        "db_commits_per_s": round(commits / run.soak_s, 1),
        "db_commit_mean_ms": round(1000 * (last.commit_s - first.commit_s) / commits, 3)
        if commits else None,
        "db_commit_p99_ms": _ms(_hist_pct(last.commit_buckets, first.commit_buckets, 0.99)),
        "db_rows_per_commit": round((last.rows - first.rows) / commits, 1) if commits else None,
        "db_write_share": round((last.write_s - first.write_s) / run.soak_s, 3),
        "wal_max_mb": max(x.wal_mb for x in run.samples),
        "load1_min": min(x.load1 for x in run.samples),
        "load1_max": max(x.load1 for x in run.samples),
        "samples": [asdict(x) for x in run.samples],
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(1000 * seconds, 3)


CSV_PATH = Path(__file__).resolve().parents[1] / "docs" / "results" / "coordinator.csv"
FIELDS = ("date", "machine", "load", "command", "figure", "policy", "value", "goal")


def _met(ok: bool) -> str:
    return "met" if ok else "missed"


def csv_rows(res: dict, date: str, machine: str, command: str) -> list[dict]:
    """The run's rows for docs/results/coordinator.csv (its columns, its goals)."""
    r, d = res["rounds"], res["decide_cpu"]
    jobs = res["jobs_end"]
    waiting = sum(jobs.get(k, 0) for k in ("queued", "sampled", "suspended"))
    running = sum(jobs.get(k, 0) for k in ("running", "sampling", "suspending", "migrating"))
    at = (f"{res['gpus']:,} GPUs on {res['nodes']:,} agents, {res['jobs_filled']:,} jobs "
          f"queued first, {res['soak_s'] / 60:.0f}-min soak")
    lag_ok = (res["lag_p99_ms_worst_window"] is not None
              and res["lag_p99_ms_worst_window"] < 1000 * res["heartbeat_s"]
              and res["beats_behind_max"] <= res["nodes"])
    flat = abs(res["rss_slope_mb_per_10_min"]) <= FLAT_MIB_PER_10_MIN
    rows = [
        (f"submits/s filling the queue, 1 job a message, pipelined ({at})",
         f"{res['fill_submits_per_s']:,}",
         f">= 1,000: {_met(res['fill_submits_per_s'] >= GOAL_SUBMITS_PER_S)}"),
        (f"scheduling round over the soak, wall p50 / p99 / max ms ({waiting:,} waiting, "
         f"{running:,} running at the end; {at})",
         f"{r['p50_ms']:.2f} / {r['p99_ms']:.2f} / {r['max_ms']:.2f}",
         f"p99 < 50 ms: {_met(r['p99_ms'] < GOAL_ROUND_P99_MS)}"),
        ("policy.decide CPU p50 / p99 ms, same", f"{d['p50_ms']:.2f} / {d['p99_ms']:.2f}", ""),
        (f"heartbeats over the soak, sent / handled (each agent every {res['heartbeat_s']:g} s, "
         "the period the coordinator hands out); most behind at a sample",
         f"{res['beats_sent']:,} / {res['beats_handled']:,}; {res['beats_behind_max']:,}", ""),
        ("heartbeat lag, send to reply, ms: median of the samples' p50s / worst p99 / max",
         f"{res['lag_p50_ms']:.1f} / {res['lag_p99_ms_worst_window']:.1f} / "
         f"{res['lag_max_ms']:.1f}",
         f"no backlog (p99 < the heartbeat period, handled keeps up): {_met(lag_ok)}"),
        ("coordinator resident memory MiB over the soak, first / last / max; slope MiB "
         "per 10 min, whole soak / its second half",
         f"{res['rss_first_mb']:.0f} / {res['rss_last_mb']:.0f} / {res['rss_max_mb']:.0f}; "
         f"{res['rss_slope_mb_per_10_min']:+.2f} / "
         f"{res['rss_slope_second_half_mb_per_10_min']:+.2f}",
         f"flat (|slope| <= {FLAT_MIB_PER_10_MIN:g} MiB per 10 min): {_met(flat)}"),
        (f"state database over the soak ({res['db_journal_mode'].upper()}): commits/s, "
         "commit mean / p99 ms, rows per commit, share of a core in write statements",
         f"{res['db_commits_per_s']:,} / {res['db_commit_mean_ms']:.3f} / "
         f"{res['db_commit_p99_ms']:.3f} / {res['db_rows_per_commit']} / "
         f"{100 * res['db_write_share']:.1f} %", ""),
    ]
    load = f"{res['load1_min']:.1f}-{res['load1_max']:.1f}"
    return [dict(zip(FIELDS, (date, machine, load, command, fig, res["policy"], val, goal)))
            for fig, val, goal in rows]


def write_rows(rows: list[dict], path: Path = CSV_PATH) -> None:
    """Put ``rows`` first under the header (the file lists the newest first)."""
    with path.open(newline="") as f:
        old = list(csv.DictReader(f))
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, lineterminator="\n")
        w.writeheader()
        w.writerows(rows + old)
