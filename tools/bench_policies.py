"""Time one ``decide`` call of each policy on large clusters and queues.

Scenarios: a coordinator round on 1,000 GPUs with 10,000 queued jobs (empty
cluster: the first round; full cluster: steady state), and a simulator-sized
call on Philly's 2,490 GPUs with 2,000 running and 500 waiting jobs.
Each is timed on its first round and, after carrying out that round's
actions, on the next one (steady state). Prints a markdown table.

    .venv/bin/python tools/bench_policies.py [--repeat N]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tfgshare.policies.base import JobState, JobView, SampleRecord, Suspend  # noqa: E402
from tfgshare.policies.builders import make_cluster  # noqa: E402
from tfgshare.policies.jobset import JobSet  # noqa: E402
from tfgshare.policies.freemap import FreeMap  # noqa: E402
from tfgshare.policies.placement import to_fragments  # noqa: E402
from tfgshare.policies.validate import validate  # noqa: E402
from tfgshare.policies.registry import POLICY_NAMES, get_policy  # noqa: E402


def make_jobs(cluster, n_running: int, n_waiting: int, seed: int, exclusive: bool):
    """Random jobs: ``n_running`` placed on the cluster, ``n_waiting`` queued or sampled."""
    rng = random.Random(seed)
    free = FreeMap(cluster, max_tenants=1 if exclusive else 4)
    jobs = []
    for k in range(n_running + n_waiting):
        ngpu = rng.choice([1] * 8 + [2, 4, 8])
        mem = rng.uniform(1000, 14000)
        sample = SampleRecord(rng.uniform(0.05, 1.0), mem, rng.uniform(0.2, 1.0))
        frags, state = (), rng.choice([JobState.QUEUED, JobState.SAMPLED, JobState.SAMPLED])
        if k < n_running:
            frac = 0.98 if exclusive else min(0.95, mem * 1.1 / 16000)
            placed = free.gang_place(ngpu, frac)
            if placed is not None:
                free.take(placed)
                frags, state = to_fragments(placed), JobState.RUNNING
        submit = rng.uniform(0, 50_000)
        jobs.append(JobView(id=f"j{k}", submit_time=submit, num_gpus=ngpu, state=state,
                            total_steps=rng.randint(100, 10 ** 6), sample=sample,
                            fragments=frags, attained_service_s=rng.uniform(0, 10_000),
                            last_start=submit if frags else None))
    return jobs


def apply(actions, jobs, now: float) -> list[JobView]:
    """The jobs after the caller carried out ``actions`` (sampling counts as running)."""
    by_id = {j.id: j for j in jobs}
    for a in actions:
        j = by_id[a.job]
        if isinstance(a, Suspend):
            by_id[a.job] = replace(j, state=JobState.SUSPENDED, fragments=(), last_wait_start=now)
        else:
            by_id[a.job] = replace(j, state=JobState.RUNNING, fragments=a.fragments,
                                   last_start=now)
    return list(by_id.values())


def time_calls(pol, now, cluster, jobs, repeat: int, memo) -> tuple[float, float, list]:
    """(p50 ms, p99 ms, actions) over ``repeat`` calls on a JobSet with the caller's memo."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        acts = pol.decide(now, cluster, jobs, memo)
        jobs.trim()
        times.append((time.perf_counter() - t0) * 1000)
    assert validate(acts, cluster, jobs) == [], "invalid actions"
    times.sort()
    p99 = times[min(len(times) - 1, int(0.99 * len(times)))]
    return statistics.median(times), p99, acts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=30)
    args = ap.parse_args()
    scenarios = [
        ("1,000 GPUs, empty, 10,000 queued", make_cluster(125, 8), 0, 10_000),
        ("1,000 GPUs, full, 10,000 queued", make_cluster(125, 8), 3_000, 10_000),
        ("2,490 GPUs, 2,000 running, 500 waiting", make_cluster(311, 8), 2_000, 500),
    ]
    print("| scenario | policy | first round p50 / p99 ms (actions) "
          "| next round p50 / p99 ms (actions) |")
    print("|---|---|---:|---:|")
    now = 60_000.0
    for label, cluster, n_run, n_wait in scenarios:
        for name in POLICY_NAMES:
            exclusive = name in ("fifo", "sjf", "tiresias")
            jobs = JobSet(make_jobs(cluster, n_run, n_wait, seed=1, exclusive=exclusive))
            pol = get_policy(name)
            memo = pol.new_memo()
            p50, p99, acts = time_calls(pol, now, cluster, jobs, args.repeat, memo)
            for v in apply(acts, jobs, now):   # what the caller changed
                if v is not jobs.get(v.id):
                    jobs.put(v)
            q50, q99, acts2 = time_calls(pol, now + 1, cluster, jobs, args.repeat, memo)
            print(f"| {label} | {name} | {p50:.1f} / {p99:.1f} ({len(acts)}) "
                  f"| {q50:.1f} / {q99:.1f} ({len(acts2)}) |", flush=True)


if __name__ == "__main__":
    main()
