"""(f) A million jobs on ten thousand GPUs (issue 32, item 2): ``bench_simulator.py --scale``.

Synthetic traces of 10k, 100k and 1M jobs (``tfgshare trace generate --cluster 1250x8
--load 0.9 --seed 1``, written once under ``--trace-dir``, /tmp by default) replayed on
1250x8 GPUs under each policy as ``tfgshare simulate --trace FILE --cluster 1250x8`` runs
them (the measured workload), one subprocess per run (``bench_simulator.in_subprocess``:
clean peak RSS, trace loading included). A row gives the wall and CPU seconds of the whole
run (loading and replay), the peak memory, the event steps (the distinct times the
simulator handled: arrivals, runs ending, start-ups ending, ticks, the policy's wake-ups)
and the replay's CPU microseconds per event step, which should stay flat as the run grows.
A run projected (from the size before it) past ``--limit`` CPU seconds is skipped and
its projection shown; one past ``--timeout`` wall seconds is stopped. Rows are merged
into docs/results/simulator_scale.csv (by policy and size; ``--no-write`` only prints),
each with its date, machine, load average and command.
Goals, for the 1M-job runs (``goals_met``): at most 300 CPU s (one core) and 4 GiB.
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_simulator import ROOT, in_subprocess

SIZES = (10_000, 100_000, 1_000_000)
CLUSTER, LOAD, SEED = "1250x8", 0.9, 1
GOAL_S, GOAL_MB = 300.0, 4096.0
CSV_PATH = ROOT / "docs" / "results" / "simulator_scale.csv"
FIELDS = ("date", "machine", "load", "command", "policy", "jobs", "gpus", "offered_load",
          "wall_s", "cpu_s", "load_cpu_s", "replay_cpu_s", "peak_rss_mb", "events", "rounds",
          "us_per_event", "us_per_job", "jct_mean_h", "goals_met")


def trace_file(jobs: int, folder: Path) -> Path:
    """The synthetic trace of ``jobs`` jobs for the cluster, generated once."""
    path = folder / f"synth_{CLUSTER}_load{LOAD:g}_seed{SEED}_{jobs}.csv.gz"
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "tfgshare.cli", "trace", "generate",
                        "--jobs", str(jobs), "--cluster", CLUSTER, "--load", str(LOAD),
                        "--seed", str(SEED), "--out", str(path)], check=True, cwd=ROOT)
    return path


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def row(policy: str, r: dict, load: str, command: str) -> dict:
    """One CSV row from ``one_run``'s figures."""
    cpu = r["cpu_s"] + r["load_cpu_s"]
    mb = r["peak_rss_mb"]
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{os.cpu_count()}-core VM", "load": load, "command": command,
        "policy": policy, "jobs": r["jobs"], "gpus": r["gpus"], "offered_load": LOAD,
        "wall_s": round(r["load_s"] + r["wall_s"], 1), "cpu_s": round(cpu, 1),
        "load_cpu_s": round(r["load_cpu_s"], 1), "replay_cpu_s": round(r["cpu_s"], 1),
        "peak_rss_mb": round(mb), "events": r["events"], "rounds": r["rounds"],
        "us_per_event": round(1e6 * r["cpu_s"] / max(1, r["events"]), 1),
        "us_per_job": round(1e6 * r["cpu_s"] / max(1, r["jobs"]), 1),
        "jct_mean_h": round(r["report"]["jct_mean"] / 3600, 2),
        "goals_met": ("" if r["jobs"] < max(SIZES) else
                      "yes" if cpu <= GOAL_S and mb <= GOAL_MB else "no"),
    }


HEAD = ["| policy | jobs | wall s | CPU s (load + replay) | peak MB | event steps "
        "| replay us/event | us/job | load avg (1/5/15 min) |",
        "|---|---|---|---|---|---|---|---|---|"]


