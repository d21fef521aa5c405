"""``tfgshare replay``: a trace slice, time-compressed, on a live cluster and in the simulator.

The jobs of the slice get a model and batch size from ``philly.mapping`` (the
simulator's seeded rule, on the job's original GPU-time) and a step count so that
``steps * step_time`` on the profiled device is the job's original duration divided by
the speed-up ``K`` (at least one step); arrivals are compressed by ``K`` too. A CPU
profile's step times are taken at a whole core (``step_time * cpu_share``, the share
its runner got while measured), so a profile measured on a busy machine does not
shrink the jobs to one step. GPU
counts are capped at ``--max-gpus-per-job`` (default 1: on virtual GPUs a job's
towers share the one CPU, so a wider job would not run at the profile's speed) and at
the live cluster's size. Each job is submitted to the running coordinator at its
compressed arrival time and followed to the end; the same jobs run through the
simulator with the same profile, the coordinator's policy and the live cluster's GPUs
(``replay_plan``): before the replay, to print its expected wall time (``--within``
chooses the speed-up from it), and after, beside the live figures of the replayed jobs.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import re
import statistics
import sys
import tempfile
import textwrap
from pathlib import Path

from tfgshare.metrics import Report, format_table, table_rows

from tfgshare.repro.replay_plan import (RUNNER_TICK_S, cap_gpus, choose_speedup,  # noqa: F401
                                        compress, compressed_jobs, expected_line,
                                        expected_wall_s, job_specs, live_cluster,
                                        mapped_slice, parse_as_model, parse_duration,
                                        simulate_same)


_STAMP = r"^(\d\d):(\d\d):(\d\d)\.(\d{3}) "
_DECIDED = re.compile(_STAMP + r".*\(attempt (\d+)\)$")
_EVENT = re.compile(_STAMP + r"\S+ #(\d+) (started|start_phases) (.*)$")


def say(text: str, file=None) -> None:
    """Print ``text`` wrapped at 100 columns, its later lines indented (a number keeps
    its unit: ``21.0 %`` is not split)."""
    print("\n".join(textwrap.fill(line.replace(" %", "\xa0%"), 100, subsequent_indent="  ",
                                   break_on_hyphens=False).replace("\xa0", " ")
                     for line in text.splitlines()), file=file or sys.stdout, flush=True)


def _seconds(m: re.Match) -> float:
    h, mi, s, ms = (int(x) for x in m.groups()[:4])
    return h * 3600 + mi * 60 + s + ms / 1000


def start_costs(lines: list[str], step_time_s: float) -> list[tuple[float, bool]]:
    """``(seconds, restored)`` per attempt in a job's coordinator log: from the start
    decision to the runner's ``started`` event, plus what its first step took beyond a
    plain step (``step_time_s``), i.e. what the simulator's ``startup_s`` stands for."""
    decided: dict[int, float] = {}
    started: dict[int, tuple[float, bool]] = {}
    first_step: dict[int, float] = {}
    for line in lines:
        m = _DECIDED.match(line)
        if m and " #" not in line:
            decided[int(m.group(5))] = _seconds(m)
            continue
        m = _EVENT.match(line)
        if not m:
            continue
        attempt, what, details = int(m.group(5)), m.group(6), m.group(7)
        fields = dict(kv.split("=", 1) for kv in details.split() if "=" in kv)
        if what == "started":
            started[attempt] = (_seconds(m), fields.get("restored") == "True")
        else:
            try:
                first_step[attempt] = float(fields.get("first_step_s", "nan"))
            except ValueError:
                pass
    out = []
    for attempt, (t, restored) in sorted(started.items()):
        if attempt not in decided:
            continue
        cost = (t - decided[attempt]) % 86400          # the stamps are times of day
        extra = first_step.get(attempt, math.nan)
        if math.isfinite(extra):
            cost += max(0.0, extra - step_time_s)
        out.append((cost, restored))
    return out


_CHECKPOINT = re.compile(_STAMP + r"\S+ #\d+ checkpoint .*\bseconds=([0-9.eE+-]+)")


def checkpoint_seconds(lines: list[str]) -> float:
    """Seconds a job's runners spent writing checkpoints, from its coordinator log."""
    return sum(float(m.group(5)) for m in map(_CHECKPOINT.match, lines) if m)


