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
from tfgshare.textfit import terminal_width

from .cluster import load_cluster
from .config import SimConfig
from .engine import simulate
from .job import SimResult, SimulationError
from .profiles import load_profiles, published_profiles_path
from .utilisation import DEFAULT_WORKLOAD, WORKLOADS
from .workload import STEPS_FROM, is_alibaba, load_workload

DEFAULT_POLICIES = ("fifo", "sjf", "tiresias", "gandiva", "fgs")
UNITS = {"times": "seconds", "utilisation": "fraction of all GPUs (0-1)",
         "decide p50_ms/p99_ms": "milliseconds", "wall_s": "seconds"}
JOB_COLUMNS = ("policy", "job", "num_gpus", "submit_s", "first_start_s", "finish_s", "jct_s",
               "wait_s", "preemptions", "resumes", "migrations", "move_cost_s")


def _parser() -> argparse.ArgumentParser:
    from tfgshare.policies.registry import POLICY_NAMES
    p = argparse.ArgumentParser(
        prog="tfgshare simulate",
        description="Replay a trace under several scheduling policies on a simulated cluster "
                    "and compare them (ratios against fifo, or the first policy listed).")
    p.add_argument("--trace", default="philly",
                   help="'philly' (the shipped Philly trace), 'alibaba-2023' (Alibaba's "
                        "GPU-sharing trace, its pods with a GPU) or a trace file: Philly, "
                        "Tiresias, Helios CSV or an Alibaba pod list (default: philly)")
    p.add_argument("--cluster", default=None,
                   help="philly, philly-revised, vc:<name>, alibaba-2023, NxG[:MEM] (e.g. 64x8), "
                        "a YAML file, an Alibaba node list CSV or a shipped cluster name "
                        "(default: the trace's own cluster: philly, vc:<VC> with one --vc, "
                        "alibaba-2023 for that trace)")
    p.add_argument("--policy", default=",".join(DEFAULT_POLICIES),
                   help=f"comma-separated policies, of {','.join(POLICY_NAMES)} "
                        f"(default: {','.join(DEFAULT_POLICIES)})")
    p.add_argument("--placement", default=None, metavar="RULE[,RULE...]",
                   help="run fifo and sjf with these GPU-sharing placement rules instead of "
                        "whole GPUs, a row per order and rule (fifo/fgd, sjf/best-fit, ...): "
                        "random-fit, best-fit, dot-product, packing, clustering, fgd (FGD, "
                        "Weng et al. ATC '23); other policies keep their own placement")
    p.add_argument("--policy-param", action="append", default=[], metavar="[POLICY.]KEY=VALUE",
                   help="set a policy parameter (e.g. tiresias.thresholds=3250,7200 or "
                        "promote_knob=4 for every listed policy that has it); repeatable")
    p.add_argument("--sim-param", action="append", default=[], metavar="KEY=VALUE",
                   help="set a simulator knob of SimConfig (e.g. refresh_s=60, "
                        "storage_mb_s=500, step_noise=0); repeatable")
    p.add_argument("--jobs", type=int, default=None, help="replay only the N earliest jobs")
    p.add_argument("--seed", type=int, default=0, help="seed for model mapping and noise")
    p.add_argument("--out", default=None, help="output folder (default: a new temp folder)")
    p.add_argument("--vc", default=None, help="only jobs of these VCs (comma-separated)")
    p.add_argument("--start", default=None,
                   help="only jobs submitted from here (seconds, or an ISO date-time)")
    p.add_argument("--end", default=None, help="only jobs submitted before this")
    p.add_argument("--time-compression", type=float, default=1.0,
                   help="arrivals come this many times faster (default 1)")
    p.add_argument("--workload", choices=WORKLOADS, default=DEFAULT_WORKLOAD,
                   help="workload model: 'measured' (default) draws each job's GPU "
                        "utilisation from Philly's published per-size figures and takes "
                        "step times and memory from published measurements "
                        "(data/profiles/published.yaml); 'profile' runs every job at its "
                        "model profile's utilisation (data/model_profiles.yaml, P100 "
                        "estimates), the model of earlier versions")
    p.add_argument("--profile", "--profiles", dest="profiles", default=None,
                   help="model profile YAML, e.g. one `tfgshare profile` wrote (default: the "
                        "workload model's); a measured profile's co-location fit and "
                        "checkpoint bandwidth are used too")
    p.add_argument("--tick", type=float, default=60.0,
                   help="seconds between policy calls while jobs wait (default 60); fifo, "
                        "tiresias and fgs are called at events and their own timed events "
                        "instead (demotions, promotions, minimum runs ending), as a "
                        "coordinator ticking every second would find them")
    p.add_argument("--storage-mb-s", type=float, default=None,
                   help=f"checkpoint bandwidth in MB/s (default: the profile's measured one, "
                        f"else {SimConfig.storage_mb_s:g})")
    p.add_argument("--cross-node-slowdown", type=float, default=SimConfig.cross_node_slowdown,
                   help="locality model: step-time penalty (fraction) when a job's GPUs span "
                        f"nodes; 0 = off, as in the Tiresias simulator's count placement "
                        f"(default {SimConfig.cross_node_slowdown})")
    p.add_argument("--startup-s", type=float, default=None,
                   help="seconds every (re)start takes before its first step "
                        "(default: each model's profile)")
    p.add_argument("--checkpoint-s", type=float, default=None,
                   help="seconds each checkpoint save or restore takes "
                        "(default: checkpoint size / --storage-mb-s)")
    p.add_argument("--zero-move-costs", action="store_true",
                   help="free starts, suspends and resumes (--startup-s 0 --checkpoint-s 0)")
    p.add_argument("--steps-from", choices=STEPS_FROM, default="duration",
                   help="a named-model job's step count: from its duration on the reference GPU "
                        "(default, as the Tiresias simulator) or the trace's iterations")
    p.add_argument("--jobs-out", default=None, metavar="FILE",
                   help="write every job's submit, start, finish, JCT, wait, preemptions and "
                        "moves (seconds) to this CSV, a row per policy and job")
    p.add_argument("--check", action="store_true",
                   help="validate every decision and invariant (slow)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--wide", action="store_true",
                   help="every column of the report table, however wide (default: the "
                        "terminal's width, 100 columns when not a terminal)")
    return p


