"""Write a window of the Philly trace as a Tiresias-simulator job CSV.

Run: ``.venv/bin/python tools/tiresias_trace.py --start 2017-10-03 --jobs 5000
--max-gpus 256 --out philly-5k.csv``

Each row keeps a Philly job's real arrival (seconds since the window's first
job), GPU count and duration (whole seconds, at least 1: the Tiresias simulator
reads them as integers); ``model_name`` and ``iterations`` come from
``philly.mapping.assign_models`` (the model written under the Tiresias
simulator's name for it), ``interval`` is the gap to the next job's arrival.
Jobs asking for more than ``--max-gpus`` GPUs could never start on the cluster
(the Tiresias simulator then loops without end) and are left out; the count of
such jobs is printed.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# our profiled model -> the name the Tiresias simulator's models.py knows
TIRESIAS_NAMES = {"vgg_16": "vgg16", "alexnet_v2": "alexnet", "resnet_v1_50": "resnet50",
                  "inception_v3": "inception3"}


def write_trace(out: Path, start: str | None, num_jobs: int, max_gpus: int,
                seed: int = 0) -> dict:
    """Write the CSV; returns the counts of jobs written and left out."""
    from philly.mapping import assign_models
    from philly.trace import load_trace
    from tfgshare.sim.profiles import load_profiles

    jobs = load_trace("philly", start=start)
    wide = [j for j in jobs if j.num_gpus > max_gpus]
    jobs = [j for j in jobs if j.num_gpus <= max_gpus][:num_jobs]
    if not jobs:
        raise SystemExit("no job in that window")
    jobs = assign_models(jobs, load_profiles().step_times(), seed)
    t0 = jobs[0].submit_time
    submits = [int(round(j.submit_time - t0)) for j in jobs]
    with open(out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["job_id", "num_gpu", "submit_time", "iterations", "model_name", "duration",
                    "interval"])
        for i, (j, s) in enumerate(zip(jobs, submits)):
            gap = submits[i + 1] - s if i + 1 < len(jobs) else 0
            w.writerow([i, j.num_gpus, s, j.total_steps, TIRESIAS_NAMES.get(j.model, j.model),
                        max(1, int(round(j.duration))), gap])
    last = jobs[-1].submit_time - t0
    return {"jobs": len(jobs), "too_wide": sum(1 for j in wide if j.submit_time <= last + t0),
            "span_h": last / 3600, "gpu_hours": sum(j.duration * j.num_gpus for j in jobs) / 3600}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--start", default=None, help="first submission (ISO date-time)")
    p.add_argument("--jobs", type=int, required=True, help="number of jobs")
    p.add_argument("--max-gpus", type=int, required=True, help="the cluster's GPU count")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    c = write_trace(Path(a.out), a.start, a.jobs, a.max_gpus, a.seed)
    load = c["gpu_hours"] / (a.max_gpus * max(c["span_h"], 1e-9))
    print(f"wrote {c['jobs']} jobs over {c['span_h']:.1f} h to {a.out} "
          f"(offered load {load:.2f} of {a.max_gpus} GPUs; {c['too_wide']} jobs wider than "
          f"{a.max_gpus} GPUs left out)")


if __name__ == "__main__":
    main()
