"""A job's built training graph, kept beside its checkpoints so a resume need not rebuild it.

The first attempt exports its ``TrainingGraph`` as a MetaGraphDef (``GRAPH_FILE`` in the
train dir) with a key: the graph-shaping flags of the job, the tower devices, the
TensorFlow and tf-slim versions, ``GRAPH_VERSION`` and a hash of the graph-building
sources and of the dataset's files. A later attempt imports it when the key matches
(with Python objects only for the ops a run uses, ``_import_lean``); a missing,
unreadable or mismatched file is rebuilt (and rewritten), never used.
"""

from __future__ import annotations

import hashlib
import json
import os
from importlib import metadata
from pathlib import Path

import tensorflow as tf

from tfgshare.runner.config import TrainConfig
from tfgshare.runner.graph import TrainingGraph

GRAPH_FILE = "graph.meta"
GRAPH_VERSION = 1          # bump when the graph's structure changes in a way not in the sources
INFO_COLLECTION = "tfgshare_graph_info"

# flags that do not change the graph (they steer the loop, the session or the files)
_NOT_IN_GRAPH = ("train_dir", "events_file", "job_id", "max_number_of_steps", "memory_fraction",
                 "intra_op_threads", "inter_op_threads", "warmup_steps", "num_sample_steps",
                 "max_sample_share", "sample_only", "save_interval_steps",
                 "save_interval_secs", "max_to_keep", "log_every_n_steps", "epoch")
_REPO = Path(__file__).resolve().parents[2]
_SOURCES = ("tfgshare/runner/graph.py", "tfgshare/runner/rng.py",
            "tfgshare/runner/checkpoint.py", "tfgshare/runner/graph_file.py", "slim_models")


def graph_key(config: TrainConfig, devices: list[str]) -> dict:
    """Everything the training graph of ``config`` on ``devices`` depends on."""
    from slim_models import nets_factory

    flags = {k: v for k, v in vars(config).items() if k not in _NOT_IN_GRAPH}
    return {"flags": flags, "devices": list(devices), "graph_version": GRAPH_VERSION,
            "tensorflow": tf.__version__, "tf_slim": _version("tf-slim"),
            "tf_keras": _version("tf-keras"), "batch_norm": nets_factory.BATCH_NORM,
            "sources": _sources_hash(), "dataset_files": _dataset_files(config.dataset_dir)}


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _sources_hash() -> str:
    digest = hashlib.sha256()
    for name in _SOURCES:
        path = _REPO / name
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            digest.update(str(file.relative_to(_REPO)).encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()[:16]


def _dataset_files(dataset_dir: str | None) -> list | None:
    """Names, sizes and times of the dataset's files (their list is part of the graph)."""
    if not dataset_dir or not os.path.isdir(dataset_dir):
        return None
    return sorted([e.name, e.stat().st_size, e.stat().st_mtime_ns]
                  for e in os.scandir(dataset_dir) if e.is_file())


def export(built: TrainingGraph, key: dict, train_dir: str | Path) -> Path:
    """Write ``built`` with ``key`` to ``train_dir/GRAPH_FILE`` (atomically)."""
    with built.graph.as_default():
        meta = tf.compat.v1.train.export_meta_graph(graph=built.graph, clear_devices=False)
    info = json.dumps({"key": key, "handles": built.handles()}, sort_keys=True)
    meta.collection_def[INFO_COLLECTION].bytes_list.value[:] = [info.encode()]
    path = Path(train_dir) / GRAPH_FILE
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_bytes(meta.SerializeToString())
        tmp.replace(path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    return path


def load(key: dict, config: TrainConfig) -> tuple[TrainingGraph | None, str]:
    """The graph in ``config.train_dir`` if its key equals ``key``: (graph, "") or (None, why)."""
    from tensorflow.core.protobuf import meta_graph_pb2

    path = Path(config.train_dir) / GRAPH_FILE
    if not path.exists():
        return None, "no graph file"
    meta = meta_graph_pb2.MetaGraphDef()
    try:
        meta.ParseFromString(path.read_bytes())
        info = json.loads(meta.collection_def[INFO_COLLECTION].bytes_list.value[0])
    except Exception as exc:  # truncated, garbled or foreign file
        return None, f"{path} is unreadable ({type(exc).__name__})"
    differs = _differences(info.get("key", {}), key)
    if differs:
        return None, f"{path} is stale: {', '.join(differs[:4])} differ"
    try:
        graph = _import_lean(meta.graph_def, TrainingGraph.ops_of_handles(info["handles"]))
        return TrainingGraph.from_handles(graph, info["handles"], config), ""
    except Exception as exc:
        return None, f"{path} cannot be imported ({type(exc).__name__}: {exc})"[:300]


def _import_lean(graph_def, used: list[str]) -> "tf.Graph":
    """A new graph holding ``graph_def``, with Python objects only for the ``used`` ops.

    TensorFlow's importer (``import_graph_def``) wraps every imported node in a Python
    ``Operation`` and re-applies its device and colocation: about 80 % of an import's
    CPU time for resnet_v1_50's 6,910 nodes, though a run uses a dozen of them (the
    session runs the graph held in C). The nodes are imported as TensorFlow's importer
    imports them (same C call, devices and ``_class`` colocation attributes kept as
    exported; the placer reads both), and only ``used`` get a Python ``Operation``;
    looking up any other by name raises KeyError, so nothing can use one unnoticed.
    """
    from tensorflow.python.client import pywrap_tf_session as c_api
    from tensorflow.python.util import compat

    graph = tf.Graph()
    options = c_api.TF_NewImportGraphDefOptions()
    c_api.TF_ImportGraphDefOptionsSetPrefix(options, "")          # as import_graph_def(name="")
    c_api.TF_ImportGraphDefOptionsSetUniquifyNames(options, True)
    for name in used:   # returned by the import; a name not in graph_def fails it
        c_api.TF_ImportGraphDefOptionsAddReturnOperation(options, name)
    buffer = c_api.TF_NewBufferFromString(compat.as_bytes(graph_def.SerializeToString()))
    try:
        with graph._c_graph.get() as c_graph:   # noqa: SLF001 (TensorFlow's own importer's call)
            results = c_api.TF_GraphImportGraphDefWithResults(c_graph, buffer, options)
        try:
            c_ops = c_api.TF_ImportGraphDefResultsReturnOperations(results)
        finally:
            c_api.TF_DeleteImportGraphDefResults(results)
    finally:
        c_api.TF_DeleteBuffer(buffer)
        c_api.TF_DeleteImportGraphDefOptions(options)
    for c_op in c_ops:
        graph._create_op_from_tf_operation(c_op, compute_device=False)   # noqa: SLF001
    return graph


def _differences(saved: dict, current: dict) -> list[str]:
    keys = sorted(set(saved) | set(current))
    out = []
    for k in keys:
        a, b = saved.get(k), current.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            out += [f"{k}.{sub}" for sub in sorted(set(a) | set(b)) if a.get(sub) != b.get(sub)]
        elif a != b:
            out.append(k)
    return out
