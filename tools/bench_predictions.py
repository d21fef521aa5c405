"""Prediction error on a live batch of small jobs, and on the same batch simulated.

Live: a local coordinator (fgs, default parameters) and one agent with two
virtual 16 GiB GPUs on loopback train ``--jobs`` small lenet jobs on the CPU,
every fraction ``auto``. Each finished job's error is |predicted - actual| /
actual run time after its sampling run, the prediction made once that run
exited (remaining steps x measured step time + its measured start-up cost).
Simulated: the same jobs (same models, steps and submit times) on a simulated
1x2 cluster, with a model profile made from what the live run measured (mean
sampled step time, peak memory, utilisation, start-up), fgs with its defaults
and the simulator's measurement noise. Also the policy actions the coordinator
refused (goal: none).

Per job it prints what the prediction assumed (its step time alone, sampled
less the time it waited for a core; the co-tenants then; the sharing it
assumed while newcomers sample, a prior or measured, and after them, in the
co-location it is placed in, and the step time and next start that gave,
from the coordinator's log line) and what the run
did (its steps' mean time, the rest: start, restore, final save, exit), and
the load average at the start and the end, since the machine's other work
changes step times on virtual GPUs.

Usage: python tools/bench_predictions.py [--jobs 20] [--out OUT.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from philly.jobs import TraceJob  # noqa: E402
from tfgshare.localcluster import LocalCluster  # noqa: E402
from tfgshare.policies.prediction import solo_step_s  # noqa: E402
from tfgshare.policies.registry import get_policy  # noqa: E402
from tfgshare.schema import JobSpec  # noqa: E402

STEPS = (100, 200, 300, 400, 150)   # cycled over the batch
BATCH = 8


def batch(n: int) -> list[JobSpec]:
    """``n`` small lenet jobs of varied length, sized from their sample."""
    return [JobSpec(model_name="lenet", name=f"p{i}", batch_size=BATCH,
                    max_number_of_steps=STEPS[i % len(STEPS)], memory_fraction="auto",
                    extra=["--log_every_n_steps", "10", "--save_interval_secs", "0"])
            for i in range(n)]


def live(n: int, root: Path, timeout_s: float) -> dict:
    """Run the batch live; the per-job rows, error figures and refusals."""
    with LocalCluster(root) as cluster:
        cluster.start_coordinator()
        cluster.start_agent("n1", "2x16GiB", threads=1)
        cluster.wait_nodes({"n1"})
        with cluster.client(timeout_s=10.0) as c:
            t0 = time.time()
            ids = c.submit(batch(n))
            end = time.monotonic() + timeout_s
            while True:
                jobs = [c.job(j) for j in ids]
                if all(j["state"] in ("finished", "failed", "cancelled") for j in jobs):
                    break
                if time.monotonic() > end:   # report the jobs that finished
                    print(f"timed out after {timeout_s:g}s: "
                          f"{sum(j['state'] != 'finished' for j in jobs)} jobs unfinished")
                    break
                time.sleep(1.0)
            report = c.metrics()
            logs = {j: c.logs(j) for j in ids}
    return {"wall_s": time.time() - t0, "jobs": jobs, "error": report["prediction_error"],
            "refused": report["refused"], "report": report["report"], "logs": logs}


_LINE = re.compile(r"^(\d\d):(\d\d):(\d\d\.\d+) (.*)$")
_FIELD = re.compile(r"(\w+)=(\S+)")
# the coordinator's line when it predicts a sampled job (measures.sampling_ended)
_ASSUMED = re.compile(r"x([\d.]+) from sharing its GPU while new jobs are sampled "
                      r"\((as measured|a first guess)[^)]*\).* so ([\d.]+) s a step, "
                      r"after ([\d.]+) s to start again")
_AFTER = re.compile(r"x([\d.]+) once none is left to sample")


def run_parts(lines: list[str]) -> dict:
    """From a job's log: its sample (step time, time waited for a core, co-tenants
    unknown here) and its runs after sampling (steps, their mean step time from
    the progress marks, the run time not spent in those steps)."""
    out: dict = {"sampled_step_s": None, "solo_step_s": None, "run_s": 0.0, "steps": 0,
                 "step_s": None, "sharing": None, "assumed_step_s": None, "restart_s": None,
                 "after": None}
    day, last, start, marks = 0.0, None, None, []
    steps_s = steps = 0.0
    for line in lines:
        m = _LINE.match(line)
        if not m:
            continue
        t = int(m[1]) * 3600 + int(m[2]) * 60 + float(m[3]) + day
        if last is not None and t < last - 43200:   # past midnight
            day += 86400.0
            t += 86400.0
        last, text = t, m[4]
        fields = dict(_FIELD.findall(text))
        if " sample " in f" {text} " and "step_time_mean_s" in fields:
            step, n = float(fields["step_time_mean_s"]), int(fields["sampled_steps"])
            out["sampled_step_s"] = step
            if "cpu_wait_s" in fields and n:
                out["solo_step_s"] = solo_step_s(step, None, float(fields["cpu_wait_s"]) / n,
                                                 float(fields.get("cpu_run_s", 0)) / n)
        elif text.startswith("predicted ") and "sharing" in text:
            m = _ASSUMED.search(text)
            if m:
                out["sharing"] = f"{float(m[1]):.2f}{'m' if m[2] == 'as measured' else 'p'}"
                out["assumed_step_s"], out["restart_s"] = float(m[3]), float(m[4])
            m = _AFTER.search(text)
            if m:
                out["after"] = float(m[1])
        elif text.startswith(("resume on", "start on", "migrate")):
            start, marks = t, []
        elif start is not None and " progress " in f" {text} ":
            marks.append((t, int(fields["step"])))
        elif start is not None and (text.startswith(("finished", "suspended:", "requeued"))
                                    or " suspended " in text):
            out["run_s"] += t - start
            if len(marks) >= 2 and marks[-1][1] > marks[0][1]:
                steps_s += marks[-1][0] - marks[0][0]
                steps += marks[-1][1] - marks[0][1]
            start, marks = None, []
    if steps:
        out["steps"], out["step_s"] = int(steps), steps_s / steps
    return out


def simulated(n: int, jobs: list[dict]) -> dict:
    """The same batch in the simulator, its profile from the live measurements."""
    from tfgshare.sim.cluster import load_cluster
    from tfgshare.sim.engine import simulate
    from tfgshare.sim.profiles import load_profiles
    done = [j for j in jobs if j["sample"] is not None]
    profile = {
        "step_time_s": statistics.fmean(j["sample"]["step_time_s"] for j in done),
        "memory_mb": max(j["sample"]["peak_memory_mb"] for j in done),
        "gpu_util": statistics.fmean(j["sample"]["gpu_util"] for j in done),
        "startup_s": statistics.fmean(j["restart_s"] for j in done if j["restart_s"]),
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "measured.yaml"
        path.write_text(
            "models:\n  lenet:\n"
            "    params: 3274634\n    optimizer_slots: 1\n"   # lenet's, as shipped
            f"    startup_s: {profile['startup_s']:.3f}\n"
            f"    batches:\n      {BATCH}: {{step_time_s: {profile['step_time_s']:.5f}, "
            f"memory_mb: {profile['memory_mb']:.0f}, gpu_util: {profile['gpu_util']:.3f}}}\n")
        specs = batch(n)
        t0 = min(j["submit_time"] for j in jobs)
        trace = [TraceJob(s.name, j["submit_time"] - t0, 1, 1.0, model="lenet",
                          batch_size=BATCH, total_steps=s.max_number_of_steps)
                 for s, j in zip(specs, jobs)]
        res = simulate(load_cluster("1x2:16384"), trace, load_profiles(path), get_policy("fgs"))
    errors = sorted(abs(r.predicted_total_s - r.actual_total_s) / r.actual_total_s
                    for r in res.records if r.predicted_total_s is not None
                    and r.actual_total_s)
    return {"profile": profile, "jobs": len(errors),
            "mean": statistics.fmean(errors) if errors else None,
            "p90": errors[max(0, -(-9 * len(errors) // 10) - 1)] if errors else None}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=20)
    p.add_argument("--timeout", type=float, default=3600.0,
                   help="stop waiting after this many seconds and report the finished jobs")
    p.add_argument("--out", "--json", dest="json", type=Path,
                   help="write the figures (and each job's log) here as JSON")
    args = p.parse_args()
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="tfgshare-pred-") as tmp:
        got = live(args.jobs, Path(tmp), args.timeout)
    load1 = os.getloadavg()
    sim = simulated(args.jobs, got["jobs"])
    err = got["error"]
    print(got["report"])
    print("\nper job: sampled step time, and alone (less its wait for a core); co-tenants while "
          "it sampled; the sharing its prediction assumed while newcomers sample (p: the prior, "
          "m: measured) and after them, where it is placed (x its step alone), the mean step "
          "and the next start that gave; predicted and actual run "
          "time after sampling; the run's mean step time and its time outside those steps "
          "(start, restore, final save, exit)")
    print("job    steps  susp  mig  sampled s  alone s  co  sharing  after  assumed s  start s  "
          "predicted s  actual s  error  run step s  other s")
    for j in got["jobs"]:
        err_j = j["prediction_error"]
        parts = run_parts(got["logs"][j["id"]])
        pred = j["predicted_total_s"]
        actual = None if err_j is None or not pred else \
            (parts["run_s"] if parts["run_s"] else None)
        other = None if parts["step_s"] is None or not parts["run_s"] else \
            parts["run_s"] - parts["steps"] * parts["step_s"]

        def f(x, w, d):
            return f"{'-':>{w}}" if x is None else f"{x:>{w}.{d}f}"
        print(f"{j['id']:<6} {j['total_steps']:>5}  {j['suspends']:>4}  {j['migrations']:>3}  "
              f"{f(parts['sampled_step_s'], 9, 3)}  {f(parts['solo_step_s'], 7, 3)}  "
              f"{(j['sample'] or {}).get('co_tenants', '-'):>2}  "
              f"{parts['sharing'] or '-':>7}  {f(parts['after'], 5, 2)}  "
              f"{f(parts['assumed_step_s'], 9, 3)}  "
              f"{f(parts['restart_s'], 7, 1)}  {f(pred, 11, 1)}  "
              f"{f(actual, 8, 1)}  {'-' if err_j is None else f'{100 * err_j:.0f} %':>5}  "
              f"{f(parts['step_s'], 10, 3)}  {f(other, 7, 1)}")
    moved = [j["prediction_error"] for j in got["jobs"]
             if j["prediction_error"] is not None and (j["suspends"] or j["migrations"])]
    print(f"policy moves: {sum(j['suspends'] + j['migrations'] for j in got['jobs'])}; "
          f"mean error of the {len(moved)} moved jobs: "
          f"{100 * statistics.fmean(moved) if moved else 0:.1f} %")
    print(f"\nload average (1 min) {load0[0]:.1f} at the start, {load1[0]:.1f} at the end, "
          f"on {os.cpu_count()} cores")
    print(f"live: {args.jobs} jobs in {got['wall_s']:.0f}s; prediction error mean "
          f"{100 * (err['mean'] or 0):.1f} %, p90 {100 * (err['p90'] or 0):.1f} % over "
          f"{err['jobs']} jobs; refused actions: {sum(got['refused'].values())} {got['refused']}")
    print(f"simulated (same batch, measured profile {sim['profile']}): prediction error mean "
          f"{100 * (sim['mean'] or 0):.1f} %, p90 {100 * (sim['p90'] or 0):.1f} % over "
          f"{sim['jobs']} jobs")
    if args.json:
        args.json.write_text(json.dumps({"live": {k: v for k, v in got.items() if k != "report"},
                                         "load": [load0, load1], "simulated": sim}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
