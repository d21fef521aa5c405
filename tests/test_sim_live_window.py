"""The live window reads what a scan of the oldest live jobs reads, in any order of changes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfgshare.sim.live_window import LiveWindow


def scan(jobs: dict[int, tuple[bool, float | None]], limit: int, besides: int):
    """The forecast's old loop: the first ``limit`` live jobs in arrival order."""
    waiting = measured = 0
    runs = 0.0
    for pos in sorted(jobs)[:limit]:
        w, run = jobs[pos]
        if pos != besides and w:
            waiting += 1
            if run is not None:
                measured += 1
                runs += run
    return waiting, measured, runs


ops = st.lists(st.tuples(st.sampled_from(["arrive", "note", "leave"]), st.integers(0, 10**6),
                         st.booleans(), st.one_of(st.none(), st.floats(0, 1e7))),
               max_size=120)


@settings(max_examples=150, deadline=None)
@given(ops=ops, limit=st.integers(1, 40))
def test_reads_equal_a_scan_of_the_first_live_jobs(ops, limit):
    n = 60
    window, jobs, arrived = LiveWindow(n), {}, 0
    for kind, pick, waiting, run in ops:
        if kind == "arrive" and arrived < n:
            arrived += 1
            window.join(arrived)
            jobs[arrived] = (False, None)
        elif jobs:
            pos = sorted(jobs)[pick % len(jobs)]
            if kind == "note":
                window.note(pos, waiting, run)
                jobs[pos] = (waiting, run)
            else:
                window.leave(pos)
                del jobs[pos]
        for besides in (0, *list(jobs)[:3]):
            w, m, r = window.read(limit, besides)
            sw, sm, sr = scan(jobs, limit, besides)
            assert (w, m) == (sw, sm)
            assert r == pytest.approx(sr, rel=1e-9, abs=1e-6)


def test_a_window_past_the_live_jobs_reads_them_all_and_an_empty_one_nothing():
    window = LiveWindow(5)
    assert window.read(10, 0) == (0, 0, 0.0)
    for pos in (1, 2, 3):
        window.join(pos)
    window.note(1, True, 10.0)
    window.note(2, True, None)
    window.note(3, False, 99.0)      # not waiting: not counted, its run neither
    assert window.read(10, 0) == (2, 1, 10.0)
    assert window.read(1, 0) == (1, 1, 10.0)
    assert window.read(10, 1) == (1, 0, 0.0)   # itself left out
    window.leave(1)
    assert window.read(1, 0) == (1, 0, 0.0)    # the window slides to the next live job
