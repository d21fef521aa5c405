"""Alibaba's GPU-sharing trace (``cluster-trace-gpu-v2023``): nodes, pods, and the jobs
and cluster the simulator replays from them.

The trace (Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with
Fragmentation Gradient Descent", USENIX ATC '23) has a node list (``sn, cpu_milli,
memory_mib, gpu, model``) and a pod list (``name, cpu_milli, memory_mib, num_gpu,
gpu_milli, gpu_spec, qos, pod_phase, creation_time, deletion_time, scheduled_time``);
``shared/data/alibaba/gpu-v2023/README.md`` documents the shipped files.

How a pod becomes a job, each choice counted in the :class:`~philly.report.LoadReport`:

* a CPU-only pod (``num_gpu == 0``) is skipped;
* a pod never scheduled (no ``scheduled_time``: Pending at the trace's end) is skipped,
  since the trace gives it no run time;
* its run time is ``deletion_time - scheduled_time``; a pod still Running at the trace's
  end has the trace's end as its deletion time, so its run time is cut there (kept,
  counted as censored);
* it arrives at ``creation_time`` (re-based so the first kept pod arrives at 0);
* ``gpu_milli < 1000`` on a one-GPU pod is a share of one GPU (``gpu_fraction``);
  ``gpu_spec`` (``V100M16|V100M32``) the GPU types it may use (``gpu_types``).

The cluster: each GPU node's GPUs, of its type (``GPU.kind``), with the memory of that
type (:data:`GPU_MEMORY_MB`) and no per-process reserve, since a pod's ``gpu_milli``
already is its whole share of the GPU. Imports nothing heavier than the stdlib and the
simulator's cluster records.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
from dataclasses import dataclass
from pathlib import Path

from philly.jobs import TraceJob
from philly.report import LoadReport, TraceFormatError
from tfgshare.paths import shared_dir
from tfgshare.policies.base import GPU

from .cluster import SimCluster

TRACE_NAME = "alibaba-2023"
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos",
               "pod_phase", "creation_time", "deletion_time", "scheduled_time")
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
MAX_CORRUPT_SHARE = 0.10   # as philly.trace: more corrupt lines than this fails the load
MAX_CORRUPT_FLOOR = 5

# GPU memory per type, MB. Sources: NVIDIA's data sheets (Tesla P100 PCIe 16 GB, Tesla T4
# 16 GB, Tesla V100 16/32 GB, A10 24 GB). G1-G3 are undisclosed internal codes in the
# trace: 32 GB is an ESTIMATE (it changes no placement here, since a pod's share is a
# fraction of whatever GPU it gets; only megabytes in reports move with it).
GPU_MEMORY_MB = {"P100": 16384, "T4": 16384, "V100M16": 16384, "V100M32": 32768,
                 "A10": 24576, "G1": 32768, "G2": 32768, "G3": 32768}
UNKNOWN_GPU_MEMORY_MB = 32768   # an ESTIMATE, for a type not listed above


@dataclass(frozen=True)
class Node:
    """One node of the node list."""

    sn: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str          # GPU type ("" on a CPU-only node)


@dataclass(frozen=True)
class Pod:
    """One task of the pod list (times in seconds; ``scheduled`` None: never scheduled)."""

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_types: tuple[str, ...]
    qos: str
    phase: str
    creation: float
    deletion: float
    scheduled: float | None


def trace_dir() -> Path:
    """The folder of the shipped trace files: ``<shared>/data/alibaba/gpu-v2023``."""
    return shared_dir() / "data" / "alibaba" / "gpu-v2023"


def default_pod_list() -> Path:
    """The shipped default pod list (8,152 tasks)."""
    return trace_dir() / "openb_pod_list_default.csv.gz"


def default_node_list() -> Path:
    """The shipped list of the trace's GPU nodes (1,213 nodes, 6,212 GPUs)."""
    return trace_dir() / "openb_node_list_gpu_node.csv"


def is_pod_list(path: str | Path) -> bool:
    """Whether a file (gzip or not) starts with the pod list's header."""
    try:
        with _open(Path(path)) as f:
            header = f.readline()
    except (OSError, EOFError, UnicodeDecodeError):
        return False
    names = [c.strip().lower() for c in header.lstrip("\ufeff").split(",")]
    return set(POD_COLUMNS) <= set(names)