def line(d: dict) -> str:
    return (f"| {d['policy']} | {int(d['jobs']):,} | {float(d['wall_s']):,.1f} "
            f"| {float(d['cpu_s']):,.1f} ({float(d['load_cpu_s']):,.1f} + "
            f"{float(d['replay_cpu_s']):,.1f}) | {int(d['peak_rss_mb']):,} "
            f"| {int(d['events']):,} | {float(d['us_per_event']):,.0f} "
            f"| {float(d['us_per_job']):,.0f} | {d['load']} |")


def scale(policies: list[str], sizes: tuple[int, ...], folder: Path, limit: float,
          command: str, timeout: float) -> list[dict]:
    """Every policy at every size (smallest first); a row per run made. A run projected
    past ``limit`` CPU seconds (from the size before) is skipped; one past ``timeout``
    wall seconds is stopped."""
    rows = []
    print("\n".join(HEAD), flush=True)
    for pol in policies:
        prev = None
        for n in sizes:
            if prev is not None:
                projected = float(prev["cpu_s"]) * n / int(prev["jobs"])
                if projected > limit:
                    print(f"| {pol} | {n:,} | not run (projected {projected:,.0f} CPU s) "
                          "| | | | | | |", flush=True)
                    break
            path = trace_file(n, folder)
            load0 = os.getloadavg()[0]
            r = in_subprocess(pol, None, CLUSTER, None, timeout=timeout, trace=str(path),
                              workload="measured")
            if r is None:
                print(f"| {pol} | {n:,} | > {timeout:,.0f} (stopped) | | | | | | |",
                      flush=True)
                break
            prev = row(pol, r, f"{load0:.1f} at start, {_load()} at end", command)
            rows.append(prev)
            print(line(prev), flush=True)
    return rows


def merge_csv(rows: list[dict], path: Path = CSV_PATH) -> None:
    """Write these rows into the CSV, replacing earlier rows of the same policy and size."""
    old = []
    if path.exists():
        with open(path, newline="") as f:
            old = list(csv.DictReader(f))
    keys = {(r["policy"], str(r["jobs"])) for r in rows}
    kept = [r for r in old if (r["policy"], r["jobs"]) not in keys] + rows
    order = {p: i for i, p in enumerate(("fifo", "sjf", "tiresias", "gandiva", "fgs"))}
    kept.sort(key=lambda r: (order.get(r["policy"], 99), int(r["jobs"])))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, lineterminator="\n")
        w.writeheader()
        w.writerows({k: r.get(k, "") for k in FIELDS} for r in kept)


def main(policies: list[str], argv: list[str], no_write: bool = False) -> int:
    """``bench_simulator.py --scale [--sizes ...] [--limit S] [--trace-dir D]``."""
    p = argparse.ArgumentParser(prog="bench_simulator.py --scale")
    p.add_argument("--sizes", default=",".join(map(str, SIZES)),
                   help="job counts, comma-separated (default 10000,100000,1000000)")
    p.add_argument("--limit", type=float, default=900.0,
                   help="skip a run projected past this many CPU seconds")
    p.add_argument("--timeout", type=float, default=2400.0,
                   help="stop a run past this many wall seconds")
    p.add_argument("--trace-dir", default=str(Path(tempfile.gettempdir()) / "tfgshare-scale"),
                   help="where the synthetic traces are generated (once; default: the "
                        "temp dir's tfgshare-scale)")
    args = p.parse_args(argv)
    sizes = tuple(int(x) for x in args.sizes.split(","))
    # the command as run, but where the traces are cached (a path on this machine: seeded,
    # so the traces are the same wherever they are written)
    shown = [a for a, before in zip(sys.argv[1:], [""] + sys.argv[1:])
             if a != "--trace-dir" and before != "--trace-dir"
             and not a.startswith("--trace-dir=")]
    command = " ".join(["tools/bench_simulator.py"] + shown)
    rows = scale(policies, sizes, Path(args.trace_dir), args.limit, command, args.timeout)
    if rows and not no_write:
        merge_csv(rows)
        print(f"rows merged into {CSV_PATH.relative_to(ROOT)}")
    return 0
