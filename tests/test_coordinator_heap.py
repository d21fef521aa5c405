"""The coordinator gives the memory a burst freed back to the system (``coordinator.heap``)."""

from __future__ import annotations

import threading

import pytest

from tfgshare.coordinator.heap import HeapTrim


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def test_a_burst_freed_in_another_thread_leaves_memory_once_trimmed():
    heap = HeapTrim()
    if not heap.available:
        pytest.skip("this C library has no malloc_trim")
    kept: list[bytearray] = []

    def burst() -> None:
        # 4 KiB buffers come from malloc (not Python's small-object pools) in this
        # thread's arena; every 64th one stays, so the arena cannot shrink from its top
        chunks = [bytearray(4096) for _ in range(48_000)]   # about 190 MiB, pages touched
        kept.extend(chunks[::64])
        del chunks

    t = threading.Thread(target=burst)
    t.start()
    t.join()
    before = _rss_mb()
    assert heap.trim()
    after = _rss_mb()
    assert before - after > 100, (before, after)
    assert len(kept) == 750


def test_trims_at_most_once_an_interval():
    clock = [0.0]
    heap = HeapTrim(every_s=60.0, clock=lambda: clock[0])
    ran = []
    for t in (0.0, 30.0, 59.9, 60.0, 61.0, 119.9, 120.0):
        clock[0] = t
        ran.append(heap.maybe())
    assert ran == [False, False, False, heap.available, False, False, heap.available]
    assert heap.trims == (2 if heap.available else 0)