def live_startups(client, ids: list[str], jobs: list, profiles
                  ) -> tuple[dict[str, list[float]], dict[str, list[float]], list[dict]]:
    """Each model's measured fresh start-ups and restarts from a checkpoint
    (``start_costs``) over the live run's jobs, and where each finished job's time went
    (waiting, starting, checkpoints, training)."""
    by_name = {f"replay-{j.id}": j for j in jobs}
    out: dict[str, list[float]] = {}
    resumed: dict[str, list[float]] = {}
    spent = []
    for record in client.jobs():
        if record["id"] not in ids or record["name"] not in by_name:
            continue
        j = by_name[record["name"]]
        step = profiles.get(j.model, j.batch_size).step_time_s
        lines = client.logs(record["id"])
        costs = start_costs(lines, step)
        for cost, restored in costs:
            (resumed if restored else out).setdefault(j.model, []).append(cost)
        if record.get("finish_time"):
            jct = record["finish_time"] - record["submit_time"]
            starting = sum(c for c, _ in costs)
            saving = checkpoint_seconds(lines)
            spent.append({"job": j.id, "model": j.model, "steps": j.total_steps,
                          "jct_s": jct, "waiting_s": record["waited_s"],
                          "starts": len(costs), "starting_s": starting,
                          "checkpoints_s": saving,
                          "training_s": jct - record["waited_s"] - starting - saving})
    return out, resumed, spent


def time_spent_line(spent: list[dict]) -> str:
    """Mean JCT of the finished jobs split into waiting, starting, checkpoints, training."""
    if not spent:
        return "no job finished live"
    n = len(spent)
    parts = {k: sum(r[k] for r in spent) / n
             for k in ("jct_s", "waiting_s", "starting_s", "checkpoints_s", "training_s")}
    return (f"live JCT of the {n} finished jobs, mean {parts['jct_s']:.1f} s = waiting "
            f"{parts['waiting_s']:.1f} + starting {parts['starting_s']:.1f} + checkpoints "
            f"{parts['checkpoints_s']:.1f} + training and exit {parts['training_s']:.1f}")


def with_startups(profiles, startups: dict[str, list[float]],
                  resumed: dict[str, list[float]] | None = None):
    """``profiles`` with each model's ``startup_s`` set to the median of ``startups``
    (and its ``resume_startup_s`` to the median of ``resumed``, where measured)."""
    medians = {m: statistics.median(v) for m, v in startups.items() if v}
    resumes = {m: statistics.median(v) for m, v in (resumed or {}).items() if v}
    by_key = {}
    for k, p in profiles.by_key.items():
        if p.model in medians:
            p = dataclasses.replace(p, startup_s=medians[p.model])
        if p.model in resumes:
            p = dataclasses.replace(p, resume_startup_s=resumes[p.model])
        by_key[k] = p
    return dataclasses.replace(profiles, by_key=by_key)


def per_job_lines(spent: list[dict], sim_records: list, calibrated_records: list | None
                  ) -> str:
    """Each finished job's live JCT split (waiting, starts, checkpoints, training) beside
    its simulated waiting and run time (start-ups, moves and steps), to see where they
    part."""
    sim = {r.id: r for r in sim_records}
    cal = {r.id: r for r in calibrated_records or ()}
    head = (f"{'job':13} {'model':13} {'steps':>5} | {'live JCT':>8} {'wait':>6} "
            f"{'starts':>6} {'start s':>7} {'ckpt s':>6} {'train s':>7} | {'sim JCT':>7} "
            f"{'wait':>6} {'run':>6}")
    if cal:
        head += f" | {'cal JCT':>7} {'wait':>6} {'run':>6}"
    lines = [head]
    for r in spent:
        s = sim.get(r["job"])
        line = (f"{r['job']:13} {r['model']:13} {r.get('steps', 0):5d} | {r['jct_s']:8.1f} "
                f"{r['waiting_s']:6.1f} {r.get('starts', 0):6d} {r['starting_s']:7.1f} "
                f"{r['checkpoints_s']:6.1f} {r['training_s']:7.1f} | ")
        line += ("-" if s is None or s.finish_time is None else
                 f"{s.finish_time - s.submit_time:7.1f} {s.waited_s:6.1f} {s.run_time_s:6.1f}")
        c = cal.get(r["job"])
        if cal:
            line += (" | -" if c is None or c.finish_time is None else
                     f" | {c.finish_time - c.submit_time:7.1f} {c.waited_s:6.1f} "
                     f"{c.run_time_s:6.1f}")
        lines.append(line)
    return "\n".join(lines)