def _open(path: Path) -> io.TextIOBase:
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rt", encoding="utf-8") if gz else open(path, encoding="utf-8")


def _rows(path: Path, columns: tuple[str, ...], report: LoadReport, strict: bool):
    """(line number, row dict) of a CSV file with these columns; a clear error if absent."""
    if not path.is_file():
        raise FileNotFoundError(f"Alibaba trace file not found: {path} "
                                "(set TFGSHARE_SHARED to the shared folder)")
    try:
        with _open(path) as f:
            reader = csv.reader(f)
            header = [c.strip().lower() for c in next(reader, [])]
            if header and header[0].startswith("\ufeff"):
                header[0] = header[0][1:]
            missing = [c for c in columns if c not in header]
            if missing:
                raise TraceFormatError(f"{path}: not an Alibaba GPU trace file: the header "
                                       f"lacks {', '.join(missing)}")
            index = [header.index(c) for c in columns]
            for row in reader:
                if not row or not any(cell.strip() for cell in row):
                    continue
                report.rows += 1
                line = reader.line_num
                if len(row) != len(header):
                    _corrupt(report, path, line, f"{len(row)} fields, expected "
                             f"{len(header)}", strict)
                    continue
                yield line, {c: row[i].strip() for c, i in zip(columns, index)}
    except (OSError, EOFError, UnicodeDecodeError, csv.Error) as err:
        raise TraceFormatError(f"{path}: cannot read the file ({err})") from None


def _corrupt(report: LoadReport, path: Path, line: int, problem: str, strict: bool) -> None:
    if strict:
        raise TraceFormatError(f"{path}: line {line}: {problem}")
    report.add_problem(f"{path.name}:{line}", problem)


def _check_corrupt(report: LoadReport, path: Path) -> None:
    allowed = max(MAX_CORRUPT_FLOOR, int(MAX_CORRUPT_SHARE * report.rows))
    if report.corrupt > allowed:
        raise TraceFormatError(f"{path}: {report.corrupt} of {report.rows} lines are corrupt "
                               f"(at most {allowed} are skipped); first: {report.problems[0]}")


def _int(text: str, name: str, low: int = 0) -> int:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{name} {text!r} is not a number") from None
    if not math.isfinite(value) or value != int(value) or value < low:
        raise ValueError(f"{name} {text!r} must be an integer >= {low}")
    return int(value)


def _time(text: str, name: str) -> float | None:
    if text == "" or text.lower() in ("nan", "none"):
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{name} {text!r} is not a time in seconds") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} {text!r} must be a time >= 0 s")
    return value


def load_nodes(path: str | Path | None = None, *, strict: bool = False,
               report: LoadReport | None = None) -> list[Node]:
    """The nodes of a node list file (default: the shipped GPU nodes)."""
    path = Path(path) if path is not None else default_node_list()
    report = LoadReport(path=str(path), format="alibaba-nodes") if report is None else report
    nodes: list[Node] = []
    for line, r in _rows(path, NODE_COLUMNS, report, strict):
        try:
            gpus = _int(r["gpu"], "gpu")
            model = "" if r["model"].lower() in ("", "nan") else r["model"]
            if gpus and not model:
                raise ValueError(f"{gpus} GPUs of no model")
            nodes.append(Node(r["sn"], _int(r["cpu_milli"], "cpu_milli"),
                              _int(r["memory_mib"], "memory_mib"), gpus, model))
        except ValueError as err:
            _corrupt(report, path, line, str(err), strict)
    _check_corrupt(report, path)
    report.loaded = len(nodes)
    return nodes


