"""The job runner: trains one TF-Slim job, samples its speed, suspends and resumes it.

Run as ``tfgshare train FLAGS`` or ``python -m tfgshare.runner FLAGS`` (flags as
in TF-Slim's train_image_classifier.py, see ``runner_config``), or in-process
with ``train(TrainConfig(...), on_event=..., stop_event=...)``. The contract
with the agent (exit codes, signals, events) is in ``runner_protocol``.

This module imports no TensorFlow at load: it checks the flags and the train dir
first (a bad input fails fast), imports TensorFlow quietly, and only then the
modules that import it, ``attempt`` (one training attempt, a gang member's too) and
``replicas`` (a parameter server), inside the functions that run them.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from tfgshare.runner import protocol as rp
from tfgshare.runner.config import TrainConfig, parse_args
from tfgshare.runner.events import EventSink
from tfgshare.runner.saving import save_patiently  # noqa: F401  (re-exported: its old home)
from tfgshare.runner.stop import StopRequest, install_stop_signals
from tfgshare.runner.tf_setup import gpu_peak_mb, import_tensorflow_quietly, op_determinism
from tfgshare.runner import train_dir as train_dirs

if TYPE_CHECKING:
    from tfgshare.runner.attempt import TrainResult

SAMPLE_FILE = rp.SAMPLE_FILE
# set by ``python -m tfgshare.runner``: called with the exit code right after the final
# event (``finished`` or ``suspended``, its checkpoint written), to end the process there
# instead of closing the session and tearing down TensorFlow first (seconds on a loaded
# machine, with the job's GPU still held); None in-process (tests, ``tfgshare train``)
EXIT_AT_FINAL_EVENT: Callable[[int], None] | None = None


def train(config: TrainConfig, on_event: Callable[[dict], None] | None = None,
          stop_event: threading.Event | None = None) -> "TrainResult":
    """Train ``config`` from its train_dir's latest checkpoint (or from scratch).

    Stops after ``max_number_of_steps`` (status "finished"), or, once
    ``stop_event`` is set or ``sample_only`` sampling is done, after the current
    step with a checkpoint (status "suspended"). Raises BadInputError or
    CheckpointError on bad flags or an unusable checkpoint.
    """
    config.check()
    train_dirs.refuse_unrelated(config.train_dir, config.events_file)
    began = time.perf_counter()
    import_tensorflow_quietly()
    stop_event = stop_event or StopRequest()
    sink = EventSink(config.events_file, on_event, config.job_id)
    Path(config.train_dir).mkdir(parents=True, exist_ok=True)
    with op_determinism(config.deterministic):
        from tfgshare.runner import attempt   # imports TensorFlow: after the quiet import

        return attempt.run(config, sink, stop_event, began, EXIT_AT_FINAL_EVENT)


def main(argv: list[str] | None = None) -> int:
    """Train one job from command-line flags; returns a runner_protocol exit code."""
    config = parse_args(list(sys.argv[1:] if argv is None else argv))
    if config.in_gang:   # a gang's servers and sessions can block an orderly exit
        code = _main(config)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return _main(config)


def _main(config: TrainConfig) -> int:
    if config.job_name == "ps":
        try:
            config.check()
        except rp.BadInputError as exc:
            return _fail(EventSink(config.events_file, None, config.job_id),
                         f"bad input: {exc}", exc.exit_code)
        import_tensorflow_quietly()
        from tfgshare.runner import replicas   # imports TensorFlow: after the quiet import

        return replicas.serve_ps(config)
    stop_event = StopRequest()
    if threading.current_thread() is threading.main_thread():
        install_stop_signals(stop_event)
    sink = EventSink(config.events_file, None, config.job_id)
    try:
        result = train(config, stop_event=stop_event)
    except rp.BadInputError as exc:
        return _fail(sink, f"bad input: {exc}", exc.exit_code)
    except rp.CheckpointError as exc:
        return _fail(sink, f"checkpoint error: {exc}", exc.exit_code)
    except rp.RunnerError as exc:
        return _fail(sink, str(exc), exc.exit_code)
    except Exception as exc:
        if type(exc).__name__ != "ResourceExhaustedError":   # TensorFlow's out of memory
            raise
        peak = gpu_peak_mb()
        print(f"tfgshare train: out of memory (peak {peak:.0f} MiB): {exc}".splitlines()[0],
              file=sys.stderr, flush=True)
        sink.emit("out_of_memory", peak_memory_mb=peak, limit_mb=None,
                  message=str(exc).splitlines()[0][:500])
        return rp.EXIT_OUT_OF_MEMORY
    return result.exit_code


def _fail(sink: EventSink, message: str, code: int) -> int:
    print(f"tfgshare train: {message}", file=sys.stderr, flush=True)
    sink.emit("error", message=message)
    return code


if __name__ == "__main__":
    sys.exit(main())