def profile_shares(path: Path) -> dict[str, float]:
    """Each model's ``cpu_share`` in a measured CPU profile (the share of its core its
    runner got while profiled; ``tfgshare profile``); empty where none was measured."""
    import yaml

    doc = yaml.safe_load(Path(path).read_text()) or {}
    return {str(m): float(spec["cpu_share"]) for m, spec in (doc.get("models") or {}).items()
            if isinstance(spec, dict) and isinstance(spec.get("cpu_share"), (int, float))
            and spec["cpu_share"] > 0}


def at_share(profiles, shares: dict[str, float], live_share: float):
    """``profiles`` with each profiled model's CPU-bound times (step, start-up, restart)
    scaled from the share of a core it had when profiled to ``live_share``: a runner on
    a virtual GPU computes at the share of its core it gets. The checkpoint bandwidth
    too (by the profile's median share): a runner's save is CPU-bound on this machine
    (vgg_16's 1.5 GB took 5.2 s at 0.99 of a core and 23-32 s at 0.21)."""
    if not 0 < live_share <= 1:
        raise ValueError(f"a CPU share must be in (0, 1], got {live_share!r}")
    by_key = {}
    for k, p in profiles.by_key.items():
        if p.model in shares:
            f = shares[p.model] / live_share
            p = dataclasses.replace(
                p, step_time_s=p.step_time_s * f, startup_s=p.startup_s * f,
                resume_startup_s=None if p.resume_startup_s is None else p.resume_startup_s * f)
        by_key[k] = p
    storage = profiles.storage_mb_s
    if storage and shares:
        storage *= live_share / statistics.median(shares.values())
    return dataclasses.replace(profiles, by_key=by_key, storage_mb_s=storage)


def side_by_side(live: Report, sim: Report, calibrated: Report | None = None,
                 at_live_share: Report | None = None) -> str:
    """Live and simulated figures per line, with the relative difference; ``at_live_share``
    (the profile at the CPU share the live runners got) and ``calibrated`` (the start-ups
    measured live) as two more columns each when given."""
    fields = [("jobs finished", "finished", 1), ("JCT mean s", "jct_mean", 1),
              ("JCT median s", "jct_median", 1), ("JCT p95 s", "jct_p95", 1),
              ("wait mean s", "wait_mean", 1), ("makespan s", "makespan", 1),
              ("allocated util %", "util_allocated", 100),
              ("effective util %", "util_effective", 100),
              ("suspends", "suspends", 1), ("migrations", "migrations", 1)]
    for extra in ("util_device", "util_device_busy"):      # the operator's figures, if defined
        if hasattr(live, extra) and hasattr(sim, extra):
            fields.append((f"{extra.replace('_', ' ')} %", extra, 100))

    def diff(a: float, b: float) -> str:
        d = (b - a) / a if a and not (math.isnan(a) or math.isnan(b)) else math.nan
        return f"{100 * d:+8.1f}%" if not math.isnan(d) else f"{'-':>9}"

    extra = [(h, r) for h, r in (("live share", at_live_share), ("start-ups", calibrated))
             if r is not None]
    head = f"{'':18} {'live':>10} {'simulated':>10} {'vs live':>9}"
    second = f"{'':18} {'':>10} {'(profile)':>10} {'':>9}"
    for h, _ in extra:
        head += f" {'sim, live':>10} {'vs live':>9}"
        second += f" {h:>10} {'':>9}"
    lines = [head, second] if extra else [head]
    for name, attr, scale in fields:
        a, b = scale * getattr(live, attr), scale * getattr(sim, attr)
        line = f"{name:18} {a:10.1f} {b:10.1f} {diff(a, b)}"
        for _, r in extra:
            c = scale * getattr(r, attr)
            line += f" {c:10.1f} {diff(a, c)}"
        lines.append(line)
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tfgshare replay",
        description="Replay a trace slice, compressed K times, on a running coordinator, and "
                    "the same slice in the simulator; print both side by side.")
    p.add_argument("--trace", default="philly", help="'philly' or a trace file")
    p.add_argument("--coordinator", default=None, help="coordinator address "
                   "(default $TFGSHARE_COORDINATOR or tcp://127.0.0.1:5555)")
    pace = p.add_mutually_exclusive_group(required=True)
    pace.add_argument("--speedup", type=float,
                      help="K: arrivals and durations are divided by K")
    pace.add_argument("--within", metavar="DURATION",
                      help="choose K so that the simulator expects the replay to finish "
                           "within DURATION (e.g. 10m, 90s, 1h)")
    p.add_argument("--jobs", type=int, default=None, help="the N earliest jobs of the slice")
    p.add_argument("--start", default=None, help="jobs submitted from here (s or ISO date)")
    p.add_argument("--end", default=None, help="jobs submitted before this")
    p.add_argument("--vc", default=None, help="only jobs of these VCs (comma-separated)")
    p.add_argument("--profile", default=None,
                   help="profile of the live devices (default: the CPU profile shipped in "
                        "tfgshare/data/profiles/cpu-virtual-gpu.yaml)")
    p.add_argument("--seed", type=int, default=0, help="seed of the model mapping")
    p.add_argument("--as-model", default=None, metavar="MODEL:BATCH",
                   help="run every job as this profiled model and batch size (a fast "
                        "stand-in such as lenet:8; MODEL alone: its smallest profiled "
                        "batch; durations are kept)")
    p.add_argument("--max-gpus-per-job", type=int, default=1,
                   help="cap on a job's GPU count (default 1, see the module doc)")
    p.add_argument("--timeout", type=float, default=3600.0,
                   help="give up following after this many seconds (default 3600)")
    p.add_argument("--out", default=None, help="output folder (default: a new temp folder)")
    return p


