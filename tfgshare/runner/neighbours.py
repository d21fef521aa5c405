"""How many of the cluster's own processes compete with this runner for its cores.

On a virtual GPU (CPU cores) a runner's step is slowed by whatever else runs
on its cores: the other runners of its agent (co-tenants pinned to the same
cores, spare runners importing TensorFlow on any core) and processes from
outside the cluster. The first are the cluster's and pass; the second stay.
``Neighbours`` counts the first while the job samples: its agent's other child
processes with a thread runnable, each weighted by the share of its allowed
cores that are this runner's, per core of this runner, averaged over scans
(Linux ``/proc``; 0 elsewhere). Processes, not threads: every runner is its
own process session, and Linux shares a core fairly between sessions, so a
runner with two threads runnable takes one turn, as one with a single thread.
The coordinator takes the rest of the slowdown it measured as the load from
outside (``prediction.outside_slowdown``).
"""

from __future__ import annotations

import os


def _siblings(parent: int, me: int) -> list[int]:
    """The other child processes of ``parent`` (all its threads' children)."""
    kids: set[int] = set()
    try:
        threads = os.listdir(f"/proc/{parent}/task")
    except OSError:
        return []
    for tid in threads:
        try:
            with open(f"/proc/{parent}/task/{tid}/children") as f:
                kids.update(int(x) for x in f.read().split())
        except (OSError, ValueError):
            continue
    kids.discard(me)
    return sorted(kids)


def _runnable(pid: int) -> bool:
    """Whether a thread of ``pid`` is running or waiting to run now (state R)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split(None, 1)[0] == "R":
                    return True
        except (OSError, IndexError):
            continue
    return False


class Neighbours:
    """Mean runnable processes of the agent's other runners on this runner's cores, per core."""

    def __init__(self) -> None:
        self.total = 0.0
        self.scans = 0
        try:
            self.cores = frozenset(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            self.cores = frozenset()

    def scan(self) -> None:
        """Count them once (each sibling process by the share of its cores that are ours)."""
        if not self.cores or not os.path.isdir("/proc/self/task"):
            return
        count = 0.0
        for pid in _siblings(os.getppid(), os.getpid()):
            try:
                allowed = os.sched_getaffinity(pid)
            except OSError:
                continue
            share = len(allowed & self.cores) / len(allowed) if allowed else 0.0
            if share > 0 and _runnable(pid):
                count += share
        self.total += count / len(self.cores)
        self.scans += 1

    def mean(self) -> float:
        """The mean over the scans so far (0 before any)."""
        return self.total / self.scans if self.scans else 0.0
