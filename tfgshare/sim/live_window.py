"""What the forecast reads of the oldest live jobs, in O(log n) a read.

The forecast (``policies.forecast.waiting_beside``, as the live coordinator reads
it) looks at the first ``AHEAD_SCAN`` live jobs in arrival order and counts those
waiting with a sample, and the mean predicted run of those measured. Scanning them for every sampled job cost the
simulator a quarter of a long replay; ``LiveWindow`` keeps the same figures in
Fenwick trees over arrival order, updated when a job's contribution changes.
Run seconds are kept as integers of 2**-32 s, so sums are exact whatever the order
of updates (no drift from adding and removing floats).
"""

from __future__ import annotations

SCALE = 2**32   # run seconds are kept in units of 1/SCALE s


class LiveWindow:
    """Live jobs by arrival position (1..n), each with a contribution: waiting with a
    sample (0/1), measured (0/1), and its predicted run (seconds, when measured)."""

    __slots__ = ("n", "top", "live", "waiting", "measured", "runs", "mine", "count")

    def __init__(self, n: int) -> None:
        self.n = n
        self.top = 1 << max(0, n.bit_length() - 1)   # highest power of 2 <= n
        self.live = [0] * (n + 1)
        self.waiting = [0] * (n + 1)
        self.measured = [0] * (n + 1)
        self.runs = [0] * (n + 1)
        self.mine: dict[int, tuple[int, int, int]] = {}   # position -> its contribution
        self.count = 0

    @staticmethod
    def _add(tree: list[int], i: int, delta: int) -> None:
        n = len(tree) - 1
        while i <= n:
            tree[i] += delta
            i += i & -i

    @staticmethod
    def _prefix(tree: list[int], i: int) -> int:
        total = 0
        while i > 0:
            total += tree[i]
            i -= i & -i
        return total

    def join(self, pos: int) -> None:
        """The job at arrival position ``pos`` (1-based) is live, contributing nothing yet."""
        self._add(self.live, pos, 1)
        self.mine[pos] = (0, 0, 0)
        self.count += 1

    def leave(self, pos: int) -> None:
        """The job at ``pos`` is no longer live."""
        self.note(pos, False, None)
        del self.mine[pos]
        self._add(self.live, pos, -1)
        self.count -= 1

    def note(self, pos: int, waiting: bool, run_s: float | None) -> None:
        """The job at ``pos`` now waits with a sample (``waiting``) and is predicted to run
        ``run_s`` seconds (None: not measured)."""
        new = (1, 1, round(run_s * SCALE)) if waiting and run_s is not None else (
            (1, 0, 0) if waiting else (0, 0, 0))
        old = self.mine[pos]
        if new == old:
            return
        self.mine[pos] = new
        for tree, a, b in ((self.waiting, old[0], new[0]), (self.measured, old[1], new[1]),
                           (self.runs, old[2], new[2])):
            if a != b:
                self._add(tree, pos, b - a)

    def _kth(self, k: int) -> int:
        """The arrival position of the ``k``-th live job (k >= 1)."""
        pos, step, tree = 0, self.top, self.live
        while step:
            nxt = pos + step
            if nxt <= self.n and tree[nxt] < k:
                pos = nxt
                k -= tree[nxt]
            step >>= 1
        return pos + 1

    def read(self, limit: int, besides: int) -> tuple[int, int, float]:
        """Among the first ``limit`` live jobs but the one at ``besides``: how many wait
        with a sample, how many of those are measured, and their runs' sum (seconds)."""
        if self.count == 0:
            return 0, 0, 0.0
        end = self._kth(min(limit, self.count))
        w, m, r = (self._prefix(self.waiting, end), self._prefix(self.measured, end),
                   self._prefix(self.runs, end))
        if besides <= end and besides in self.mine:
            ow, om, orun = self.mine[besides]
            w, m, r = w - ow, m - om, r - orun
        return w, m, r / SCALE