def default_live_profile() -> Path:
    """The CPU profile of this project's virtual GPUs, shipped with tfgshare."""
    from importlib import resources
    return Path(str(resources.files("tfgshare") / "data" / "profiles" / "cpu-virtual-gpu.yaml"))


def main(argv: list[str] | None = None, share_probe=None) -> int:
    """Run the replay command; 0 when every job finished, 1 otherwise, 2 on bad input.

    ``share_probe`` (a ``cpushare.RunnerShareProbe`` on the live cluster's agent, which
    only a caller on the same machine has, e.g. ``tools/replay_local.py``) measures the
    CPU share the live runners got; the profile is then also simulated at that share."""
    from tfgshare.client.api import Client, ClientError
    from tfgshare.sim.cli import time_arg
    from tfgshare.sim.profiles import load_profiles

    args = _parser().parse_args(argv)
    try:
        if args.jobs is not None and args.jobs < 1:
            raise ValueError(f"--jobs must be >= 1, got {args.jobs}")
        profile_path = Path(args.profile) if args.profile else default_live_profile()
        profiles = load_profiles(profile_path)
        shares = profile_shares(profile_path)
        vcs = [v.strip() for v in args.vc.split(",")] if args.vc else None
        as_model = parse_as_model(args.as_model, profiles) if args.as_model else None
        within_s = parse_duration(args.within) if args.within else None
        compress([], profiles, args.speedup or 1.0, max_gpus=args.max_gpus_per_job)  # checks
        mapped = mapped_slice(args.trace, profiles, num_jobs=args.jobs,
                              start=time_arg(args.start), end=time_arg(args.end), vcs=vcs,
                              seed=args.seed, as_model=as_model)
    except (ValueError, KeyError, FileNotFoundError) as err:
        msg = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"tfgshare replay: error: {msg}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="tfgshare-replay-"))
    try:
        with Client(args.coordinator, timeout_s=10.0) as client:
            cluster = live_cluster(client.nodes())
            spec = cluster.spec
            policy = client.status()["policy"]

            def plan(speedup: float) -> list:
                return cap_gpus(compress(mapped, profiles, speedup,
                                         max_gpus=args.max_gpus_per_job, shares=shares),
                                cluster.num_gpus)

            if within_s is not None:
                args.speedup, _ = choose_speedup(within_s, lambda k: expected_wall_s(
                    simulate_same(plan(k), profiles, policy, cluster, args.seed)))
            jobs = plan(args.speedup)
            sim = simulate_same(jobs, profiles, policy, cluster, args.seed)
            say(f"replaying {len(jobs)} jobs at speed-up {args.speedup:g} on {client.address}"
                f": {cluster.text}, policy {policy}; trace time "
                f"{sum(j.duration for j in jobs) * args.speedup / 3600:.1f} GPU-h",
                file=sys.stderr)
            say(expected_line(expected_wall_s(sim), args.speedup, args.within),
                file=sys.stderr)
            from .live import run_report_of, run_schedule
            if share_probe is not None:
                share_probe.start()
            try:
                run = run_schedule(client, job_specs(jobs, profiles), args.timeout)
            finally:
                live_share = share_probe.stop() if share_probe is not None else None
            metrics = client.metrics()
            startups, resumed, spent = live_startups(client, run.ids, jobs, profiles)
    except (ClientError, ValueError) as err:
        print(f"tfgshare replay: error: {err}", file=sys.stderr)
        return 2
    live, others = run_report_of(metrics, run)
    if others:
        say(f"the coordinator also ran {others} other jobs: the live row counts the "
            f"{len(run.ids)} replayed ones (its utilisations are over its whole run)")
    calibrated = simulate_same(jobs, with_startups(profiles, startups, resumed), policy,
                               cluster, args.seed)
    at_live = None
    if live_share and shares:
        at_live = simulate_same(jobs, at_share(profiles, shares, live_share), policy,
                                cluster, args.seed)
        used = sorted({j.model for j in jobs})
        say(f"CPU share of the live runners: {live_share:.3f} ({share_probe.ran:.0f} CPU s "
            f"run, {share_probe.waited:.0f} s waited while other work ran on their cores, "
            f"{share_probe.waited_total:.0f} s waited in all, co-tenants included); of the "
            "profile's runners: "
            + ", ".join(f"{m} {shares[m]:.3f}" for m in used if m in shares))
    elif share_probe is not None:
        say("CPU share of the live runners: "
            + ("not measured" if not live_share else
               f"{live_share:.3f}; the profile has none (profiled before shares were)"))
    for model, costs in sorted(startups.items()):
        prof = profiles.get(*next(k for k in profiles.by_key if k[0] == model))
        line = (f"start-up of {model}: live median {statistics.median(costs):.1f} s over "
                f"{len(costs)} fresh starts (min {min(costs):.1f}, max {max(costs):.1f}); "
                f"profile {prof.startup_s:.1f} s")
        if resumed.get(model):
            line += (f"; restarts: live median {statistics.median(resumed[model]):.1f} s over "
                     f"{len(resumed[model])}, profile "
                     + ("-" if prof.resume_startup_s is None else f"{prof.resume_startup_s:.1f} s"))
        say(line)
    say(time_spent_line(spent))
    out.mkdir(parents=True, exist_ok=True)
    (out / "per_job.txt").write_text(
        per_job_lines(spent, (at_live or sim).records, calibrated.records) + "\n")
    say(f"each job's live time beside its simulated one: {out / 'per_job.txt'}")
    code = write_report(out, args, jobs, run, metrics, live, sim, policy, spec,
                        calibrated, startups, spent, resumed, at_live, live_share)
    if share_probe is not None:      # what the runners used, which the load does not change
        doc = json.loads((out / "report.json").read_text())
        doc["live_runner_cpu_s"] = {"ran": share_probe.ran, "waited": share_probe.waited,
                                    "waited_total": share_probe.waited_total}
        (out / "report.json").write_text(json.dumps(doc, indent=2, default=str))
    return code


