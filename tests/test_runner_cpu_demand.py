"""A virtual GPU's single-tenant utilisation: what a job would use of its cores alone, its
waits for a core taken out (Linux)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tfgshare.runner import cpu
from tfgshare.runner.cpu import cpu_share, cpu_times, solo_share

BUSY = "import time\nend = time.time() + {s}\nwhile time.time() < end: pass\n"


@pytest.mark.skipif(not os.path.exists("/proc/self/schedstat"), reason="needs Linux schedstat")
def test_a_busy_job_sharing_its_core_reads_as_busy(tmp_path):
    """Pinned to one core beside another busy process it gets about half the core,
    yet it wanted all of it: its demand over the window is close to the wall time.
    The time it waited for the core is what the rival cost it: the wall time less
    that wait is its time running (its steps alone, ``prediction.solo_step_s``)."""
    core = sorted(os.sched_getaffinity(0))[0]
    rival = subprocess.Popen([sys.executable, "-c", BUSY.format(s=3.0)],
                             preexec_fn=lambda: os.sched_setaffinity(0, {core}))
    probe = (f"import os, time\nos.sched_setaffinity(0, {{{core}}})\n"
             "from tfgshare.runner.cpu import cpu_share, cpu_times, solo_share, thread_times\n"
             "t, d, c, rw = time.time(), sum(cpu_times()), time.process_time(), cpu_times()\n"
             "tt = thread_times()\n"
             + BUSY.format(s=1.0) +
             "w = time.time() - t\n"
             "ran, waited = (b - a for a, b in zip(rw, cpu_times()))\n"
             "print(cpu_share(w, sum(cpu_times()) - d), cpu_share(w, time.process_time() - c),\n"
             "      w, ran, waited, solo_share(w, ran, tt, thread_times()))\n")
    try:
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                             timeout=60, env={**os.environ, "PYTHONPATH": os.getcwd()})
    finally:
        rival.kill()
        rival.wait()
    demand, cpu, wall, ran, waited, solo = map(float, out.stdout.split())
    assert demand > 0.9                 # it kept asking for its core the whole time
    assert solo > 0.9                   # alone, it would have kept its core busy
    assert cpu < 0.8                    # CPU time alone would call it a light job
    assert waited > 0.2 * wall          # it waited for the rival's turns
    assert wall - waited == pytest.approx(ran, abs=0.1 * wall)


def test_demand_of_this_process_grows_with_its_work():
    before = sum(cpu_times())
    end = time.time() + 0.2
    while time.time() < end:
        pass
    assert sum(cpu_times()) - before >= 0.15
    assert cpu_share(1.0, 5.0) == 1.0 and cpu_share(0.0, 1.0) == 1.0


def test_threads_that_wait_at_once_are_not_counted_as_demand(monkeypatch):
    """A one-thread job's steps on a two-core virtual GPU, slowed by a neighbour's
    start-up: its step thread waited 0.3 s of a 1 s window, two input threads 0.5 s
    each (at the same moments). Alone it would have used 0.6 CPU s in 0.7 s of its
    two cores (0.43), not the 0.95 that counting every thread's wait as demand reads."""
    monkeypatch.setattr(cpu, "usable_cores", lambda: 2)
    before = {"1": (10.0, 1.0), "2": (1.0, 1.0), "3": (1.0, 1.0)}
    after = {"1": (10.4, 1.3), "2": (1.1, 1.5), "3": (1.1, 1.5)}
    assert solo_share(1.0, 0.6, before, after) == pytest.approx(0.6 / 1.4)
    assert cpu_share(1.0, 0.6 + 1.3) == pytest.approx(0.95)
    # nothing waited: its CPU time over its cores; a thread that started in the window
    # counts from zero; a wait longer than the window leaves the CPU time over the cores
    assert solo_share(1.0, 0.6, before, {**after, "1": (10.4, 1.0)}) == pytest.approx(0.3)
    assert solo_share(1.0, 1.0, {}, {"9": (1.0, 0.0)}) == pytest.approx(0.5)
    assert solo_share(1.0, 1.2, {}, {"9": (0.6, 2.0), "8": (0.6, 2.0)}) == 1.0
    assert solo_share(0.0, 1.0, {}, {}) == 1.0


def test_the_busiest_threads_wait_is_what_a_step_alone_saves():
    """The sample's ``cpu_wait_s`` is its busiest thread's wait, not every thread's: two
    input threads that waited 0.5 s each at the same moments as the step thread's 0.3 s
    would make the steps alone 1.3 s shorter, longer than the window itself."""
    before = {"1": (10.0, 1.0), "2": (1.0, 1.0), "3": (1.0, 1.0)}
    after = {"1": (10.4, 1.3), "2": (1.1, 1.5), "3": (1.1, 1.5), "4": (0.05, 0.2)}
    assert cpu.busiest_thread(before, after) == pytest.approx((0.4, 0.3))
    assert cpu.busiest_thread({}, {}) == (0.0, 0.0)
