"""Our simulator against the Tiresias authors' simulator on the same Tiresias-CSV trace.

Run (their checkout and a Python 2.7 with numpy are yours to provide; this
fetches nothing)::

    .venv/bin/python tools/compare_tiresias.py --tiresias /path/to/Tiresias \\
        --python /path/to/python2.7 --trace philly-5k.csv --nodes 32

For each pair (their ``--schedule`` / our policy: ``fifo`` / ``fifo``,
``dlas-gpu`` / ``tiresias``) it runs their ``run_sim.py --scheme=count`` on a
``--nodes`` x ``--gpus-per-node`` cluster, then ``tfgshare``'s simulator on the
same jobs and GPUs with the locality model off (cross-node slowdown 0) and
zero move costs (their simulator has neither), and prints mean JCT,
preemptions, how many jobs' JCTs differ by more than a second, wall and CPU
time (user + system, trace loading included for both; CPU time is what to
compare on a busy machine) and jobs per CPU-second side by side. ``--with-locality`` adds a row for our defaults (10 %
cross-node slowdown, start-up and checkpoint costs). Times in the table are
hours (JCT) and seconds (wall, CPU).

``--reuse-theirs DIR`` reads a finished run of theirs instead of running it
(for traces where theirs takes most of an hour): ``DIR/theirs-SCHEDULE/job.csv``
and ``DIR/SCHEDULE.time``, the output of ``/usr/bin/time -v`` around their
``run_sim.py``. Those rows are labelled "measured earlier": their CPU time is
from that run, under whatever load the machine had then, not side by side.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PAIRS = {"fifo": "fifo", "dlas-gpu": "tiresias", "dlas-gpu-4": "tiresias-promote"}


def run_theirs(sim_dir: Path, python: str, trace: Path, nodes: int, per_node: int,
               schedule: str, work: Path) -> dict:
    """Their simulator once; per-job JCT and preemptions from its job.csv, and wall time."""
    spec = work / f"n{nodes}g{per_node}.csv"
    spec.write_text("num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n"
                    f"1,{nodes},{per_node},128,256\n")
    log = work / f"theirs-{schedule}"
    cmd = [python, "run_sim.py", f"--cluster_spec={spec}", "--scheme=count",
           f"--trace_file={trace.resolve()}", f"--schedule={schedule}", f"--log_path={log}"]
    err = work / f"theirs-{schedule}.err"
    t0 = time.perf_counter()
    with open(err, "w") as f:
        proc = subprocess.Popen(cmd, cwd=sim_dir, stdout=subprocess.DEVNULL, stderr=f)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"their simulator failed ({' '.join(cmd)}):\n{err.read_text()[-2000:]}")
    return {"jobs": _read_jobs(log / "job.csv"), "wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime}


def _read_jobs(path: Path) -> dict:
    """job id -> (JCT s, preemptions) from their job.csv."""
    jobs = {}
    with open(path) as f:
        for row in csv.DictReader(f):
            jobs[row["job_id"]] = (float(row["JCT"]), int(row["preempt"]))
    return jobs


def _clock_s(text: str) -> float:
    """Seconds from GNU time's ``[h:]mm:ss.ss``."""
    secs = 0.0
    for part in text.strip().split(":"):
        secs = secs * 60 + float(part)
    return secs


def reuse_theirs(run_dir: Path, schedule: str) -> dict:
    """A finished run of theirs: job.csv and the ``/usr/bin/time -v`` output beside it."""
    job_csv = run_dir / f"theirs-{schedule}" / "job.csv"
    time_file = run_dir / f"{schedule}.time"
    for need in (job_csv, time_file):
        if not need.is_file():
            raise SystemExit(f"--reuse-theirs: no {need} (has their {schedule} run finished?)")
    text = time_file.read_text()
    fields = {}
    for key, pattern in (("user", r"User time \(seconds\): ([\d.]+)"),
                         ("sys", r"System time \(seconds\): ([\d.]+)"),
                         ("wall", r"Elapsed \(wall clock\) time \([^)]*\): ([\d:.]+)"),
                         ("status", r"Exit status: (\d+)")):
        m = re.search(pattern, text)
        if m is None:
            raise SystemExit(f"--reuse-theirs: {time_file} is not `/usr/bin/time -v` output "
                             f"(no {key!r} line)")
        fields[key] = m.group(1)
    if fields["status"] != "0":
        raise SystemExit(f"--reuse-theirs: their {schedule} run exited {fields['status']}")
    when = datetime.datetime.fromtimestamp(time_file.stat().st_mtime, datetime.timezone.utc)
    return {"jobs": _read_jobs(job_csv), "wall_s": _clock_s(fields["wall"]),
            "cpu_s": float(fields["user"]) + float(fields["sys"]),
            "earlier": when.strftime("%Y-%m-%d %H:%M UTC")}