def per_job(live_jobs: list[dict], sim_records: list) -> list[dict]:
    """Each trace job's live and simulated JCT (None where it did not finish)."""
    sim = {r.id: r.jct for r in sim_records}
    out = []
    for j in live_jobs:
        trace_id = j["name"].removeprefix("replay-")
        live = j["finish_time"] - j["submit_time"] if j.get("finish_time") else None
        out.append({"job": trace_id, "model": j["model"], "state": j["state"],
                    "live_jct_s": live, "sim_jct_s": sim.get(trace_id)})
    return out


def write_report(out: Path, args, jobs: list, run, metrics: dict, live: Report, sim,
                 policy: str, spec: str, calibrated=None,
                 startups: dict[str, list[float]] | None = None,
                 spent: list[dict] | None = None,
                 resumed: dict[str, list[float]] | None = None,
                 at_live=None, live_share: float | None = None) -> int:
    """Print and write report.csv / report.json (the simulate report's form, live + sim,
    and the simulator again with the start-ups measured live when given)."""
    out.mkdir(parents=True, exist_ok=True)
    reports = {f"{policy} live": live, f"{policy} sim": sim.report}
    if at_live is not None:
        reports[f"{policy} sim (live CPU share)"] = at_live.report
    if calibrated is not None:
        reports[f"{policy} sim (live start-ups)"] = calibrated.report
    print(format_table(reports, baseline=f"{policy} live"))
    print()
    print(side_by_side(live, sim.report, calibrated.report if calibrated else None,
                       at_live.report if at_live else None))
    rows = table_rows(reports, baseline=f"{policy} live")
    with open(out / "report.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
        writer.writeheader()
        writer.writerows(rows)
    def rel(report) -> float | None:
        return (report.jct_mean - live.jct_mean) / live.jct_mean \
            if live.jct_mean and not math.isnan(live.jct_mean) else None
    diff = rel(sim.report)
    diff_cal = rel(calibrated.report) if calibrated is not None else None
    diff_share = rel(at_live.report) if at_live is not None else None
    pairs = per_job(run.jobs, sim.records)
    sims = {"profile": sim, "live CPU share": at_live, "live start-ups": calibrated}
    finished_only = {}
    for name, result in sims.items():
        if result is None:
            continue
        both = [p for p in per_job(run.jobs, result.records)
                if p["live_jct_s"] is not None and p["sim_jct_s"] is not None]
        if both and len(both) < len(jobs):   # a run cut short: compare the jobs that finished
            a = sum(p["live_jct_s"] for p in both) / len(both)
            b = sum(p["sim_jct_s"] for p in both) / len(both)
            finished_only[name] = (b - a) / a
            say(f"over the {len(both)} jobs finished live: mean JCT live {a:.0f} s, "
                f"simulated ({name}) {b:.0f} s ({100 * (b - a) / a:+.1f} %)")
    doc = {
        "trace": args.trace, "speedup": args.speedup, "cluster": spec, "policy": policy,
        "jobs": len(jobs), "seed": args.seed, "live_wall_s": run.wall_s,
        "timed_out": run.timed_out, "jct_mean_sim_vs_live": diff,
        "jct_mean_sim_live_startups_vs_live": diff_cal,
        "jct_mean_sim_live_share_vs_live": diff_share, "live_cpu_share": live_share,
        "jct_mean_vs_live_over_jobs_finished_live": finished_only,
        "live_startups_s": startups or {},
        "live_restarts_s": resumed or {},
        "live_time_spent": spent or [],
        "live": {"report": live.as_dict(),
                 "jobs": [r for r in metrics["jobs"] if r.get("job") in set(run.ids)]},
        "sim": {"report": sim.report.as_dict(),
                "jobs": [dataclasses.asdict(r) for r in sim.records]},
        "sim_live_share": None if at_live is None else {
            "report": at_live.report.as_dict(),
            "jobs": [dataclasses.asdict(r) for r in at_live.records]},
        "sim_live_startups": None if calibrated is None else {
            "report": calibrated.report.as_dict(),
            "jobs": [dataclasses.asdict(r) for r in calibrated.records]},
        "mapping": [dataclasses.asdict(j) for j in jobs],
        "per_job": pairs,
    }
    (out / "report.json").write_text(json.dumps(doc, indent=2, default=str))
    states = [j["state"] for j in run.jobs]
    say(f"live: {states.count('finished')}/{len(jobs)} finished in {run.wall_s:.0f} s; "
        f"mean JCT simulated vs live: "
        + ("-" if diff is None else f"{100 * diff:+.1f} %")
        + ("" if diff_share is None else
           f" (at the live CPU share {live_share:.2f}: {100 * diff_share:+.1f} %)")
        + ("" if diff_cal is None else f" (with the live start-ups: {100 * diff_cal:+.1f} %)")
        + f"; wrote {out}")
    return 0 if states.count("finished") == len(jobs) and not run.timed_out else 1
