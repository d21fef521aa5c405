"""Every up GPU's clear steps for 1-GPU jobs as arrays: one read prices them all at once.

A GPU's clear cost is its first step (no move, then each tenant moved in
``clear_cost``'s order) that fits the job; along the steps the wait and the
moves only grow, so that step is also the GPU's cheapest that fits. A 1-GPU
job's pick (``ClearIndex.pick``) is the first GPU in cluster order that one
move clears now, else the cheapest GPU by (wait, moves, cluster order). The
table holds each step's free room, tenants left, utilisation room and wait,
a row per GPU (its place in the cluster), and finds that pick in a few array
passes over every step; the comparisons are ``clear_cost_from``'s, on the
same float64 numbers, so the pick is the same to the bit. This replaces
pricing each GPU in Python for every new promoted job (its fractions and
utilisation are new, so no kept cost could be read).

Imports: numpy, ``policies.placement`` and ``fgs.records``.
"""

from __future__ import annotations

import math

import numpy as np

from ..placement import EPS
from .records import ClearSteps

__all__ = ["StepTable"]


class StepTable:
    """Each GPU's ``clear_steps`` (one gang size) by row, as arrays."""

    def __init__(self, rows: int, memory_of_row: list[int]) -> None:
        self.rows = rows
        self.memory = np.asarray(memory_of_row, dtype=np.int64)   # row -> its memory size
        self.free = np.full((rows, 2), -math.inf)   # -inf: no such step (never fits)
        self.left = np.zeros((rows, 2), dtype=np.int64)   # tenants left
        self.room = np.full((rows, 2), math.inf)          # utilisation room + EPS
        self.wait = np.zeros((rows, 2))

    def _grow(self, cols: int) -> None:
        pad = ((0, 0), (0, cols - self.free.shape[1]))
        self.free = np.pad(self.free, pad, constant_values=-math.inf)
        self.left = np.pad(self.left, pad)
        self.room = np.pad(self.room, pad, constant_values=math.inf)
        self.wait = np.pad(self.wait, pad)

    def put(self, row: int, steps: ClearSteps) -> None:
        """Keep a GPU's steps: column 0 as it is, column i after its first i tenants moved."""
        moves = steps.moves
        if len(moves) + 1 > self.free.shape[1]:
            self._grow(len(moves) + 1)
        free, left, room, wait = self.free[row], self.left[row], self.room[row], self.wait[row]
        free[:] = -math.inf
        free[0] = steps.free
        if steps.util_room is None:   # idle: only its room counts (``clear_cost_from``)
            left[0], room[0] = -1, math.inf
        else:
            left[0], room[0] = steps.tenants, steps.util_room + EPS
        wait[0] = 0.0
        for i, s in enumerate(moves, 1):
            free[i], left[i], wait[i] = s.free, s.tenants_left, s.wait_s
            room[i] = s.util_room + EPS

    def _fits(self, fractions: dict[int, float], util: float, cap: int):
        """Per row: whether some step fits the job, its first such step, and that step's wait."""
        need = np.zeros(self.rows)
        for mem, f in fractions.items():
            need[self.memory == mem] = f - EPS
        fits = self.free >= need[:, None]
        fits &= self.left < cap
        fits &= self.room >= util
        first = fits.argmax(axis=1)       # each GPU's first step that fits
        rows = np.arange(self.rows)
        return fits[rows, first], first, self.wait[rows, first]

    def clears_now(self, fractions: dict[int, float], util: float, cap: int) -> int | None:
        """The row of the first GPU that one move, now, clears for the job (None: none)."""
        return _first_now(*self._fits(fractions, util, cap))

    def cheapest(self, fractions: dict[int, float], util: float, cap: int) -> int | None:
        """The row of the GPU a 1-GPU job of these fractions (memory size -> fraction) and
        utilisation picks (see the module), or None if no GPU fits it."""
        some, first, wait = self._fits(fractions, util, cap)
        if not some.any():
            return None
        row = _first_now(some, first, wait)
        if row is not None:
            return row
        at = np.flatnonzero(some)
        waits = wait[at]
        at = at[waits == waits.min()]
        moves = first[at]
        return int(at[moves == moves.min()][0])


def _first_now(some, first, wait) -> int | None:
    """The first row whose first fitting step waits 0 and moves at most one tenant."""
    now = some & (wait == 0) & (first <= 1)
    return int(now.argmax()) if now.any() else None
