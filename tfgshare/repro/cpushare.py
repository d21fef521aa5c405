"""The share of a CPU core that runner processes got while they wanted one (Linux schedstat).

On virtual GPUs a job's speed is the CPU it gets: a runner pinned to its virtual GPU's
core, on a machine shared with other work, runs at the share of that core the scheduler
gives it. Linux counts, per thread, the time it ran and the time it waited runnable on a
run queue (``/proc/PID/task/TID/schedstat``); ``ran / (ran + waited)`` over an interval is
the share it got while it wanted to run (time asleep, e.g. writing a checkpoint, is in
neither). ``tfgshare profile`` records each model's share while it was measured, and the
replay of a trace on a local cluster measures its runners' share during the run, so the
simulator can be given the profile's times at the share the live run had.

Runners pinned to the same core (tenants of one virtual GPU) wait for each other, which is
co-location, not load: the simulator charges it with its co-location model. So the live
share counts, per core and sampling interval, only what the runners there waited beyond
their co-tenants' running (``core_deltas``, as ``colocate`` measures a pair's share).
"""

from __future__ import annotations

import os
import threading
import time

import psutil


def ran_waited(pid: int) -> tuple[float, float] | None:
    """Seconds a process's threads ran on a CPU and waited runnable, summed; None if gone."""
    ran = waited = 0.0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                parts = f.read().split()
        except OSError:          # a thread that ended meanwhile
            continue
        ran += int(parts[0]) / 1e9
        waited += int(parts[1]) / 1e9
    return ran, waited


def core_deltas(deltas: list[tuple[float, float, tuple[int, ...]]]) -> tuple[float, float]:
    """What the runners ran, and waited while their core ran other work, over one interval,
    from each runner's ``(ran, waited, cores it is pinned to)`` in that interval.

    On one core, the time a runner waited beyond its co-tenants' running
    (``waited_i - (ran - ran_i)``, at least 0) is what other work took while it wanted
    the core; that is the mean over the runners that wanted it (one runner alone: its
    wait)."""
    groups: dict[tuple[int, ...], list[tuple[float, float]]] = {}
    for ran, waited, cores in deltas:
        if ran + waited > 0:
            groups.setdefault(cores, []).append((ran, waited))
    ran_all = other_all = 0.0
    for members in groups.values():
        ran = sum(r for r, _ in members)
        other = sum(max(0.0, w - (ran - r)) for r, w in members) / len(members)
        ran_all += ran
        other_all += other
    return ran_all, other_all


def share(ran_s: float, waited_s: float) -> float | None:
    """``ran / (ran + waited)``; None when the process never wanted a CPU."""
    total = ran_s + waited_s
    return ran_s / total if total > 0 else None


class RunnerShareProbe:
    """Samples, in a thread, the runner processes below ``root_pid`` (an agent) every
    ``period_s`` and adds up what they ran and waited for other work than their
    co-tenants (``core_deltas``; ``waited_total`` keeps every wait) since first seen."""

    def __init__(self, root_pid: int, period_s: float = 0.5, marker: str = "tfgshare.runner"):
        self.root_pid, self.period_s, self.marker = root_pid, period_s, marker
        self.ran = self.waited = self.waited_total = 0.0
        self._last: dict[int, tuple[float, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="runner-share", daemon=True)

    def start(self) -> "RunnerShareProbe":
        self._thread.start()
        return self

    def stop(self) -> float | None:
        """Stop sampling; the share the runners got over the whole time."""
        self._stop.set()
        self._thread.join(timeout=5)
        return self.share()

    def share(self) -> float | None:
        """The share so far (None before any runner wanted a CPU)."""
        return share(self.ran, self.waited)

    def sample(self) -> None:
        """One reading of every runner below the root."""
        try:
            kids = psutil.Process(self.root_pid).children(recursive=True)
        except psutil.Error:
            return
        deltas = []
        for p in kids:
            try:
                if self.marker not in " ".join(p.cmdline()):
                    continue
                cores = tuple(sorted(p.cpu_affinity()))
            except psutil.Error:
                continue
            now = ran_waited(p.pid)
            if now is None:
                continue
            before = self._last.get(p.pid)
            if before is not None and now[0] >= before[0]:
                deltas.append((now[0] - before[0], now[1] - before[1], cores))
                self.waited_total += now[1] - before[1]
            self._last[p.pid] = now
        ran, other = core_deltas(deltas)
        self.ran += ran
        self.waited += other

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            time.sleep(self.period_s)
