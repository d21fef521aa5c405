"""The runner's wire: the contract between a job runner process and whoever starts it.

Exit codes, suspend signals, the warm-runner hand-over and the JSON-lines events,
beside the coordinator's wire schema (``tfgshare.schema``): the agent, the
coordinator and the measuring tools read them here without importing the runner
(``tfgshare.runner.protocol`` re-exports them with the runner's errors). Imports
only the standard library.

A runner is started as ``python -m tfgshare.runner [slim flags] --train_dir DIR
--events_file PATH``. It appends one JSON object per line to the events file
(see ``EVENTS``), and ends with one of the exit codes below. SIGUSR1 or SIGTERM
asks it to finish the current step, save a checkpoint and exit with
``EXIT_SUSPENDED``. Started again on the same ``--train_dir`` it restores and
continues at the next step, on any device.

In a cluster the agent adds ``--epoch ATTEMPT``: checkpoints then go under
``<train_dir>/attempt-ATTEMPT/`` and never replace a newer attempt's (see
``tfgshare.runner.checkpoint``); a run superseded by a newer attempt exits with
``EXIT_FENCED``. A failed periodic save (a full disk) is a ``warning`` event and
training goes on; a failed final save exits with 1.

A job across nodes runs one runner per node (``--job_name worker --task N
--ps_hosts .. --worker_hosts .. --sync_replicas``, see ``runner.replicas``): worker
0, the chief, saves the checkpoints and decides the exit code as a lone runner
does; the other workers exit ``EXIT_SUSPENDED`` when asked to stop, ``EXIT_OK``
when the chief's checkpoint shows the job done, and 1 when they lose the chief or
its parameter server without being asked to stop. A gang member exits with
``os._exit`` (its servers can block an orderly interpreter exit).

A warm runner, ``python -m tfgshare.runner --warm``, imports TensorFlow first and
then takes its job as one line on stdin (``warm_job_line``); see ``runner.warm``.

A job's first run warms up and samples its step time over the sampled steps
only (``tfgshare.sampling``); the ``sample`` event (with ``window_start``, the
wall time the sampled steps began, ``cpu_util``, the share of its cores it would have
used alone over them (its CPU time over the window less its busiest thread's waits for a
core, ``runner.cpu.solo_share``), ``cpu_wait_s``, the time it waited runnable then, ``cpu_run_s``, the time it
ran over its cores, and ``cluster_runnable``, the agent's other runners competing for
its cores, ``runner.neighbours``, and ``step``, the global step it was taken at) is also
written to
``<train_dir>/sample.json``
(``SAMPLE_FILE``), and a checkpoint follows it, so the job can be moved right
after sampling. A run on a train_dir that holds ``sample.json`` does not sample
again. In-process callers use
``tfgshare.runner.main.train(TrainConfig, on_event, stop_event)`` instead.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Iterator

EXIT_OK = 0               # reached --max_number_of_steps
EXIT_BAD_INPUT = 2        # bad flags: unknown model, impossible size, missing dataset
EXIT_CHECKPOINT_ERROR = 3  # corrupt or mismatched checkpoint in --train_dir
EXIT_OUT_OF_MEMORY = 4    # ran out of its memory: TensorFlow's ResourceExhaustedError on a
                          # GPU, or (virtual GPUs) killed by its agent for passing its
                          # fragment in resident memory; an ``out_of_memory`` event with the
                          # measured peak comes first. The job may resume from its checkpoint.
EXIT_FENCED = 76          # a newer attempt of the job owns --train_dir: this one stopped
EXIT_SUSPENDED = 75       # checkpointed on request (signal or --sample_only) and exited

SAMPLE_FILE = "sample.json"  # in --train_dir: the latest sample event, plus "step"

# signals that ask a runner to finish its step, checkpoint and exit EXIT_SUSPENDED
SUSPEND_SIGNALS = (signal.SIGUSR1, signal.SIGTERM)


WARM_FLAG = "--warm"
# what a warm runner prints (stdout) once TensorFlow is imported and it waits for its job
WARM_READY = "tfgshare runner: warm, waiting for a job on stdin"


def warm_job_line(argv: list[str], env: dict[str, str], log: str | None) -> str:
    """The stdin line that hands a warm runner its job: flags, environment, log file,
    and when it was handed over (wall clock), for the runner to tell its wait."""
    return json.dumps({"argv": list(argv), "env": dict(env), "log": log,
                       "handed_at": time.time()}) + "\n"


def request_suspend(pid: int) -> None:
    """Ask the runner process ``pid`` to checkpoint after its current step and exit."""
    os.kill(pid, signal.SIGUSR1)

# event name -> fields it carries (besides "event" and "time")
EVENTS: dict[str, tuple[str, ...]] = {
    "started": ("global_step", "restored", "device", "memory_fraction"),
    "sample": ("warmup_steps", "sampled_steps", "step_time_mean_s", "step_time_std_s",
               "images_per_sec", "peak_memory_mb", "memory_source",
               "predicted_remaining_s", "predicted_total_s", "window_start", "cpu_util",
               "cpu_wait_s", "cpu_run_s", "cluster_runnable", "step"),
    "progress": ("step", "loss", "step_time_s", "images_per_sec", "predicted_remaining_s"),
    "checkpoint": ("step", "path", "seconds", "size_mb"),
    "suspended": ("step",),
    "finished": ("step", "loss"),
    "error": ("message",),
    "out_of_memory": ("peak_memory_mb", "limit_mb", "message"),
    # the phases of a move, in seconds: a start or resume (sent after its first step;
    # start_s: process start to this run's training setup, None in-process; graph_source:
    # "built" or "imported"; restore_s: the restore with the input stream's start, which
    # runs with it; 0, and restored_from None, on a fresh start, which has init_s, the
    # variables' initialisation (a gang's chief's too), and input_s, the input stream's
    # start (one-process runs; a gang's is 0), both 0 on a resume; runner_wait_s: before start_s, how long the job waited for a warm runner
    # still importing TensorFlow, 0 when one was ready or the start was cold) ...
    "start_phases": ("start_s", "graph_s", "graph_source", "restore_s", "restored_from",
                     "first_step_s", "init_s", "input_s", "runner_wait_s"),
    # ... and a suspend (sent before "suspended"; stop_wait_s: from the request to the end
    # of the step in flight, None when the time of the request is unknown)
    "stop_phases": ("stop_wait_s", "save_s"),
    "warning": ("message",),  # e.g. a corrupt checkpoint skipped, a stale graph file rebuilt
}


def read_events(path: str | Path, offset: int = 0) -> tuple[list[dict], int]:
    """Read complete event lines from ``path`` starting at byte ``offset``.

    Returns the events and the offset after the last complete line, so a caller
    can poll a file that is still being written. Lines that are not valid JSON
    objects are skipped.
    """
    path = Path(path)
    if not path.exists():
        return [], offset
    with path.open("rb") as f:
        f.seek(offset)
        data = f.read()
    events: list[dict] = []
    end = data.rfind(b"\n")
    if end < 0:
        return [], offset
    for line in data[: end + 1].splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and "event" in obj:
            events.append(obj)
    return events, offset + end + 1


def iter_events(path: str | Path) -> Iterator[dict]:
    """All complete events in ``path``."""
    yield from read_events(path)[0]
