"""A virtual GPU's single-tenant utilisation counts the time a job waited to run (Linux)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tfgshare.runner.cpu import cpu_demand_s, cpu_share

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
             "from tfgshare.runner.cpu import cpu_demand_s, cpu_share, cpu_times\n"
             "t, d, c, rw = time.time(), cpu_demand_s(), time.process_time(), cpu_times()\n"
             + BUSY.format(s=1.0) +
             "w = time.time() - t\n"
             "ran, waited = (b - a for a, b in zip(rw, cpu_times()))\n"
             "print(cpu_share(w, cpu_demand_s() - d), cpu_share(w, time.process_time() - c),\n"
             "      w, ran, waited)\n")
    try:
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                             timeout=60, env={**os.environ, "PYTHONPATH": os.getcwd()})
    finally:
        rival.kill()
        rival.wait()
    demand, cpu, wall, ran, waited = map(float, out.stdout.split())
    assert demand > 0.9                 # it kept asking for its core the whole time
    assert cpu < 0.8                    # CPU time alone would call it a light job
    assert waited > 0.2 * wall          # it waited for the rival's turns
    assert wall - waited == pytest.approx(ran, abs=0.1 * wall)


def test_demand_of_this_process_grows_with_its_work():
    before = cpu_demand_s()
    end = time.time() + 0.2
    while time.time() < end:
        pass
    assert cpu_demand_s() - before >= 0.15
    assert cpu_share(1.0, 5.0) == 1.0 and cpu_share(0.0, 1.0) == 1.0
