"""A runner's CPU use: time run and time waited runnable, and the share of its cores it
would use alone.

No TensorFlow: the sampled ``cpu_util`` (a virtual GPU's single-tenant utilisation) is
made from these (``solo_share``).
"""

from __future__ import annotations

import os
import time


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


def thread_times() -> dict[str, tuple[float, float]]:
    """Each thread's CPU seconds run on a core and waited runnable for one, so far, by
    thread id (Linux's schedstat; empty where it is not available)."""
    out: dict[str, tuple[float, float]] = {}
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                ran, waited = f.read().split()[:2]
            out[tid] = (int(ran) / 1e9, int(waited) / 1e9)
        except (OSError, ValueError):
            continue   # a thread that just exited
    return out


def solo_share(wall_s: float, ran_s: float, before: dict[str, tuple[float, float]],
               after: dict[str, tuple[float, float]]) -> float:
    """The share of its cores the process would have used alone over a window, in [0, 1].

    ``ran_s`` CPU seconds were run in ``wall_s`` seconds; ``before`` and
    ``after`` are ``thread_times()`` at the window's ends. Alone, the window
    would have been shorter by the time its busiest thread (the one that ran
    most: the steps' critical path) waited for a core, which a neighbour's
    start-up or a co-tenant caused, and no shorter than its CPU time spread
    over the cores or run by that thread. Time other threads waited is not
    counted as demand: threads waiting at once would not all have run at once.
    """
    cores = usable_cores()
    if wall_s <= 0:
        return 1.0
    busiest_ran, busiest_waited = busiest_thread(before, after)
    alone = max(wall_s - max(0.0, busiest_waited), ran_s / cores, busiest_ran)
    return min(1.0, max(0.0, ran_s / (cores * alone))) if alone > 0 else 1.0


def busiest_thread(before: dict[str, tuple[float, float]],
                   after: dict[str, tuple[float, float]]) -> tuple[float, float]:
    """The CPU seconds run and waited runnable, between two ``thread_times()``, of the
    thread that ran most (the steps' critical path); a thread new since ``before``
    counts from zero."""
    busiest = (0.0, 0.0)
    for tid, (ran, waited) in after.items():
        r0, w0 = before.get(tid, (0.0, 0.0))
        busiest = max(busiest, (ran - r0, waited - w0))
    return busiest


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
