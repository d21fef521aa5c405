"""Timing of the Philly trace tools: load the shipped trace, a large job log, map and scale.

Run: .venv/bin/python tools/bench_philly.py   (writes only to a temp dir)
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from philly import load_trace  # noqa: E402
from philly.filters import scale_to_cluster, subsample  # noqa: E402
from philly.mapping import assign_models  # noqa: E402

PROFILES = {"inception_v3": {32: 0.5, 64: 0.9}, "resnet_v1_50": {32: 0.35, 64: 0.6},
            "vgg_16": {32: 0.6, 64: 1.1}, "alexnet_v2": {128: 0.1, 256: 0.18}}


def timed(label: str, fn, repeat: int = 5):
    """Run fn repeat times; print and return the median seconds and the last result."""
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    print(f"| {label} | {statistics.median(times):.3f} s | {min(times):.3f} s |")
    return result


def write_job_log(path: Path, n: int) -> None:
    """A synthetic cluster_job_log of n jobs, with some retries and quirks."""
    rng = random.Random(0)
    t0 = datetime(2017, 10, 1)
    fmt = "%Y-%m-%d %H:%M:%S"
    entries = []
    for i in range(n):
        sub = t0 + timedelta(seconds=i * 60)
        start = sub + timedelta(seconds=rng.randint(0, 600))
        attempts = []
        for _ in range(rng.choice([1, 1, 1, 2])):
            end = start + timedelta(seconds=rng.randint(1, 20000))
            attempts.append({"start_time": start.strftime(fmt), "end_time": end.strftime(fmt),
                             "detail": [{"ip": "m1", "gpus": ["gpu0", "gpu1"]}]})
            start = end + timedelta(seconds=30)
        if i % 50 == 0:
            attempts = []
        entries.append({"status": "Pass", "vc": "ee9e8c", "jobid": f"application_{i}", "user": "u",
                        "submitted_time": sub.strftime(fmt), "attempts": attempts})
    path.write_text(json.dumps(entries))


def main() -> None:
    print("| step | median | best |")
    print("|---|---|---|")
    jobs = timed("load_trace() shipped Philly CSV, 82,247 jobs", load_trace)
    timed("load_trace(start, end, vcs) one month, two VCs",
          lambda: load_trace(start="2017-10-01", end="2017-11-01", vcs={"6214e9", "11cb48"}))
    timed("assign_models, 82,247 jobs", lambda: assign_models(jobs, PROFILES))
    timed("scale_to_cluster(64 of 2,490 GPUs)", lambda: scale_to_cluster(jobs, 64, 2490, seed=1))
    timed("subsample(fraction=0.1)", lambda: subsample(jobs, fraction=0.1, seed=1))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cluster_job_log"
        write_job_log(path, 117_325)
        timed("load_trace(cluster_job_log), 117,325 synthetic jobs", lambda: load_trace(path), repeat=3)


if __name__ == "__main__":
    main()
