"""The runner's stop_wait_s counts the step in flight when the suspend signal arrives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# the runner's stop signals, installed as it does; then the main thread stays in C code for
# a second (as in session.run: no bytecode, so no Python signal handler) while SIGUSR1 comes
SCRIPT = """
import json, os, signal, time
from tfgshare.runner import stop as runner_stop
stop = runner_stop.StopRequest()
runner_stop.install_stop_signals(stop)
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
sent = time.monotonic()
os.kill(os.getpid(), signal.SIGUSR1)
time.sleep(1.0)
seen_by_step_end = stop.is_set()
print(json.dumps({"set_after_s": None if stop.set_at is None else stop.set_at - sent,
                  "set_before_the_step_ended": seen_by_step_end}))
"""


def test_the_stop_request_is_timed_when_the_signal_arrives_not_after_the_step():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["set_before_the_step_ended"]
    # the 1 s "step" is still running when the request is recorded
    assert result["set_after_s"] is not None and result["set_after_s"] < 0.5
