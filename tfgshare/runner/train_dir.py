"""What a job's ``--train_dir`` holds, checked before the runner writes anything there.

``refuse_unrelated`` refuses a directory of files that are not a job's (a typo such as
``--train_dir ~``), before TensorFlow is even imported. ``newest_held`` reads the
newest readable checkpoint's job spec and step, and refuses one written by another
model (or optimizer, class count, image size) while the graph file and the pointer
are still as that job left them. ``training_graph`` imports the job's graph from the
train dir (or builds and exports it) and ``restore_newest_good`` restores the newest
checkpoint that reads back whole.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from tfgshare.runner.events import EventSink, warn
from tfgshare.runner.protocol import BadInputError, CheckpointError

# the names a runner (or TF-Slim's own trainer) leaves in a train dir: the checkpoint
# pointer and its lock and temp files, the graph file, sample.json, checkpoints, attempt
# folders, TensorBoard event files
_OURS = re.compile(r"^(checkpoint(\.lock|\.\d+\.tmp)?|graph\.meta(\.tmp)?|graph\.pbtxt"
                   r"|sample\.(json|tmp)|model\.ckpt-\d+.*|attempt-\d+"
                   r"|events\.out\.tfevents\..*)$")


def refuse_unrelated(train_dir: str | Path, events_file: str | Path | None = None) -> None:
    """Raise BadInputError when ``train_dir`` holds files and none of them is a job's.

    A missing or empty directory is a fresh start; one that holds any checkpoint, graph
    or sample file of a job is that job's (its other files are left alone). The run's
    own ``events_file``, when it is kept there, does not count.
    """
    path = Path(train_dir)
    if not path.is_dir():
        return
    own = Path(events_file).resolve() if events_file else None
    names = sorted(n for n in os.listdir(path) if (path / n).resolve() != own)
    if not names or any(_OURS.match(n) for n in names):
        return
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    raise BadInputError(
        f"--train_dir {train_dir} holds other files ({shown}) and no checkpoint of a job; "
        "give a new or empty directory, or the train dir of this job")


@dataclass
class Held:
    """The newest readable checkpoint in a train dir."""

    path: str
    step: int


def newest_held(config) -> Held | None:
    """The newest readable checkpoint of ``config.train_dir`` (None: nothing to resume).

    Raises CheckpointError when it was written by another model, optimizer, class count
    or image size, or when none reads back (a foreign or damaged one): checked before
    the runner writes its graph file or its pointer, so the train dir is left as it was.
    An unreadable checkpoint beside a readable one is skipped here (the restore warns
    about it and falls back).
    """
    from tfgshare.runner import checkpoint as ckpt
    from tfgshare.runner import graph as runner_graph
    from slim_models import nets_factory

    found = ckpt.candidates(config.train_dir)
    if not found:
        return None
    image_size = config.image_size or nets_factory.default_image_size(config.model_name)
    num_classes = runner_graph.load_dataset(config).num_classes
    expected = runner_graph.job_spec(config, image_size, num_classes)
    unreadable = []
    for path in found:
        try:
            info = ckpt.inspect_checkpoint(path, expected, "global_step")
        except ckpt.CorruptCheckpointError as exc:
            unreadable.append(str(exc))
            continue
        return Held(info.path, int(info.global_step))
    raise CheckpointError(f"no readable checkpoint in {config.train_dir}: {unreadable[0]}"
                          + (f" (and {len(unreadable) - 1} more)" if len(unreadable) > 1 else ""))


def training_graph(config, sink: EventSink):
    """The job's graph, imported from its train dir when it matches, else built and exported."""
    from tfgshare.runner import graph as runner_graph
    from tfgshare.runner import graph_file

    key = graph_file.graph_key(config, runner_graph.tower_devices(config.num_gpus))
    built, why = graph_file.load(key, config)
    if built is not None:
        return built, "imported"
    if why != "no graph file":
        warn(sink, f"graph file not used, rebuilding: {why}")
    built = runner_graph.build_training_graph(config)
    try:
        graph_file.export(built, key, config.train_dir)
    except OSError as exc:   # a full disk: the file only spares a resume the rebuild
        warn(sink, f"cannot write the graph file: {exc}; a resume rebuilds the graph")
    return built, "built"


def restore_newest_good(config, built, session, candidates: list[str], sink: EventSink,
                        start_input: bool = False):
    """Restore the newest checkpoint that reads back whole; its CheckpointInfo (with the
    global step it holds), or None for a fresh start.

    With ``start_input``, the input stream starts at the checkpoint's position in the
    restore's own ``session.run``. A corrupt or partial checkpoint is skipped with a
    warning (and dropped from the kept list); one written for another job, or no
    readable one at all, is an error.
    """
    from tfgshare.runner import checkpoint as ckpt
    from tfgshare.runner import graph as runner_graph

    expected = runner_graph.job_spec(config, built.image_size, built.num_classes)
    bad: list[str] = []
    for path in candidates:
        try:
            info = ckpt.inspect_checkpoint(path, expected, built.global_step.op.name)
            built.checkpoint.restore(
                session, path, also=[built.input_init] if start_input else [],
                feed={built.start_example: info.input_position} if start_input else None)
        except ckpt.CorruptCheckpointError as exc:
            bad.append(path)
            warn(sink, f"{exc}; falling back to an older checkpoint")
            continue
        if bad:
            kept = [p for p in reversed(candidates) if p not in bad]
            ckpt.set_current(config.train_dir, kept, config.epoch)
            warn(sink, f"resuming from {path}, not the newest ({bad[0]}), which is unreadable")
        return info
    if bad:
        raise CheckpointError(f"no readable checkpoint in {config.train_dir}: "
                              f"{', '.join(bad)} are corrupt or partial")
    return None
