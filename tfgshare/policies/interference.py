"""Predicted slowdown of jobs that share a GPU: one simple model, in one place.

Each job on a GPU has a single-tenant utilisation ``u`` (measured when it was
sampled). Our model: while the tenants' total demand ``sum(u)`` stays at or
below 1 the GPU has spare compute and each job runs at its own speed, apart
from a fixed overhead per extra tenant (context switches, shared caches and
memory bandwidth); past 1 the GPU is time-sliced and every tenant slows by the
total demand. So every tenant on a GPU sees the same factor

    slowdown = max(1, sum(u)) * (1 + overhead * (n - 1))

The default ``overhead`` of 5 % per extra tenant is our choice, of the order of
the packing interference reported for small jobs in Gandiva (OSDI'18); the
simulator passes its own parameters when it uses this model as ground truth.
"""

from __future__ import annotations

from typing import Sequence

DEFAULT_OVERHEAD = 0.05   # extra slowdown per co-tenant beyond the first


def slowdown(utils: Sequence[float], overhead: float = DEFAULT_OVERHEAD) -> list[float]:
    """Each tenant's slowdown factor (>= 1) given all tenants' single-tenant utilisation."""
    n = len(utils)
    if n == 0:
        return []
    for u in utils:
        if not 0.0 <= u <= 1.0:
            raise ValueError(f"gpu utilisation {u} is outside [0, 1]")
    factor = max(1.0, sum(utils)) * (1.0 + overhead * (n - 1))
    return [factor] * n


def max_slowdown(utils: Sequence[float], overhead: float = DEFAULT_OVERHEAD) -> float:
    """The worst slowdown among tenants with these utilisations (1.0 if none)."""
    return max(slowdown(utils, overhead), default=1.0)


def util_room(utils: Sequence[float], cap: float, overhead: float = DEFAULT_OVERHEAD) -> float:
    """The largest utilisation one more tenant may have so no tenant's slowdown passes ``cap``.

    1.0 if any job may join, -1.0 if none may (even an idle one).
    """
    return room_for(len(utils), sum(utils), cap, overhead)


def room_for(tenants: int, total_util: float, cap: float,
             overhead: float = DEFAULT_OVERHEAD) -> float:
    """``util_room`` from the tenants' count and summed utilisation alone."""
    limit = cap / (1.0 + overhead * tenants)   # the most max(1, total demand) may reach
    if limit < 1.0 - 1e-9:
        return -1.0
    room = limit - total_util
    return -1.0 if room < 0 else min(1.0, room)