def run_ours(trace: Path, nodes: int, per_node: int, policy: str, locality: bool) -> dict:
    """Our simulator once, in this process (trace load included in the wall time)."""
    from tfgshare.policies.registry import get_policy
    from tfgshare.sim.cluster import load_cluster
    from tfgshare.sim.config import SimConfig
    from tfgshare.sim.engine import simulate
    from tfgshare.sim.profiles import load_profiles
    from tfgshare.sim.workload import load_workload

    t0, c0 = time.perf_counter(), time.process_time()
    profiles = load_profiles()
    cluster = load_cluster(f"{nodes}x{per_node}")
    work = load_workload(str(trace), profiles, cluster.num_gpus)
    config = SimConfig() if locality else SimConfig(cross_node_slowdown=0.0, startup_s=0.0,
                                                    checkpoint_s=0.0)
    res = simulate(cluster, work.jobs, profiles, get_policy(policy), config)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"jobs": {r.id: (r.jct, r.suspends) for r in res.records}, "wall_s": wall,
            "cpu_s": cpu}


def summary(jobs: dict) -> tuple[float, int]:
    """Mean JCT in hours and total preemptions."""
    jct = [v[0] for v in jobs.values()]
    return sum(jct) / len(jct) / 3600, sum(v[1] for v in jobs.values())


def pct(ours: float, theirs: float) -> str:
    return "-" if theirs == 0 else f"{100 * (ours - theirs) / theirs:+.1f}%"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiresias", help="their checkout (or its simulator/ folder)")
    p.add_argument("--python", help="a Python 2.7 with numpy for their simulator")
    p.add_argument("--reuse-theirs", metavar="DIR",
                   help="read their finished runs from DIR (theirs-SCHEDULE/job.csv and "
                        "SCHEDULE.time from /usr/bin/time -v) instead of running theirs")
    p.add_argument("--trace", required=True, help="a Tiresias-format job CSV")
    p.add_argument("--nodes", type=int, required=True)
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--schedules", default="fifo,dlas-gpu",
                   help=f"their schedules to compare, of {','.join(PAIRS)}")
    p.add_argument("--with-locality", action="store_true",
                   help="also run ours with its defaults (locality model and move costs on)")
    a = p.parse_args()
    sim_dir = None
    if a.reuse_theirs is None:
        if not (a.tiresias and a.python):
            raise SystemExit("give --tiresias and --python, or --reuse-theirs DIR")
        sim_dir = Path(a.tiresias)
        if (sim_dir / "simulator" / "run_sim.py").is_file():
            sim_dir = sim_dir / "simulator"
        if not (sim_dir / "run_sim.py").is_file():
            raise SystemExit(f"no run_sim.py in {a.tiresias} or its simulator/ folder")
    trace = Path(a.trace)
    gpus = a.nodes * a.gpus_per_node
    header = ["trace", "GPUs", "theirs / ours", "jobs", "JCT mean h (theirs)", "JCT mean h (ours)",
              "JCT diff", "preempt (theirs)", "preempt (ours)", "preempt diff",
              "jobs JCT off > 1 s", "wall s (theirs)", "wall s (ours)", "CPU s (theirs)",
              "CPU s (ours)", "jobs/CPU-s (theirs)", "jobs/CPU-s (ours)", "speed x (CPU)"]
    rows = []
    with tempfile.TemporaryDirectory(prefix="tiresias-cmp-") as tmp:
        for sched in [s.strip() for s in a.schedules.split(",") if s.strip()]:
            if sched not in PAIRS:
                raise SystemExit(f"unknown schedule {sched!r}; one of {', '.join(PAIRS)}")
            if sim_dir is None:
                theirs = reuse_theirs(Path(a.reuse_theirs), sched)
                print(f"their {sched}: measured earlier (file of {theirs['earlier']}), "
                      "not side by side", file=sys.stderr, flush=True)
            else:
                theirs = run_theirs(sim_dir, a.python, trace, a.nodes, a.gpus_per_node, sched,
                                    Path(tmp))
            variants = [(PAIRS[sched], False)] + ([(PAIRS[sched], True)] if a.with_locality
                                                   else [])
            for policy, locality in variants:
                ours = run_ours(trace, a.nodes, a.gpus_per_node, policy, locality)
                (tj, tp), (oj, op) = summary(theirs["jobs"]), summary(ours["jobs"])
                off = sum(1 for k, v in theirs["jobs"].items()
                          if k not in ours["jobs"] or abs(ours["jobs"][k][0] - v[0]) > 1.0)
                n = len(theirs["jobs"])
                label = f"{sched} / {policy}" + (" (locality, move costs)" if locality else "")
                if "earlier" in theirs:
                    label += f" [theirs measured earlier, {theirs['earlier']}]"
                rows.append([trace.name, str(gpus), label, str(n), f"{tj:.2f}", f"{oj:.2f}",
                             pct(oj, tj), str(tp), str(op), pct(op, tp), str(off),
                             f"{theirs['wall_s']:.1f}", f"{ours['wall_s']:.1f}",
                             f"{theirs['cpu_s']:.1f}", f"{ours['cpu_s']:.1f}",
                             f"{n / theirs['cpu_s']:.0f}", f"{n / ours['cpu_s']:.0f}",
                             f"{theirs['cpu_s'] / ours['cpu_s']:.2f}"])
                print(" | ".join(rows[-1]), file=sys.stderr, flush=True)
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
