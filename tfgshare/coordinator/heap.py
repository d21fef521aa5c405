"""Giving the heap memory a burst freed back to the system, at a bounded rate.

glibc keeps freed memory resident in the arena that held it until ``malloc_trim``
releases its free pages. The coordinator needs that after bursts it does not
allocate from Python: at 10,000 GPUs a thread arena grew to 540 MB in the first
20 s while Python's own allocations (tracemalloc) grew 15 MB and ZeroMQ's I/O
thread was the busy one, and once freed it stayed resident: one ``malloc_trim(0)``
gave 185 MB back in 37 ms (docs/benchmarks.md, "A coordinator for ten thousand
GPUs"). Elsewhere than glibc, trimming does nothing. May import nothing of tfgshare.
"""

from __future__ import annotations

import ctypes
import time
from typing import Callable

TRIM_EVERY_S = 60.0   # at most one trim a minute: a trim walks the free lists (ms to tens)


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none."""
    try:
        fn = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
    return fn


class HeapTrim:
    """Release the heap's free pages to the system, at most every ``every_s`` seconds."""

    def __init__(self, every_s: float = TRIM_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.every_s, self.clock = every_s, clock
        self._trim = _malloc_trim()
        self.due = clock() + every_s
        self.trims = 0

    @property
    def available(self) -> bool:
        """Whether this C library can trim."""
        return self._trim is not None

    def trim(self) -> bool:
        """Release the free pages now; True when the C library could."""
        if self._trim is None:
            return False
        self._trim(0)               # the call releases the GIL
        self.trims += 1
        return True

    def maybe(self) -> bool:
        """Trim if the interval has passed; True when a trim ran."""
        now = self.clock()
        if now < self.due:
            return False
        self.due = now + self.every_s
        return self.trim()
