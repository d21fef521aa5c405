"""``no_cycle_collection``: the cyclic garbage collector off while a workload's objects
are built (a trace's jobs as they load, the simulator's jobs as they are admitted).

Building a million objects makes no reference cycles, but the collector, run as they
are made, rescans every one made so far: at a million jobs a quarter of loading's CPU
time. The replay itself freezes what it built instead (``Simulator.run``).
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def no_cycle_collection() -> Iterator[None]:
    """No cyclic garbage collection inside the block, or the decorated function (as it
    was after it)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
