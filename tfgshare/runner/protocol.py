"""The contract between a job runner process and whoever starts it.

The wire (exit codes, suspend signals, the warm hand-over, the JSON-lines events and
how a runner is started) is ``tfgshare.runner_wire``, beside the coordinator's wire
schema, where the agent and the coordinator read it without importing the runner; it
is re-exported here with the runner's errors, each carrying its exit code.
"""

from __future__ import annotations

from tfgshare.runner_wire import (  # noqa: F401  (re-exported: the runner contract)
    EVENTS, EXIT_BAD_INPUT, EXIT_CHECKPOINT_ERROR, EXIT_FENCED, EXIT_OK, EXIT_OUT_OF_MEMORY,
    EXIT_SUSPENDED, SAMPLE_FILE, SUSPEND_SIGNALS, WARM_FLAG, WARM_READY, iter_events,
    read_events, request_suspend, warm_job_line)


class RunnerError(Exception):
    """A run that cannot go on; ``exit_code`` is what the runner process exits with."""

    exit_code = 1


class BadInputError(RunnerError, ValueError):
    """Flags the runner cannot train with: unknown model, impossible size, missing data."""

    exit_code = EXIT_BAD_INPUT


class CheckpointError(RunnerError):
    """A checkpoint in --train_dir that is corrupt or was written for another job."""

    exit_code = EXIT_CHECKPOINT_ERROR


class FencedError(CheckpointError):
    """A newer attempt (higher ``--epoch``) of the job has taken over its checkpoints."""

    exit_code = EXIT_FENCED
