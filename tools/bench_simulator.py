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


def one_run(policy: str, num_jobs: int | None, spec: str, start: str | None) -> dict:
    """Simulate once in this process; timings, peak memory and the report summary."""
    import numpy as np

    from tfgshare.policies.registry import get_policy
    from tfgshare.sim.cluster import load_cluster
    from tfgshare.sim.engine import simulate
    from tfgshare.sim.profiles import load_profiles
    from tfgshare.sim.workload import load_workload

    t0 = time.perf_counter()
    profiles = load_profiles()
    cluster = load_cluster(spec)
    work = load_workload("philly", profiles, cluster.num_gpus, num_jobs=num_jobs, start=start)
    load_s = time.perf_counter() - t0
    res = simulate(cluster, work.jobs, profiles, get_policy(policy))
    d = np.frombuffer(res.decide_s, dtype=float)
    rep = res.report
    return {
        "policy": policy, "jobs": len(work.jobs), "cluster": spec, "gpus": cluster.num_gpus,
        "too_wide": len(work.too_wide), "load_s": load_s, "wall_s": res.wall_s,
        "decide_s": float(d.sum()), "rounds": res.rounds,
        "decide_p50_ms": float(np.percentile(d, 50) * 1e3) if len(d) else 0.0,
        "decide_p99_ms": float(np.percentile(d, 99) * 1e3) if len(d) else 0.0,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "oom_starts": res.oom_starts, "report": rep.as_dict(),
    }


def in_subprocess(policy: str, num_jobs: int | None, spec: str, start: str | None,
                  timeout: float) -> dict | None:
    """``one_run`` in a fresh interpreter (clean peak RSS); None if it timed out."""
    cmd = [sys.executable, __file__, "--one", policy, str(num_jobs or 0), spec, start or ""]
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
             "| alloc util % | util x | eff util % | eff x | susp/res/mig | wall s |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
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
                f"| {rat['eff_util_ratio']:.2f} | {rep.suspends}/{rep.resumes}/{rep.migrations} "
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
    p.add_argument("--policies", default="fifo,sjf,tiresias,gandiva,fgs")
    p.add_argument("--budget", type=float, default=240.0,
                   help="skip scaling runs projected to take longer (seconds)")
    p.add_argument("--no-write", action="store_true", help="print only")
    p.add_argument("--skip-scaling", action="store_true")
    p.add_argument("--headline-only", action="store_true", help="run (b) only")
    p.add_argument("--clusters", default=",".join(HEADLINE_CLUSTERS),
                   help="clusters of the headline (b)")
    args = p.parse_args(argv)
    if args.one:
        pol, n, spec, start = args.one
        print(json.dumps(one_run(pol, int(n) or None, spec, start or None)))
        return 0
    policies = args.policies.split(",")
    t0 = time.time()
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
