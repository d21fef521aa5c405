"""Saving and restoring a job's whole training state in tf.train.Checkpoint's format.

A checkpoint holds every global variable of the graph by name: model weights,
batch-norm statistics, optimizer slots, global step (and with it the learning
rate schedule), the input position and a JSON job spec. Restores are checked:
a checkpoint that cannot be read, was written for another model, or does not
match the graph variable for variable raises CheckpointError; nothing is
silently re-initialised. A checkpoint that cannot be read is a
CorruptCheckpointError, so the runner can fall back to an older one.

Checkpoints are fenced by epoch. In a cluster every attempt of a job has an
epoch (the coordinator's attempt number, which only grows, across coordinator
restarts too) and writes its files only under ``<train_dir>/attempt-<epoch>/``.
The job's current checkpoints are named by one pointer, ``<train_dir>/checkpoint``
(TensorFlow's checkpoint state file, paths relative to ``train_dir``), whose first
line records the epoch that wrote it. The pointer is replaced atomically (a temp
file and ``os.replace``) under a lock on ``checkpoint.lock``, and only by an
epoch at least as new as the one it records: a runner of an older attempt that
wakes up after the job moved on gets FencedError and changes nothing. A new
attempt claims the pointer before it restores. A run outside a cluster has epoch
0 and writes straight into ``train_dir``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import tensorflow as tf

from tfgshare.runner.protocol import CheckpointError, FencedError

CHECKPOINT_NAME = "model.ckpt"
SPEC_VARIABLE = "tfgshare/job_spec"
POSITION_VARIABLE = "tfgshare/input_position"
SAVE_COUNTER_KEY = "save_counter/.ATTRIBUTES/VARIABLE_VALUE"  # holds the step number
OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
# spec keys that must match between a checkpoint and the run restoring it
MUST_MATCH = ("model_name", "num_classes", "image_size", "optimizer")
POINTER = "checkpoint"         # the job's current checkpoints (TF checkpoint state format)
LOCK = "checkpoint.lock"       # held while the pointer is read, checked and replaced
_EPOCH_LINE = re.compile(r"^# tfgshare epoch (\d+)\s*$", re.M)


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

    Raises CheckpointError when checkpoint files exist but no usable state file does.
    """
    found = candidates(train_dir)
    return found[0] if found else None


def candidates(train_dir: str | Path) -> list[str]:
    """The kept checkpoints in ``train_dir``, newest first; [] for a fresh start.

    Raises CheckpointError when checkpoint files exist but no usable state file does.
    """
    train_dir = Path(train_dir)
    if not train_dir.is_dir():
        return []
    state_file = train_dir / POINTER
    if not state_file.exists():
        if list(train_dir.glob(f"{CHECKPOINT_NAME}-*.index")) or \
                list(train_dir.glob(f"attempt-*/{CHECKPOINT_NAME}-*.index")):
            raise CheckpointError(
                f"{train_dir} holds checkpoint files but no 'checkpoint' state file; "
                "refusing to start over")
        return []
    try:
        text = state_file.read_text()
    except OSError as exc:
        raise CheckpointError(f"cannot read checkpoint state {state_file}: {exc}") from None
    if _EPOCH_LINE.search(text) and "model_checkpoint_path" not in text:
        return []            # claimed by an attempt that has not saved yet
    try:
        state = tf.train.get_checkpoint_state(str(train_dir))
    except Exception as exc:  # a garbled state file
        raise CheckpointError(f"cannot read checkpoint state {state_file}: {exc}") from None
    if state is None or not state.model_checkpoint_path:
        raise CheckpointError(f"checkpoint state {state_file} names no checkpoint")
    latest = state.model_checkpoint_path
    return [latest, *(p for p in reversed(state.all_model_checkpoint_paths) if p != latest)]


def checkpoint_paths(train_dir: str | Path) -> list[str]:
    """The kept checkpoint prefixes in ``train_dir``, oldest first ([] when none)."""
    return list(reversed(candidates(train_dir)))


@dataclass
class CheckpointInfo:
    """What the runner needs from a checkpoint before it builds the graph."""

    path: str
    spec: dict
    input_position: int
    global_step: int | None = None   # the value of ``step_variable``, when asked for