def with_placements(names: list[str], placement: str | None) -> list[str]:
    """The policies to run: fifo and sjf once per ``--placement`` rule (``fifo/fgd``)."""
    if not placement:
        return names
    from tfgshare.policies.share_order import ORDERS
    from tfgshare.policies.share_rules import RULE_NAMES
    rules = [r.strip() for r in placement.split(",") if r.strip()]
    bad = [r for r in rules if r not in RULE_NAMES]
    if bad or not rules:
        raise ValueError(f"--placement {placement!r}: valid rules are {', '.join(RULE_NAMES)}")
    if not any(n in ORDERS for n in names):
        raise ValueError(f"--placement applies to {' and '.join(ORDERS)}; --policy names "
                         f"neither ({', '.join(names)} keep their own placement)")
    out: list[str] = []
    for n in names:
        out += [f"{n}/{r}" for r in rules] if n in ORDERS else [n]
    return out


def time_arg(value: str | None) -> float | str | None:
    """A --start/--end flag: seconds as a float, else the text (a date), None when absent."""
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

    from tfgshare.policies.registry import get_policy, policy_params

    names = [n.strip() for n in args.policy.split(",") if n.strip()]
    if not names:
        raise ValueError("--policy needs at least one policy name")
    names = with_placements(names, args.placement)
    policies = {n: get_policy(n, **params)
                for n, params in _policy_params(names, args.policy_param).items()}
    vcs = [v.strip() for v in args.vc.split(",")] if args.vc else None
    spec = args.cluster or (f"vc:{vcs[0]}" if vcs and len(vcs) == 1 else
                            "alibaba-2023" if is_alibaba(args.trace) else "philly")
    if args.jobs is not None and args.jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {args.jobs}")
    if args.tick <= 0:
        raise ValueError(f"--tick must be positive, got {args.tick}")
    cluster = load_cluster(spec)
    profiles = load_profiles(args.profiles or (published_profiles_path()
                                               if args.workload == "measured" else None))
    knobs = dict(profiles.sim_overrides())   # a measured profile's co-location and bandwidth
    if args.storage_mb_s is not None:
        knobs["storage_mb_s"] = args.storage_mb_s
    knobs.update(seed=args.seed, tick_s=args.tick,
                 check=args.check, cross_node_slowdown=args.cross_node_slowdown,
                 startup_s=0.0 if args.zero_move_costs else args.startup_s,
                 checkpoint_s=0.0 if args.zero_move_costs else args.checkpoint_s)
    knobs.update(_sim_params(args.sim_param))
    config = SimConfig(**knobs)
    work = load_workload(args.trace, profiles, cluster.num_gpus, seed=args.seed,
                         num_jobs=args.jobs, vcs=vcs, start=time_arg(args.start),
                         end=time_arg(args.end), time_compression=args.time_compression,
                         steps_from=args.steps_from, workload=args.workload)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="tfgshare-sim-"))
    out.mkdir(parents=True, exist_ok=True)
    console = Console(stderr=True)
    console.print(f"{len(work.jobs)} jobs on {cluster.name} ({cluster.num_gpus} GPUs); "
                  f"cross-node slowdown {config.cross_node_slowdown:g}, start-up "
                  f"{'per profile' if config.startup_s is None else f'{config.startup_s:g} s'}, "
                  f"checkpoint {'by bandwidth' if config.checkpoint_s is None else f'{config.checkpoint_s:g} s'}")
    for line in work.summary_lines():
        console.print(line)

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
    print(format_table(reports, baseline=baseline, width=None if args.wide else terminal_width(),
                       wide_hint="--wide shows them; report.csv has every figure"))
    if all(r.wait_mean < 1.0 for r in reports.values()):
        print(f"note: no job waited on {cluster.name} ({cluster.num_gpus} GPUs), so every "
              "policy starts each job at once and the rows differ little; a --cluster with "
              "fewer GPUs than the trace keeps busy makes jobs queue")
    print("report.csv and report.json give times in seconds and utilisations as fractions")
    rows = table_rows(reports, baseline=baseline)
    with open(out / "report.csv", "w", newline="") as f:
        keys = list(dict.fromkeys(k for row in rows for k in row))
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)
    doc = {
        "trace": args.trace, "workload": args.workload, "profile": profiles.path,
        "cluster": cluster.name, "num_gpus": cluster.num_gpus,
        "jobs": total, "left_out_too_wide": len(work.too_wide), "seed": args.seed,
        "baseline": baseline, "units": UNITS,
        "dropped": dict(work.dropped), "changed": dict(work.changed), "notes": work.notes,
        "sim_config": {k: v for k, v in vars(config).items() if k != "colocation"},
        "policy_params": {n: {k: getattr(p, k) for k in policy_params(n)}
                          for n, p in policies.items()},
        "policies": {n: {"report": r.report.as_dict(),
                         "ratios": {k: (None if v != v else v)
                                    for k, v in ratios(r.report, reports[baseline]).items()},
                         "decide": decide_stats(r), "wall_s": r.wall_s,
                         "oom_starts": r.oom_starts, "tick_s": r.tick_s}
                     for n, r in results.items()},
    }
    (out / "report.json").write_text(json.dumps(doc, indent=2, default=str))
    if args.jobs_out:
        write_jobs(results, args.jobs_out)
    if not args.no_plots:
        from .plots import write_plots
        write_plots(results, cluster.num_gpus, out)
    print(f"wrote report.csv, report.json{'' if args.no_plots else ' and plots'} to {out}")
    return 0


