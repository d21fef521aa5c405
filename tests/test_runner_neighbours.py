"""A runner counts the cluster's own processes that compete for its cores (Linux)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# a parent (the agent) with a busy child of two spinning threads pinned to ``core`` and a
# probe child on the same core: the probe counts its busy sibling once (a process session
# takes one turn of the core however many of its threads are runnable), not itself nor an
# idle sibling
SPIN = ("import threading\ndef spin():\n    while True: pass\n"
        "threading.Thread(target=spin, daemon=True).start()\nspin()\n")
AGENT = """
import os, subprocess, sys, time
core = {core}
pin = lambda: os.sched_setaffinity(0, {{core}})
busy = subprocess.Popen([sys.executable, "-c", SPIN], preexec_fn=pin)
idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], preexec_fn=pin)
time.sleep(0.5)
probe = ("import time\\nfrom tfgshare.runner.neighbours import Neighbours\\n"
         "n = Neighbours()\\n"
         "for _ in range(20):\\n    n.scan(); time.sleep(0.02)\\n"
         "print(n.mean())\\n")
out = subprocess.run([sys.executable, "-c", probe], preexec_fn=pin, capture_output=True,
                     text=True, timeout=60)
busy.kill(); idle.kill()
print(out.stdout.strip() or out.stderr)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="needs Linux /proc")
def test_a_runner_counts_its_busy_sibling_on_its_core():
    core = sorted(os.sched_getaffinity(0))[0]
    agent = f"SPIN = {SPIN!r}\n" + AGENT.format(core=core)
    out = subprocess.run([sys.executable, "-c", agent], capture_output=True,
                         text=True, timeout=60, env={**os.environ, "PYTHONPATH": os.getcwd()})
    mean = float(out.stdout.strip())
    assert 0.7 <= mean <= 1.0      # the busy sibling, runnable at nearly every scan, once