def load_pods(path: str | Path | None = None, *, strict: bool = False,
              report: LoadReport | None = None) -> list[Pod]:
    """The pods of a pod list file (default: the shipped one), in file order."""
    path = Path(path) if path is not None else default_pod_list()
    report = LoadReport(path=str(path), format="alibaba-pods") if report is None else report
    pods: list[Pod] = []
    for line, r in _rows(path, POD_COLUMNS, report, strict):
        try:
            num_gpu = _int(r["num_gpu"], "num_gpu")
            milli = _int(r["gpu_milli"], "gpu_milli")
            if num_gpu and not 0 < milli <= 1000:
                raise ValueError(f"gpu_milli {milli} must be in 1..1000 for a GPU pod")
            if num_gpu > 1 and milli != 1000:
                raise ValueError(f"a {num_gpu}-GPU pod asks for gpu_milli {milli}; only "
                                 "one-GPU pods may ask for a share")
            creation = _time(r["creation_time"], "creation_time")
            deletion = _time(r["deletion_time"], "deletion_time")
            if creation is None or deletion is None:
                raise ValueError("creation_time and deletion_time are required")
            scheduled = _time(r["scheduled_time"], "scheduled_time")
            if scheduled is not None and not creation <= scheduled <= deletion:
                raise ValueError(f"scheduled_time {scheduled:g} is not between creation "
                                 f"{creation:g} and deletion {deletion:g}")
            spec = r["gpu_spec"]
            types = () if spec.lower() in ("", "nan") else tuple(
                t.strip() for t in spec.split("|") if t.strip())
            pods.append(Pod(r["name"], _int(r["cpu_milli"], "cpu_milli"),
                            _int(r["memory_mib"], "memory_mib"), num_gpu, milli, types,
                            r["qos"], r["pod_phase"], creation, deletion, scheduled))
        except ValueError as err:
            _corrupt(report, path, line, str(err), strict)
    _check_corrupt(report, path)
    report.loaded = len(pods)
    return pods


def trace_jobs(pods: list[Pod], report: LoadReport) -> list[TraceJob]:
    """The pods a simulator can replay, as jobs by arrival (see the module doc)."""
    end = max((p.deletion for p in pods), default=0.0)
    jobs: list[TraceJob] = []
    censored = 0
    for p in pods:
        if p.num_gpu == 0:
            report.skipped["CPU-only pod (num_gpu 0)"] += 1
            continue
        if p.scheduled is None:
            report.skipped["never scheduled (Pending at the trace's end: no run time)"] += 1
            continue
        duration = p.deletion - p.scheduled
        if duration <= 0:
            report.skipped["no run time (deleted when scheduled)"] += 1
            continue
        if p.phase == "Running" and p.deletion >= end:
            censored += 1
        fraction = p.gpu_milli / 1000.0 if p.num_gpu == 1 and p.gpu_milli < 1000 else None
        jobs.append(TraceJob(p.name, p.creation, p.num_gpu, duration, vc=p.qos,
                             gpu_fraction=fraction, gpu_types=p.gpu_types))
    typed = sum(1 for j in jobs if j.gpu_types)
    if typed:
        report.notes.append(f"{typed} pod(s) ask for GPU types (gpu_spec): honoured by the "
                            "sharing placements (--placement) and the fill experiment, not "
                            "by fifo, sjf, tiresias, gandiva or fgs")
    if censored:
        report.notes.append(f"{censored} pod(s) still Running at the trace's end: their run "
                            "time is cut at the trace's end (deletion_time), a lower bound")
    jobs.sort(key=lambda j: (j.submit_time, j.id))
    if jobs:
        t0 = jobs[0].submit_time
        jobs = [j.copy_with(submit_time=j.submit_time - t0) for j in jobs]
    report.notes.append("qos is kept as the job's vc; cpu_milli and memory_mib are used by "
                        "placement rules that score nodes, not by the replay's GPU accounting")
    return jobs


def gpu_memory_mb(model: str) -> int:
    """The memory of one GPU of this trace type (see :data:`GPU_MEMORY_MB`)."""
    return GPU_MEMORY_MB.get(model, UNKNOWN_GPU_MEMORY_MB)


def cluster_from_nodes(nodes: list[Node], name: str = TRACE_NAME) -> SimCluster:
    """The trace's GPU nodes as a simulated cluster (GPU type in ``GPU.kind``, no reserve)."""
    gpus = tuple(GPU(f"{n.sn}:{i}", n.sn, i, gpu_memory_mb(n.model), kind=n.model)
                 for n in nodes for i in range(n.gpus))
    if not gpus:
        raise ValueError(f"cluster {name!r}: the node list has no GPU")
    return SimCluster(name, gpus, reserve_mb=0.0)


def load_alibaba_cluster(path: str | Path | None = None) -> SimCluster:
    """The cluster of a node list file (default: the shipped GPU nodes)."""
    nodes = load_nodes(path)
    return cluster_from_nodes(nodes, TRACE_NAME if path is None else Path(path).stem)
