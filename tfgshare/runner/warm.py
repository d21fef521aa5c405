"""A warm runner: a process that imports TensorFlow ahead of time, then runs one job.

``python -m tfgshare.runner --warm`` imports TensorFlow, tf_slim and the runner's
modules, and waits for one line on stdin: a JSON object ``{"argv": [runner flags],
"env": {name: value}, "log": path, "handed_at": wall time}``
(``runner.protocol.warm_job_line``). It then sets ``env`` in ``os.environ``, sends its
output to ``log`` and runs the job as ``python -m tfgshare.runner FLAGS`` would (its
``start_phases`` telling how long the line waited for the import: ``runner_wait_s``),
exiting with its code. An empty stdin (the line never comes) ends it with ``EXIT_OK``.

No device is touched before the job arrives: importing TensorFlow does not initialise
CUDA (that happens when the job first lists devices or opens its session), so the
job's ``CUDA_VISIBLE_DEVICES``, set from ``env`` before then, still decides which GPUs
it sees, and a waiting runner holds no GPU memory.
"""

from __future__ import annotations

import json
import os
import sys
import time

from tfgshare.runner import main as runner_main
from tfgshare.runner import protocol as rp
from tfgshare.runner import timing
from tfgshare.runner.tf_setup import stderr_muted

READY = rp.WARM_READY


def preload() -> None:
    """Import what every job needs, with the import chatter muted, touching no device."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with stderr_muted():
        import tensorflow as tf  # noqa: F401
        import tf_slim  # noqa: F401

        from slim_models import nets_factory  # noqa: F401
        from slim_models.compat import ensure_tf_compat
        from tfgshare.runner import checkpoint, graph, graph_file  # noqa: F401

        ensure_tf_compat()
    tf.get_logger().setLevel("ERROR")


def serve(stdin=None) -> int:
    """Preload, wait for one job line on ``stdin``, run that job; its exit code."""
    preload()
    print(READY, flush=True)
    line = (stdin or sys.stdin).readline()
    if not line.strip():
        return rp.EXIT_OK
    try:
        job = json.loads(line)
        argv, env, log = list(job["argv"]), dict(job.get("env", {})), job.get("log")
        handed = float(job.get("handed_at") or time.time())
    except (ValueError, KeyError, TypeError) as exc:
        print(f"tfgshare runner --warm: bad job line: {exc}", file=sys.stderr, flush=True)
        return rp.EXIT_BAD_INPUT
    # a job handed over while this runner still imported waited here until now
    timing.mark_job_start(time.monotonic(), time.time() - handed)
    os.environ.update({str(k): str(v) for k, v in env.items()})
    if log:
        _redirect_output(log)
    import tensorflow as tf

    with stderr_muted():   # the first device use: CUDA starts here
        tf.config.list_physical_devices("GPU")
    return runner_main.main(argv)


def _redirect_output(path: str) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
