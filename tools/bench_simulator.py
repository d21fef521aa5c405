"""Simulator benchmarks: replay speed and memory, and the headline policy comparison.

Run: ``.venv/bin/python tools/bench_simulator.py`` (about 15-20 min on 2 cores).
Writes the "Simulator" section of docs/benchmarks.md (``--no-write`` to only print).

(a) Scaling: the 1k, 10k and all 82,247 earliest Philly jobs under each policy on
    the full Philly cluster (2,490 GPUs), one subprocess per run for a clean peak
    RSS. Runs whose projected wall time passes ``--budget`` seconds (from the
    next smaller size) are skipped and their projection shown.
(c) Event cost against history: a stationary synthetic stream (one 1-GPU job a
    minute, 30 min each, on 64 GPUs) of 5k and 40k jobs under fifo; the
    simulator's time per job (excluding decide) should not grow with the count.
(b) Headline: 2,000 Philly jobs from the start of the evaluation window replayed on
    clusters of 64 to 512 GPUs (8 x 24 GB per node): ratios of mean JCT and
    utilisation against fifo, for every policy, next to the paper's x4.1 and /3.6.
(d) Contended (``--contended``): the whole Philly CSV (82,247 jobs) on 256 and
    512 GPUs, and its first 14,000 jobs on 256 GPUs (a stand-in for the ~14k-job
    Tiresias-CSV trace), for every policy: wall time, jobs/s, peak memory; with
    ``--trace FILE`` also that Tiresias-CSV trace on 256 GPUs (the ~14k-job one:
    ``tools/tiresias_trace.py --start 2017-10-01 --jobs 13716 --max-gpus 256``).
(e) Event cost against queue length (``--event-cost``): a full 256-GPU cluster
    with 10 to 10,000 waiting jobs; one event (an arrival, a departure, a
    progress report) and the policy round after it, in microseconds.
(f) Scale (``--scale``): 10k, 100k and 1M synthetic jobs on 1250x8 GPUs at offered load
    0.9 under each policy (tools/bench_simulator_scale.py; its own flags follow).
With ``--before DIR`` (a checkout of older code, e.g. ``git archive``), (d) and
(e) also run on that code, side by side in the same run.

The trace is split by submit time into a tuning window (before 2017-11-01; fgs's
defaults were chosen on 2,000 jobs from 2017-10-09, inside it) and a disjoint
evaluation window (from 2017-11-01); the headline runs on the evaluation window only.
``--headline-only`` runs (b) alone and prints its table (docs/benchmarks.md untouched).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SIZES = (1000, 10000, None)               # None = every job of the trace
TUNING_WINDOW = (None, "2017-11-01")       # submit times; fgs defaults were tuned here
EVALUATION_WINDOW = ("2017-11-01", None)   # the headline is measured here only
TUNING_START = "2017-10-09"                # the slice the defaults were tuned on
HEADLINE_START = "2017-11-06"              # first Monday of the evaluation window
assert HEADLINE_START >= EVALUATION_WINDOW[0] > TUNING_START
HEADLINE_JOBS = 2000
HEADLINE_CLUSTERS = ("8x8", "16x8", "32x8", "64x8")
PAPER_UTIL, PAPER_JCT = 4.1, 3.6


def _cpu_s() -> float:
    """CPU seconds this process used (user + system): robust to a loaded machine."""
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def one_run(policy: str, num_jobs: int | None, spec: str, start: str | None,
            trace: str = "philly", workload: str = "profile") -> dict:
    """Simulate once in this process; timings, peak memory and the report summary.

    ``trace``: 'philly' or a trace file (e.g. a Tiresias CSV from tools/tiresias_trace.py).
    ``workload``: 'profile' (this bench's figures so far) or 'measured', with its
    profiles and their simulator settings, as ``tfgshare simulate`` runs by default.
    """
    import numpy as np
    import tfgshare

    from tfgshare.policies.registry import get_policy
    from tfgshare.sim.cluster import load_cluster
    from tfgshare.sim.config import SimConfig
    from tfgshare.sim.engine import simulate
    from tfgshare.sim.profiles import load_profiles, published_profiles_path
    from tfgshare.sim.workload import load_workload

    t0 = time.perf_counter()
    cpu_load0 = _cpu_s()
    measured = workload == "measured"
    profiles = load_profiles(published_profiles_path() if measured else None)
    config = SimConfig(**profiles.sim_overrides()) if measured else None
    cluster = load_cluster(spec)
    work = load_workload(trace, profiles, cluster.num_gpus, num_jobs=num_jobs, start=start,
                         workload=workload)
    load_s = time.perf_counter() - t0
    cpu0 = _cpu_s()   # the replay's CPU time, loading excluded
    load_cpu_s = cpu0 - cpu_load0
    res = simulate(cluster, work.jobs, profiles, get_policy(policy), config)
    d = np.frombuffer(res.decide_s, dtype=float)
    rep = res.report
    return {
        "policy": policy, "jobs": len(work.jobs), "cluster": spec, "gpus": cluster.num_gpus,
        "too_wide": len(work.too_wide), "load_s": load_s, "wall_s": res.wall_s,
        "decide_s": float(d.sum()), "rounds": res.rounds,
        "decide_p50_ms": float(np.percentile(d, 50) * 1e3) if len(d) else 0.0,
        "decide_p99_ms": float(np.percentile(d, 99) * 1e3) if len(d) else 0.0,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "cpu_s": _cpu_s() - cpu0, "load_cpu_s": load_cpu_s, "events": len(res.timeline),
        "oom_starts": res.oom_starts, "report": rep.as_dict(),
        "code": str(Path(tfgshare.__file__).resolve().parents[1]),
    }


def in_subprocess(policy: str, num_jobs: int | None, spec: str, start: str | None,
                  timeout: float, code: str | None = None,
                  trace: str = "philly", workload: str = "profile") -> dict | None:
    """``one_run`` in a fresh interpreter (clean peak RSS); None if it timed out.

    ``code``: import tfgshare from this checkout instead of this one.
    """
    cmd = [sys.executable, __file__, "--one", policy, str(num_jobs or 0), spec, start or ""]
    cmd += ["--code", code] if code else []
    cmd += ["--trace", trace] if trace != "philly" else []
    cmd += ["--workload", workload] if workload != "profile" else []
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=True)
    except subprocess.TimeoutExpired:
        return None
    except subprocess.CalledProcessError as err:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{err.stderr[-3000:]}") from None
    return json.loads(out.stdout.strip().splitlines()[-1])


def scaling(policies: list[str], budget: float) -> list[str]:
    lines = ["| policy | jobs | wall s | jobs/s | simulator s (excl. decide) | decide p50 / p99 ms "
             "| rounds | peak RSS MB |", "|---|---|---|---|---|---|---|---|"]
    for pol in policies:
        prev = None
        for n in SIZES:
            label = f"{n:,}" if n else "all"
            if prev is not None:
                target = n or 82247
                projected = prev["wall_s"] * target / prev["jobs"]
                if projected > budget:
                    lines.append(f"| {pol} | {label} | not run (projected {projected:,.0f} s) "
                                 "| | | | | |")
                    print(lines[-1], flush=True)
                    break
            r = in_subprocess(pol, n, "philly", None, timeout=budget * 1.5)
            if r is None:
                lines.append(f"| {pol} | {label} | > {budget * 1.5:,.0f} s (timed out) | | | | | |")
                print(lines[-1], flush=True)
                break
            engine = r["wall_s"] - r["decide_s"]
            lines.append(
                f"| {pol} | {r['jobs']:,} | {r['wall_s']:.1f} | {r['jobs'] / r['wall_s']:,.0f} "
                f"| {engine:.1f} ({r['jobs'] / engine:,.0f} jobs/s) "
                f"| {r['decide_p50_ms']:.2f} / {r['decide_p99_ms']:.2f} | {r['rounds']:,} "
                f"| {r['peak_rss_mb']:,.0f} |")
            print(lines[-1], flush=True)
            prev = r
    return lines


def headline(policies: list[str], budget: float,
             clusters: tuple[str, ...] = HEADLINE_CLUSTERS) -> tuple[list[str], dict]:
    from tfgshare.metrics import Report, ratios

    def as_report(d: dict) -> Report:
        return Report(**{k: (float("nan") if v is None and k.startswith("jct") else v)
                         for k, v in d.items()})

    lines = ["| cluster (GPUs) | offered load | policy | JCT mean h | JCT / (fifo÷policy) "
             "| alloc util % | util x | eff util % | eff x | device util % "
             "| device util busy % | susp/res/mig | wall s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    raw: dict = {}
    for spec in clusters:
        runs = {}
        for pol in policies:
            r = in_subprocess(pol, HEADLINE_JOBS, spec, HEADLINE_START, timeout=budget * 1.5)
            if r is not None:
                runs[pol] = r
        raw[spec] = runs
        if "fifo" not in runs:
            continue
        base = as_report(runs["fifo"]["report"])
        load = _offered_load(spec)
        for pol, r in runs.items():
            rep = as_report(r["report"])
            rat = ratios(rep, base)
            lines.append(
                f"| {spec} ({r['gpus']}) | {load:.2f} | {pol} | {rep.jct_mean / 3600:.2f} "
                f"| {rat['jct_ratio']:.2f} | {100 * rep.util_allocated:.1f} "
                f"| {rat['util_ratio']:.2f} | {100 * rep.util_effective:.1f} "
                f"| {rat['eff_util_ratio']:.2f} | {100 * rep.util_device:.1f} "
                f"| {100 * rep.util_device_busy:.1f} "
                f"| {rep.suspends}/{rep.resumes}/{rep.migrations} "
                f"| {r['wall_s']:.0f} |")
            print(lines[-1], flush=True)
    return lines, raw


def stationary() -> list[str]:
    """Simulator cost per job (decide excluded) for 5k and 40k jobs of a steady stream."""
    import numpy as np

    from philly.jobs import TraceJob
    from tfgshare.policies.registry import get_policy
    from tfgshare.sim.cluster import load_cluster
    from tfgshare.sim.engine import simulate
    from tfgshare.sim.profiles import load_profiles

    profiles = load_profiles()
    step = profiles.get("alexnet_v2", 128).step_time_s
    lines = ["| jobs | wall s | simulator s (excl. decide) | simulator us/job | decide p50 ms |",
             "|---|---|---|---|---|"]
    for n in (5000, 40000):
        jobs = [TraceJob(f"s{i}", 60.0 * i, 1, 1800.0, model="alexnet_v2", batch_size=128,
                         total_steps=round(1800 / step)) for i in range(n)]
        res = simulate(load_cluster("8x8"), jobs, profiles, get_policy("fifo"))
        d = np.frombuffer(res.decide_s, dtype=float)
        engine = res.wall_s - d.sum()
        lines.append(f"| {n:,} | {res.wall_s:.1f} | {engine:.2f} | {1e6 * engine / n:.0f} "
                     f"| {np.percentile(d, 50) * 1e3:.2f} |")
        print(lines[-1], flush=True)
    return lines


CONTENDED = ((None, "32x8"), (None, "64x8"), (14000, "32x8"))   # (jobs, cluster)


def contended(policies: list[str], budget: float, before: str | None,
              tiresias_trace: str | None = None) -> list[str]:
    """Whole-trace replays on small clusters (queues of thousands), before and after.

    ``tiresias_trace``: also replay this Tiresias-CSV trace on 256 GPUs.
    """
    lines = ["| trace | GPUs | policy | code | wall s | CPU s | jobs/s (by CPU s) | decide s "
             "| rounds | peak RSS MB | mean JCT h |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    runs = [("philly", n, spec) for n, spec in CONTENDED]
    runs += [(tiresias_trace, None, "32x8")] if tiresias_trace else []
    for path, n, spec in runs:
        for pol in policies:
            for label, code in ([("before", before)] if before else []) + [("after", None)]:
                r = in_subprocess(pol, n, spec, None, timeout=budget, code=code, trace=path)
                trace = (Path(path).name if path != "philly" else
                         "Philly, first 14,000" if n else "Philly, all")
                if r is None:
                    lines.append(f"| {trace} | {spec} | {pol} | {label} | > {budget:,.0f} "
                                 "(stopped) | | | | | | |")
                else:
                    jct = r["report"]["jct_mean"]
                    lines.append(
                        f"| {trace} | {r['gpus']} | {pol} | {label} | {r['wall_s']:.1f} "
                        f"| {r['cpu_s']:.1f} | {r['jobs'] / r['cpu_s']:,.0f} | {r['decide_s']:.1f} "
                        f"| {r['rounds']:,} | {r['peak_rss_mb']:,.0f} "
                        f"| {jct / 3600:.1f} |")
                print(lines[-1], flush=True)
    return lines


QUEUES = (10, 100, 1000, 10000)


def event_cost_run(policy: str, waiting: int, events: int = 300) -> dict:
    """Mean and p99 microseconds of one event plus the policy round after it.

    A 256-GPU cluster (8 x 24 GB per node) with every GPU held by a running
    job, and ``waiting`` sampled jobs of 1 to 8 GPUs that cannot fit. The
    events cycle through an arrival, a departure (cancel) and a running job's
    progress report, each followed by a round, as the simulator does them.
    """
    import random

    from tfgshare.policies.base import (ClusterSnapshot, Fragment, JobState, JobView,
                                        SampleRecord)
    from tfgshare.policies.registry import get_policy
    from tfgshare.sim.cluster import load_cluster

    cluster = load_cluster("32x8")
    snap = ClusterSnapshot(cluster.gpus, cluster.reserve_mb)
    pol = get_policy(policy)
    rng = random.Random(1)
    now = 2000.0
    running = {}
    for i, g in enumerate(snap.gpus):
        running[f"r{i}"] = JobView(
            id=f"r{i}", submit_time=0.0, num_gpus=1, state=JobState.RUNNING, total_steps=10 ** 6,
            steps_done=1000, sample=SampleRecord(0.5, 20000.0, 0.9),
            predicted_remaining_s=1e5 + i,
            fragments=(Fragment(g.id, 1 - cluster.reserve_mb / g.memory_mb),),
            attained_service_s=1000.0 * (i % 3), last_start=0.0)

    def waiter(k: int) -> JobView:
        t = rng.uniform(0, now)
        return JobView(id=f"w{k}", submit_time=t, num_gpus=rng.choice([1, 1, 1, 2, 4, 8]),
                       state=JobState.SAMPLED, total_steps=10 ** 5,
                       sample=SampleRecord(0.5, rng.uniform(2000, 20000), rng.uniform(0.3, 1)),
                       predicted_remaining_s=rng.uniform(2e4, 1e5), last_wait_start=t,
                       last_start=t)

    views = dict(running)
    for k in range(waiting):
        views[f"w{k}"] = waiter(k)
    new_memo = getattr(pol, "new_memo", None)
    if new_memo is not None:   # this code's interface: a JobSet and a memo
        from tfgshare.policies.jobset import JobSet
        jobs, memo = JobSet(views.values()), new_memo()

        def put(v):
            jobs.put(v)

        def drop(jid):
            jobs.drop(jid)

        def decide():
            out = pol.decide(now, snap, jobs, memo)
            jobs.trim()
            return out
    else:                      # older code: the caller lists every view each round
        def put(v):
            views[v.id] = v

        def drop(jid):
            views.pop(jid, None)

        def decide():
            return pol.decide(now, snap, list(views.values()))
    decide()
    took, acted = [], 0
    nxt, oldest = waiting, 0
    for e in range(events):
        t0 = time.perf_counter()
        if e % 3 == 0:
            put(waiter(nxt))
            nxt += 1
        elif e % 3 == 1:
            drop(f"w{oldest}")
            oldest += 1
        else:
            r = running[f"r{e % len(running)}"]
            r = running[r.id] = JobView(**{**r.__dict__, "steps_done": r.steps_done + 1,
                                           "predicted_remaining_s": r.predicted_remaining_s - 1})
            put(r)
        acted += len(decide())
        took.append(time.perf_counter() - t0)
        now += 1.0
    took.sort()
    return {"policy": policy, "waiting": waiting, "mean_us": 1e6 * sum(took) / len(took),
            "p50_us": 1e6 * took[len(took) // 2], "p99_us": 1e6 * took[int(0.99 * len(took))],
            "actions": acted}


def event_cost(policies: list[str], before: str | None) -> list[str]:
    """Per-event cost against queue length, before and after, one subprocess each."""
    head = " | ".join(f"{q:,} waiting" for q in QUEUES)
    lines = ["Median microseconds per event (mean in brackets; the machine is shared, so "
             "means carry scheduling noise).", "",
             f"| policy | code | {head} | 10,000 / 10 (median) |",
             "|---|---|" + "---|" * len(QUEUES) + "---|"]
    for pol in policies:
        for label, code in ([("before", before)] if before else []) + [("after", None)]:
            cells = []
            for q in QUEUES:
                cmd = [sys.executable, __file__, "--event", pol, str(q)]
                cmd += ["--code", code] if code else []
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=900,
                                     check=True)
                cells.append(json.loads(out.stdout.strip().splitlines()[-1]))
            ratio = cells[-1]["p50_us"] / cells[0]["p50_us"]
            lines.append(f"| {pol} | {label} | " + " | ".join(
                f"{c['p50_us']:,.0f} (mean {c['mean_us']:,.0f})" for c in cells)
                + f" | {ratio:.1f}x |")
            print(lines[-1], flush=True)
    return lines


def _offered_load(spec: str) -> float:
    """GPU-seconds the headline jobs ask for per second of arrivals, per cluster GPU."""
    from philly.filters import offered_load
    from tfgshare.sim.cluster import load_cluster
    from tfgshare.sim.profiles import load_profiles
    from tfgshare.sim.workload import load_workload
    c = load_cluster(spec)
    w = load_workload("philly", load_profiles(), c.num_gpus, num_jobs=HEADLINE_JOBS,
                      start=HEADLINE_START)
    return offered_load(w.jobs) / c.num_gpus


BEGIN = "<!-- bench_simulator.py: generated tables begin -->"
END = "<!-- bench_simulator.py: generated tables end -->"


def write_section(text: str, path: Path = ROOT / "docs" / "benchmarks.md") -> None:
    """Replace the generated tables of the Simulator section (or append the section)."""
    doc = path.read_text() if path.exists() else "# Benchmarks\n"
    block = f"{BEGIN}\n{text.rstrip()}\n{END}"
    if BEGIN in doc and END in doc:
        doc = doc[:doc.index(BEGIN)] + block + doc[doc.index(END) + len(END):]
    else:
        doc = doc.rstrip("\n") + "\n\n## Simulator (`tfgshare/sim/`)\n\n" + block + "\n"
    path.write_text(doc)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--one", nargs=4, metavar=("POLICY", "JOBS", "CLUSTER", "START"),
                   help=argparse.SUPPRESS)
    p.add_argument("--event", nargs=2, metavar=("POLICY", "WAITING"), help=argparse.SUPPRESS)
    p.add_argument("--code", help=argparse.SUPPRESS)   # import tfgshare from here
    p.add_argument("--workload", default="profile", help=argparse.SUPPRESS)   # of --one
    p.add_argument("--scale", action="store_true",
                   help="only (f): 10k, 100k and 1M synthetic jobs on 1250x8 GPUs at load 0.9 "
                        "(tools/bench_simulator_scale.py)")
    p.add_argument("--trace", default="philly",
                   help="with --contended: also replay this Tiresias-CSV trace on 256 GPUs")
    p.add_argument("--policies", default="fifo,sjf,tiresias,gandiva,fgs")
    p.add_argument("--contended", action="store_true",
                   help="only (d): whole-trace replays on 256 and 512 GPUs")
    p.add_argument("--event-cost", action="store_true",
                   help="only (e): per-event cost against queue length")
    p.add_argument("--before", metavar="DIR",
                   help="also run (d) and (e) on the code in DIR, side by side")
    p.add_argument("--budget", type=float, default=240.0,
                   help="skip scaling runs projected to take longer (seconds)")
    p.add_argument("--no-write", action="store_true", help="print only")
    p.add_argument("--skip-scaling", action="store_true")
    p.add_argument("--headline-only", action="store_true", help="run (b) only")
    p.add_argument("--clusters", default=",".join(HEADLINE_CLUSTERS),
                   help="clusters of the headline (b)")
    args, argv_rest = p.parse_known_args(argv)
    if argv_rest and not args.scale:
        p.error(f"unrecognized arguments: {' '.join(argv_rest)}")
    if args.code:
        sys.path.insert(0, str(Path(args.code).resolve()))
    if args.event:
        print(json.dumps(event_cost_run(args.event[0], int(args.event[1]))))
        return 0
    if args.one:
        pol, n, spec, start = args.one
        print(json.dumps(one_run(pol, int(n) or None, spec, start or None, args.trace,
                                 args.workload)))
        return 0
    policies = args.policies.split(",")
    if args.scale:
        from bench_simulator_scale import main as scale_main
        return scale_main(policies, argv_rest, args.no_write)
    t0 = time.time()
    if args.contended or args.event_cost:
        parts = []
        if args.event_cost:
            parts += ["### (e) Cost of one event and the round after it, against queue length "
                      "(full 256-GPU cluster, microseconds)", ""] \
                + event_cost(policies, args.before) + [""]
        if args.contended:
            parts += ["### (d) Contended replays: the Philly CSV on 256 and 512 GPUs", ""] \
                + contended(policies, args.budget, args.before,
                            None if args.trace == "philly" else args.trace) + [""]
        print(f"bench took {time.time() - t0:.0f} s")
        print("\n".join(parts))
        return 0
    skip = args.skip_scaling or args.headline_only
    scale = [] if skip else scaling(policies, args.budget)
    steady = [] if args.headline_only else stationary()
    head, raw = headline(policies, args.budget, tuple(args.clusters.split(",")))
    print(f"bench took {time.time() - t0:.0f} s")
    if args.headline_only:   # the other generated tables stay as they are: print only
        print(render(scale, steady, head))
    elif not args.no_write:
        text = render(scale, steady, head)
        write_section(text)
    return 0


def render(scale: list[str], steady: list[str], head: list[str]) -> str:
    """The generated markdown tables."""
    parts = [f"Generated by `tools/bench_simulator.py` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.", ""]
    if scale:
        parts += ["### (a) Replay speed and memory, full Philly cluster (2,490 GPUs)", ""] \
            + scale + [""]
    if steady:
        parts += ["### (c) Simulator cost per job against the number of past jobs (fifo, "
                  "steady synthetic stream, 64 GPUs)", ""] + steady + [""]
    parts += [f"### (b) Headline: {HEADLINE_JOBS:,} jobs from {HEADLINE_START} (evaluation "
              f"window, from {EVALUATION_WINDOW[0]}; fgs tuned on jobs from {TUNING_START}, "
              f"before {TUNING_WINDOW[1]}) on clusters of 64 to 512 GPUs", "",
              f"Paper (abstract): utilisation x{PAPER_UTIL} and JCT /{PAPER_JCT} against "
              "traditional (FIFO-exclusive) scheduling.", ""] + head
    return "\n".join(parts)


if __name__ == "__main__":
    sys.exit(main())