def write_jobs(results: dict[str, SimResult], path: str | Path) -> None:
    """Every job of every run as CSV rows (times in seconds; preemptions = suspends)."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(JOB_COLUMNS)
        for name, r in results.items():
            for j in r.records:
                w.writerow([name, j.id, j.num_gpus, j.submit_time, _num(j.first_start),
                            _num(j.finish_time), _num(j.jct), j.waited_s, j.suspends, j.resumes,
                            j.migrations, j.move_cost_s])


def _num(x: float | None) -> str | float:
    return "" if x is None else x


def _value(text: str):
    """A KEY=VALUE value: a number, a comma list of numbers (a tuple), true/false/none."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    try:
        if "," in text:
            return tuple(float(x) for x in text.split(",") if x.strip())
        n = float(text)
        return int(n) if n.is_integer() and "." not in text and "e" not in low else n
    except ValueError:
        return text


def _pairs(items: list[str], flag: str) -> list[tuple[str, object]]:
    out = []
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"{flag} {item!r}: expected KEY=VALUE")
        out.append((key.strip(), _value(value)))
    return out


def _policy_params(names: list[str], items: list[str]) -> dict[str, dict]:
    """Parameters for each listed policy from ``[POLICY.]KEY=VALUE`` items."""
    from tfgshare.policies.registry import policy_params
    known = {n: policy_params(n) for n in names}          # unknown names fail here
    out: dict[str, dict] = {n: {} for n in names}
    for key, value in _pairs(items, "--policy-param"):
        target, dot, field = key.rpartition(".")
        if dot:
            if target not in known:
                raise ValueError(f"--policy-param {key}: policy {target!r} is not in --policy")
            targets = [target]
        else:
            targets = [n for n in names if field in known[n]]
            if not targets:
                raise ValueError(f"--policy-param {key}: no listed policy has parameter "
                                 f"{field!r}")
        for n in targets:
            if field not in known[n] or field.startswith("_"):
                raise ValueError(f"--policy-param {key}: policy {n!r} has no parameter "
                                 f"{field!r}; valid: "
                                 f"{', '.join(k for k in known[n] if not k.startswith('_'))}")
            out[n][field] = value
    return out


def _sim_params(items: list[str]) -> dict[str, object]:
    """SimConfig fields from ``KEY=VALUE`` items."""
    import dataclasses
    fields = {f.name for f in dataclasses.fields(SimConfig)} - {"colocation"}
    out = {}
    for key, value in _pairs(items, "--sim-param"):
        if key not in fields:
            raise ValueError(f"--sim-param {key}: unknown; valid: {', '.join(sorted(fields))}")
        out[key] = value
    return out