def inspect_checkpoint(path: str, expected: dict, step_variable: str | None = None
                       ) -> CheckpointInfo:
    """Read a checkpoint's job spec and input position (and the value of the variable
    ``step_variable``, when given); check the spec matches ``expected``."""
    try:
        reader = tf.train.load_checkpoint(path)
        spec = json.loads(reader.get_tensor(_value_key(SPEC_VARIABLE)).decode())
        position = int(reader.get_tensor(_value_key(POSITION_VARIABLE)))
        step = int(reader.get_tensor(_value_key(step_variable))) if step_variable else None
    except Exception as exc:
        raise CorruptCheckpointError(
            f"checkpoint {path} is corrupt or not a tfgshare checkpoint: "
            f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None
    for key in MUST_MATCH:
        if spec.get(key) != expected.get(key):
            raise CheckpointError(
                f"checkpoint {path} was written with {key}={spec.get(key)!r} but this run "
                f"has {key}={expected.get(key)!r}; use another --train_dir")
    return CheckpointInfo(path, spec, position, step)


def stored_step(path: str, step_variable: str) -> int:
    """The value of the variable ``step_variable`` in the checkpoint at ``path``."""
    return int(tf.train.load_checkpoint(path).get_tensor(_value_key(step_variable)))


class JobCheckpoint:
    """Save and restore ops for all global variables of a graph, built once, in the graph.

    They read and write the ``tf.train.Checkpoint`` format (the keys, object graph and
    save counter that ``tf.train.Checkpoint(variables={name: variable})`` uses), so the
    ops can be exported with the graph and a restore costs only the reading.
    ``save`` keeps the newest ``max_to_keep`` checkpoints in ``train_dir``'s
    ``checkpoint`` state file, as ``tf.train.CheckpointManager`` does.
    """

    def __init__(self, train_dir: str | Path, max_to_keep: int, stored: list[list],
                 ops: dict, epoch: int = 0):
        self.train_dir = Path(train_dir)
        self.max_to_keep = max_to_keep
        self.stored = stored   # [variable name, dtype name, shape] of each variable it holds
        self.ops = ops   # name -> graph element: prefix, save_counter, save, restore
        self.epoch = epoch

    @classmethod
    def build(cls, train_dir: str | Path, variables: list, max_to_keep: int,
              epoch: int = 0) -> "JobCheckpoint":
        """Build the save and restore ops of ``variables`` in the default graph."""
        names = [v.op.name for v in variables]
        keys = [_value_key(name) for name in names]
        with tf.name_scope("tfgshare_checkpoint"), tf.device("/cpu:0"):
            prefix = tf.compat.v1.placeholder(tf.string, [], name="prefix")
            counter = tf.compat.v1.placeholder(tf.int64, [], name="save_counter")
            graph_proto = tf.constant(_object_graph(names).SerializeToString(),
                                      name="object_graph")
            save = tf.raw_ops.SaveV2(
                prefix=prefix, tensor_names=keys + [SAVE_COUNTER_KEY, OBJECT_GRAPH_KEY],
                shape_and_slices=[""] * (len(keys) + 2),
                tensors=[v.value() for v in variables] + [counter, graph_proto], name="save")
            values = tf.raw_ops.RestoreV2(prefix=prefix, tensor_names=keys,
                                          shape_and_slices=[""] * len(keys),
                                          dtypes=[v.dtype.base_dtype for v in variables],
                                          name="read")
        assigns = []
        for variable, value in zip(variables, values):
            assign = variable.assign(value, read_value=False)   # placed with the variable
            assigns.append(getattr(assign, "op", assign))
        restore = tf.group(*assigns, name="tfgshare_checkpoint/restore")
        ops = {"prefix": prefix, "save_counter": counter, "save": save, "restore": restore}
        stored = [[v.op.name, v.dtype.base_dtype.name, v.shape.as_list()] for v in variables]
        return cls(train_dir, max_to_keep, stored, ops, epoch)

    def op_names(self) -> dict[str, str]:
        """The names of the ops, to find them again in an imported copy of the graph."""
        return {key: element.name for key, element in self.ops.items()}

    @classmethod
    def from_graph(cls, graph, names: dict[str, str], train_dir: str | Path, stored: list[list],
                   max_to_keep: int, epoch: int = 0) -> "JobCheckpoint":
        """The checkpoint ops of an imported graph, found by ``op_names``; ``stored`` as
        ``self.stored`` of the checkpoint it was built with."""
        ops = {key: graph.as_graph_element(name) for key, name in names.items()}
        return cls(train_dir, max_to_keep, stored, ops, epoch)

    def save(self, session, step: int) -> Saved:
        """Write a checkpoint numbered ``step`` under this epoch and make it the current one;
        drop the oldest beyond max_to_keep.

        Raises FencedError (and leaves the pointer alone) when a newer epoch holds it.
        """
        start = time.perf_counter()
        directory = attempt_dir(self.train_dir, self.epoch)
        directory.mkdir(parents=True, exist_ok=True)
        path = str(directory / f"{CHECKPOINT_NAME}-{step}")
        if pointer_epoch(self.train_dir) > self.epoch:   # no need to write it at all
            raise _fenced(self.train_dir, self.epoch)
        try:
            session.run(self.ops["save"], {self.ops["prefix"]: path,
                                           self.ops["save_counter"]: step})
        except Exception:
            _remove_checkpoint(path)     # a partial write (a full disk) leaves nothing behind
            raise
        try:
            publish(self.train_dir, path, self.epoch, self.max_to_keep)
        except FencedError:
            _remove_checkpoint(path)
            raise
        seconds = time.perf_counter() - start
        size = sum(os.path.getsize(p) for p in directory.glob(Path(path).name + ".*"))
        return Saved(path, step, seconds, size / 2**20)

    def restore(self, session, path: str, also=(), feed: dict | None = None) -> float:
        """Load every variable from ``path``; the seconds it took.

        ``also``: more ops to run in the same ``session.run`` (with ``feed``), such as
        starting the input stream: each distinct run costs the session a new set-up.
        Raises CorruptCheckpointError when ``path`` cannot be read, CheckpointError when
        it does not hold exactly this graph's variables with their shapes and types.
        """
        start = time.perf_counter()
        self._check_matches(path)
        try:
            session.run([self.ops["restore"], *also], {**(feed or {}),
                                                       self.ops["prefix"]: path})
        except tf.errors.OpError as exc:
            raise CorruptCheckpointError(
                f"checkpoint {path} cannot be read: {type(exc).__name__}: "
                f"{_first_line(exc.message)}") from None
        return time.perf_counter() - start

    def _check_matches(self, path: str) -> None:
        try:
            reader = tf.train.load_checkpoint(path)
            shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
        except Exception as exc:
            raise CorruptCheckpointError(
                f"checkpoint {path} cannot be read: {type(exc).__name__}: "
                f"{_first_line(str(exc))}") from None
        expected = {_value_key(name): (dtype, list(shape)) for name, dtype, shape in self.stored}
        saved = {key for key in shapes if key.startswith("variables/")}
        problems = [f"missing {key}" for key in sorted(set(expected) - saved)[:3]]
        problems += [f"unexpected {key}" for key in sorted(saved - set(expected))[:3]]
        for key in sorted(saved & set(expected)):
            dtype, shape = expected[key]
            if list(shapes[key]) != shape or dtypes[key].name != dtype:
                problems.append(f"{key} is {dtypes[key].name}{list(shapes[key])}, the graph's "
                                f"{dtype}{shape}")
        if problems:
            raise CheckpointError(f"checkpoint {path} does not match this job's graph: "
                                  + "; ".join(problems[:5]))


class CorruptCheckpointError(CheckpointError):
    """A checkpoint whose files cannot be read (partial, truncated or damaged)."""


def attempt_dir(train_dir: str | Path, epoch: int) -> Path:
    """Where attempt ``epoch`` writes its checkpoints (``train_dir`` itself for epoch 0)."""
    return Path(train_dir) / f"attempt-{epoch}" if epoch else Path(train_dir)


def pointer_epoch(train_dir: str | Path) -> int:
    """The epoch recorded in ``train_dir``'s pointer (0: none, or no pointer)."""
    try:
        found = _EPOCH_LINE.search((Path(train_dir) / POINTER).read_text())
    except OSError:
        return 0
    return int(found.group(1)) if found else 0


@contextlib.contextmanager
def _pointer_lock(train_dir: Path):
    """Hold the pointer's lock (an exclusive flock on ``checkpoint.lock``)."""
    with open(train_dir / LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _fenced(train_dir: Path, epoch: int) -> FencedError:
    return FencedError(f"attempt {epoch} is fenced off {train_dir}: attempt "
                       f"{pointer_epoch(train_dir)} of this job has taken over its checkpoints")


def publish(train_dir: str | Path, path: str, epoch: int, max_to_keep: int) -> list[str]:
    """Make ``path`` the job's current checkpoint under ``epoch``, keeping the newest
    ``max_to_keep``; delete the files of the ones dropped. The kept paths, oldest first.

    Raises FencedError, changing nothing, when the pointer records a newer epoch.
    """
    train_dir = Path(train_dir)
    with _pointer_lock(train_dir):
        if pointer_epoch(train_dir) > epoch:
            raise _fenced(train_dir, epoch)
        current = checkpoint_paths(train_dir) if (train_dir / POINTER).exists() else []
        kept = [p for p in current if p != path] + [path]
        write_state(train_dir, kept[-max_to_keep:], epoch)
        for old in kept[:-max_to_keep]:
            _remove_checkpoint(old)
    return kept[-max_to_keep:]


def set_current(train_dir: str | Path, paths: list[str], epoch: int) -> None:
    """Make ``paths`` (oldest first, may be empty) the kept checkpoints under ``epoch``.

    Raises FencedError, changing nothing, when the pointer records a newer epoch.
    """
    train_dir = Path(train_dir)
    with _pointer_lock(train_dir):
        if pointer_epoch(train_dir) > epoch:
            raise _fenced(train_dir, epoch)
        write_state(train_dir, paths, epoch)


def claim(train_dir: str | Path, epoch: int) -> None:
    """Record ``epoch`` in the pointer (same checkpoints), so no older attempt can save.

    Raises FencedError when a newer epoch already holds it. Epoch 0 claims nothing.
    """
    if not epoch:
        return
    train_dir = Path(train_dir)
    train_dir.mkdir(parents=True, exist_ok=True)
    with _pointer_lock(train_dir):
        current = pointer_epoch(train_dir)
        if current > epoch:
            raise _fenced(train_dir, epoch)
        if current < epoch or not (train_dir / POINTER).exists():
            write_state(train_dir, checkpoint_paths(train_dir), epoch)


def write_state(train_dir: str | Path, paths: list[str], epoch: int = 0) -> None:
    """Replace the pointer atomically: ``paths`` (oldest first) kept, the last one the
    latest, ``epoch`` recorded. Unfenced: callers hold the lock (see ``publish``).

    Not fsynced, as a Saver's state file is not: the checkpoint files it names are not
    either, so an fsync here bought no durability against a power loss (a restore falls
    back to the newest readable checkpoint), and a killed process or node agent leaves
    the page cache intact; on a busy disk an fsync can wait for the journal that holds
    the checkpoint's own just-written bytes (docs/benchmarks.md, Runner)."""
    from google.protobuf import text_format
    from tensorflow.python.training import checkpoint_state_pb2

    train_dir = Path(train_dir)
    now = time.time()
    names = [os.path.relpath(p, train_dir) for p in paths]
    state = checkpoint_state_pb2.CheckpointState(
        model_checkpoint_path=names[-1] if names else "",
        all_model_checkpoint_paths=names,
        all_model_checkpoint_timestamps=[now] * len(paths), last_preserved_timestamp=now)
    tmp = train_dir / f"{POINTER}.{os.getpid()}.tmp"
    with open(tmp, "w") as out:
        if epoch:
            out.write(f"# tfgshare epoch {epoch}\n")
        out.write(text_format.MessageToString(state))
    tmp.replace(train_dir / POINTER)


def _remove_checkpoint(path: str) -> None:
    """Delete a checkpoint's files, and its attempt folder once empty."""
    path = Path(path)
    for file in path.parent.glob(path.name + ".*"):
        file.unlink(missing_ok=True)
    for temp in path.parent.glob(path.name + "_temp*"):
        shutil.rmtree(temp, ignore_errors=True)
    if path.parent.name.startswith("attempt-"):
        with contextlib.suppress(OSError):
            path.parent.rmdir()


def _object_graph(names: list[str]):
    """The object graph ``tf.train.Checkpoint(variables={name: ...})`` writes for ``names``."""
    from tensorflow.core.protobuf import trackable_object_graph_pb2 as pb

    graph = pb.TrackableObjectGraph()
    root, holder, counter = graph.nodes.add(), graph.nodes.add(), graph.nodes.add()
    root.children.add(node_id=1, local_name="variables")
    root.children.add(node_id=2, local_name="save_counter")
    counter.attributes.add(name="VARIABLE_VALUE", full_name="save_counter",
                           checkpoint_key=SAVE_COUNTER_KEY)
    for i, name in enumerate(names):
        holder.children.add(node_id=3 + i, local_name=name)
        graph.nodes.add().attributes.add(name="VARIABLE_VALUE", full_name=name,
                                         checkpoint_key=_value_key(name))
    for node in graph.nodes:
        node.has_checkpoint_values.value = True
    return graph


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text and text.strip() else ""
