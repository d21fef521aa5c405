"""A runner's CPU demand: time run plus time waited runnable, and its share of the cores.

No TensorFlow: the sampled ``cpu_util`` (a virtual GPU's single-tenant utilisation) is
made from these.
"""

from __future__ import annotations

import os
import time


def cpu_demand_s() -> float:
    """CPU seconds this process has wanted so far: run on a core plus waited runnable for one.

    On a machine shared with other work a compute-bound job gets only part of
    its cores, so its CPU time alone would read as a light job; the time it
    waited to run is demand too (``cpu_times``).
    """
    ran, waited = cpu_times()
    return ran + waited


def cpu_times() -> tuple[float, float]:
    """CPU seconds this process has run on a core, and waited runnable for one, so far.

    Summed over its threads from Linux's schedstat (``/proc/self/task/*/schedstat``:
    time on a CPU, time waiting on a run queue). Plain CPU time and no wait
    where schedstat is not available.
    """
    ran_s, waited_s, seen = 0.0, 0.0, False
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        tasks = []
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                ran, waited = f.read().split()[:2]
            ran_s += int(ran) / 1e9
            waited_s += int(waited) / 1e9
            seen = True
        except (OSError, ValueError):
            continue   # a thread that just exited
    return (ran_s, waited_s) if seen else (time.process_time(), 0.0)


def cpu_share(wall_s: float, cpu_s: float) -> float:
    """CPU seconds over wall seconds, as a share of the cores this process may use, in [0, 1].

    On a virtual GPU (a set of CPU cores) this is the job's single-tenant
    utilisation of its GPU, measured over the sampled steps only.
    """
    cores = usable_cores()
    if wall_s <= 0:
        return 1.0
    return min(1.0, max(0.0, cpu_s / (wall_s * cores)))


def usable_cores() -> int:
    """How many CPU cores this process may run on (its affinity)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # not on Linux
        return os.cpu_count() or 1
