"""The oldest active jobs as the forecast reads them, kept between sampled jobs.

A sampled job's forecast (``measures``) asks ``policies.forecast.waiting_beside``
about the first ``AHEAD_SCAN`` active jobs in arrival order: how many others wait
with a sample, and the mean of their predicted runs. Scanning them for every sampled
job cost a millisecond each, a third of the coordinator's loop while a full queue is
sampled. ``WaitingWindow`` keeps what one scan found (the waiting sampled jobs and
their predictions, in order) and answers from it, with the same figures to the last
bit (the same values summed in the same order), until something the scan reads
changes: the cluster tells it of every job it refreshes or retires (``note``), and
a change inside the window (a job there starts or stops waiting with a sample, its
prediction moves, or it leaves the active jobs) drops what was kept. Jobs join the
active jobs in arrival order, so a job after the window's last one is outside it.

May import ``policies`` (forecast, prediction) only; the cluster owns one.
"""

from __future__ import annotations

from itertools import islice
from typing import Any, Mapping

from tfgshare.policies.prediction import AHEAD_SCAN

_NOT = object()   # a job that does not count (not waiting, or not sampled)


def _counts(job: Any) -> Any:
    """What a job adds to the scan: its predicted run (None: not predicted), or _NOT."""
    if job.sample is not None and job.state.waiting:
        return job.predicted_remaining_s
    return _NOT


class WaitingWindow:
    """``waiting_beside`` over the first ``AHEAD_SCAN`` of ``active``, kept until it changes."""

    def __init__(self, active: Mapping[str, Any]) -> None:
        self.active = active                  # the cluster's active jobs, in arrival order
        self._kept: dict[str, Any] | None = None   # job id -> what it adds, those that count
        self._last: int | None = None         # seq of the window's last job (None: all)
        self._runs: list[float] = []          # the predictions, in order
        self._sum = 0.0

    def note(self, job: Any) -> None:
        """``job`` changed (or left the active jobs): forget the scan if that shows there."""
        if self._kept is None or (self._last is not None and job.seq > self._last):
            return
        if job.id not in self.active:
            self._kept = None
            return
        was, now = self._kept.get(job.id, _NOT), _counts(job)
        if was is not now and was != now:    # (a NaN prediction always drops it)
            self._kept = None

    def read(self, job: Any) -> tuple[int, float | None]:
        """How many active jobs but ``job`` among the first ``AHEAD_SCAN`` wait with a
        sample, and the mean predicted run of those predicted (None if none), as
        ``policies.forecast.waiting_beside`` finds with ``measures.run_left_s``."""
        if self._kept is None:
            self._scan()
        kept = self._kept
        if job.id not in kept:
            return len(kept), (self._sum / len(self._runs) if self._runs else None)
        runs = [left for jid, left in kept.items() if jid != job.id and left is not None]
        return len(kept) - 1, (sum(runs) / len(runs) if runs else None)

    def _scan(self) -> None:
        kept: dict[str, Any] = {}
        last = None
        window = list(islice(self.active.values(), AHEAD_SCAN))
        for other in window:
            adds = _counts(other)
            if adds is not _NOT:
                kept[other.id] = adds
        if len(window) == AHEAD_SCAN:
            last = window[-1].seq
        self._kept, self._last = kept, last
        self._runs = [left for left in kept.values() if left is not None]
        self._sum = sum(self._runs)
