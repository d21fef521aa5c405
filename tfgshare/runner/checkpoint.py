"""Saving and restoring a job's whole training state with tf.train.Checkpoint.

A checkpoint holds every global variable of the graph by name: model weights,
batch-norm statistics, optimizer slots, global step (and with it the learning
rate schedule), the input position and a JSON job spec. Restores are checked:
a checkpoint that cannot be read, was written for another model, or does not
match the graph variable for variable raises CheckpointError; nothing is
silently re-initialised.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import tensorflow as tf

from tfgshare.runner.protocol import CheckpointError

CHECKPOINT_NAME = "model.ckpt"
SPEC_VARIABLE = "tfgshare/job_spec"
POSITION_VARIABLE = "tfgshare/input_position"
# spec keys that must match between a checkpoint and the run restoring it
MUST_MATCH = ("model_name", "num_classes", "image_size", "optimizer")


@dataclass
class Saved:
    """One written checkpoint."""

    path: str
    step: int
    seconds: float
    size_mb: float


def _value_key(variable_name: str) -> str:
    escaped = variable_name.replace(".", "..").replace("/", ".S")
    return f"variables/{escaped}/.ATTRIBUTES/VARIABLE_VALUE"


def latest_checkpoint(train_dir: str | Path) -> str | None:
    """The newest checkpoint prefix in ``train_dir``; None when there is none.

    Raises CheckpointError when checkpoint files exist but no usable index does.
    """
    train_dir = Path(train_dir)
    if not train_dir.is_dir():
        return None
    state = train_dir / "checkpoint"
    data_files = list(train_dir.glob(f"{CHECKPOINT_NAME}-*.index"))
    if not state.exists():
        if data_files:
            raise CheckpointError(
                f"{train_dir} holds checkpoint files but no 'checkpoint' state file; "
                "refusing to start over")
        return None
    try:
        latest = tf.train.latest_checkpoint(str(train_dir))
    except Exception as exc:  # a garbled state file
        raise CheckpointError(f"cannot read checkpoint state {state}: {exc}") from None
    if latest is None:
        raise CheckpointError(f"checkpoint state {state} names no readable checkpoint")
    return latest


@dataclass
class CheckpointInfo:
    """What the runner needs from a checkpoint before it builds the graph."""

    path: str
    spec: dict
    input_position: int


def inspect_checkpoint(path: str, expected: dict) -> CheckpointInfo:
    """Read a checkpoint's job spec and input position; check the spec matches ``expected``."""
    try:
        reader = tf.train.load_checkpoint(path)
        spec = json.loads(reader.get_tensor(_value_key(SPEC_VARIABLE)).decode())
        position = int(reader.get_tensor(_value_key(POSITION_VARIABLE)))
    except Exception as exc:
        raise CheckpointError(
            f"checkpoint {path} is corrupt or not a tfgshare checkpoint: "
            f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None
    for key in MUST_MATCH:
        if spec.get(key) != expected.get(key):
            raise CheckpointError(
                f"checkpoint {path} was written with {key}={spec.get(key)!r} but this run "
                f"has {key}={expected.get(key)!r}; use another --train_dir")
    return CheckpointInfo(path, spec, position)


class JobCheckpoint:
    """Saves and restores all global variables of a graph in ``train_dir``."""

    def __init__(self, train_dir: str | Path, variables: list, max_to_keep: int):
        self.train_dir = Path(train_dir)
        by_name = {v.op.name: v for v in variables}
        self.checkpoint = tf.train.Checkpoint(variables=by_name)
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, str(self.train_dir), max_to_keep=max_to_keep,
            checkpoint_name=CHECKPOINT_NAME)
        self.checkpoint.save_counter  # create it now, before the graph's initializer

    def save(self, session, step: int) -> Saved:
        """Write a checkpoint numbered ``step``; drop the oldest beyond max_to_keep."""
        start = time.perf_counter()
        with session.graph.as_default(), session.as_default():
            path = self.manager.save(checkpoint_number=step)
        seconds = time.perf_counter() - start
        size = sum(os.path.getsize(p) for p in self.train_dir.glob(Path(path).name + ".*"))
        return Saved(path, step, seconds, size / 2**20)

    def restore(self, session, path: str) -> float:
        """Load every variable from ``path``; the seconds it took."""
        start = time.perf_counter()
        try:
            with session.graph.as_default():
                status = self.checkpoint.read(path)
                status.assert_existing_objects_matched()
                status.assert_consumed()
                status.run_restore_ops(session=session)
        except Exception as exc:
            message = str(exc).strip().splitlines()
            raise CheckpointError(
                f"checkpoint {path} does not match this job's graph: "
                f"{type(exc).__name__}: {' '.join(message[:3])}") from None
        return time.perf_counter() - start
