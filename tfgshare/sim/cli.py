"""``tfgshare simulate``: replay a trace under several policies and compare them."""

from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from tfgshare.metrics import format_table, ratios, table_rows

from .cluster import load_cluster
from .config import SimConfig
from .engine import SimResult, SimulationError, simulate
from .profiles import load_profiles
from .workload import load_workload


def _parser() -> argparse.ArgumentParser:
    from tfgshare.policies.registry import POLICY_NAMES
    p = argparse.ArgumentParser(
        prog="tfgshare simulate",
        description="Replay a trace under several scheduling policies on a simulated cluster "
                    "and compare them (ratios against fifo, or the first policy listed).")
    p.add_argument("--trace", default="philly",
                   help="'philly' (the shipped Philly trace) or a trace file (default: philly)")
    p.add_argument("--cluster", default=None,
                   help="philly, philly-revised, vc:<name>, NxG[:MEM] (e.g. 64x8), a YAML file "
                        "or a shipped cluster name (default: philly, or vc:<VC> with one --vc)")
    p.add_argument("--policy", default=",".join(POLICY_NAMES),
                   help=f"comma-separated policies (default: {','.join(POLICY_NAMES)})")
    p.add_argument("--jobs", type=int, default=None, help="replay only the N earliest jobs")
    p.add_argument("--seed", type=int, default=0, help="seed for model mapping and noise")
    p.add_argument("--out", default=None, help="output folder (default: a new temp folder)")
    p.add_argument("--vc", default=None, help="only jobs of these VCs (comma-separated)")
    p.add_argument("--start", default=None,
                   help="only jobs submitted from here (seconds, or an ISO date-time)")
    p.add_argument("--end", default=None, help="only jobs submitted before this")
    p.add_argument("--time-compression", type=float, default=1.0,
                   help="arrivals come this many times faster (default 1)")
    p.add_argument("--profile", "--profiles", dest="profiles", default=None,
                   help="model profile YAML, e.g. one `tfgshare profile` wrote (default: the "
                        "shipped one); a measured profile's co-location fit and checkpoint "
                        "bandwidth are used too")
    p.add_argument("--tick", type=float, default=60.0,
                   help="seconds between policy calls while jobs wait (default 60)")
    p.add_argument("--storage-mb-s", type=float, default=None,
                   help=f"checkpoint bandwidth in MB/s (default: the profile's measured one, "
                        f"else {SimConfig.storage_mb_s:g})")
    p.add_argument("--check", action="store_true",
                   help="validate every decision and invariant (slow)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    return p


def _time_arg(value: str | None) -> float | str | None:
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return value


def decide_stats(result: SimResult) -> dict[str, float]:
    """Policy call cost per round: p50 and p99 in milliseconds, and the count."""
    d = np.frombuffer(result.decide_s, dtype=float)
    if not len(d):
        return {"rounds": 0, "p50_ms": 0.0, "p99_ms": 0.0}
    return {"rounds": int(len(d)), "p50_ms": float(np.percentile(d, 50) * 1e3),
            "p99_ms": float(np.percentile(d, 99) * 1e3)}


def main(argv: list[str] | None = None) -> int:
    """Run the simulate command; 0 on success, 2 on bad input, 1 if a run fails."""
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except (ValueError, KeyError, FileNotFoundError) as err:
        msg = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"tfgshare simulate: error: {msg}", file=sys.stderr)
        return 2
    except SimulationError as err:
        print(f"tfgshare simulate: simulation failed: {err}", file=sys.stderr)
        return 1


def _run(args) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, \
        TimeElapsedColumn

    from tfgshare.policies.registry import get_policy

    names = [n.strip() for n in args.policy.split(",") if n.strip()]
    if not names:
        raise ValueError("--policy needs at least one policy name")
    policies = {n: get_policy(n) for n in names}          # unknown names fail here
    vcs = [v.strip() for v in args.vc.split(",")] if args.vc else None
    spec = args.cluster or (f"vc:{vcs[0]}" if vcs and len(vcs) == 1 else "philly")
    if args.jobs is not None and args.jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {args.jobs}")
    if args.tick <= 0:
        raise ValueError(f"--tick must be positive, got {args.tick}")
    cluster = load_cluster(spec)
    profiles = load_profiles(args.profiles)
    measured = profiles.sim_overrides()
    if args.storage_mb_s is not None:
        measured["storage_mb_s"] = args.storage_mb_s
    config = SimConfig(seed=args.seed, tick_s=args.tick, check=args.check, **measured)
    work = load_workload(args.trace, profiles, cluster.num_gpus, seed=args.seed,
                         num_jobs=args.jobs, vcs=vcs, start=_time_arg(args.start),
                         end=_time_arg(args.end), time_compression=args.time_compression)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="tfgshare-sim-"))
    out.mkdir(parents=True, exist_ok=True)
    console = Console(stderr=True)
    console.print(f"{len(work.jobs)} jobs on {cluster.name} ({cluster.num_gpus} GPUs)"
                  + (f"; {len(work.too_wide)} jobs wider than the cluster left out"
                     if work.too_wide else ""))

    results: dict[str, SimResult] = {}
    total = len(work.jobs)
    step = max(1, total // 200)
    with Progress(TextColumn("{task.description:>10}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=False) as bar:
        for name, policy in policies.items():
            task = bar.add_task(name, total=total)

            def tick(done: int, _total: int, task=task) -> None:
                if done % step == 0 or done == _total:
                    bar.update(task, completed=done)
            results[name] = simulate(cluster, work.jobs, profiles, policy, config, tick)
            bar.update(task, completed=total)

    reports = {n: r.report for n, r in results.items()}
    baseline = "fifo" if "fifo" in reports else names[0]
    print(format_table(reports, baseline=baseline))
    rows = table_rows(reports, baseline=baseline)
    with open(out / "report.csv", "w", newline="") as f:
        keys = list(dict.fromkeys(k for row in rows for k in row))
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)
    doc = {
        "trace": args.trace, "cluster": cluster.name, "num_gpus": cluster.num_gpus,
        "jobs": total, "left_out_too_wide": len(work.too_wide), "seed": args.seed,
        "baseline": baseline,
        "policies": {n: {"report": r.report.as_dict(),
                         "ratios": {k: (None if v != v else v)
                                    for k, v in ratios(r.report, reports[baseline]).items()},
                         "decide": decide_stats(r), "wall_s": r.wall_s,
                         "oom_starts": r.oom_starts}
                     for n, r in results.items()},
    }
    (out / "report.json").write_text(json.dumps(doc, indent=2))
    if not args.no_plots:
        from .plots import write_plots
        write_plots(results, cluster.num_gpus, out)
    print(f"wrote report.csv, report.json{'' if args.no_plots else ' and plots'} to {out}")
    return 0
