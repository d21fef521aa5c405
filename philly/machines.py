"""Philly's servers (machine lists) and virtual-cluster sizes."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from philly.report import TraceFormatError
from tfgshare.paths import philly_dir

DEFAULT_GPU_MEMORY_MB = 24 * 1024  # the revised list has no memory column; most GPUs were 24GB
_MEMORY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*GB\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Machine:
    """One server: its id (``m31``), GPU count and memory per GPU."""

    id: str
    num_gpus: int
    gpu_memory_mb: int


def machine_list_path(kind: str = "official") -> Path:
    """Where the shipped machine list of that kind lies."""
    files = {"official": "cluster_machine_list", "revised": "revised_machine_list.csv"}
    if kind not in files:
        raise ValueError(f"unknown machine list kind {kind!r}; use 'official' or 'revised'")
    return philly_dir() / "qinghao-hu" / files[kind]


def load_machine_list(kind: str = "official", path: str | Path | None = None) -> list[Machine]:
    """Philly's machines with at least one GPU, in file order.

    ``official`` is the trace's ``cluster_machine_list`` (2 x 12GB or 8 x 24GB GPUs
    per server). ``revised`` takes GPU counts inferred from the GPU utilisation log;
    it has no memory column, so memory comes from the official list by machine id
    (24GB for machines it lacks). ``path`` overrides the shipped file.
    """
    path = Path(path) if path is not None else machine_list_path(kind)
    if kind == "official":
        table = _read(path, ["machineid", "number of gpus", "single gpu mem"])
        memory = [_memory_mb(v, path, line) for line, v in zip(table.index, table["single gpu mem"])]
    elif kind == "revised":
        table = _read(path, ["machineid", "number of gpus"])
        official = {m.id: m.gpu_memory_mb for m in load_machine_list("official")}
        memory = [official.get(mid, DEFAULT_GPU_MEMORY_MB) for mid in table["machineid"]]
    else:
        raise ValueError(f"unknown machine list kind {kind!r}; use 'official' or 'revised'")
    gpus = pd.to_numeric(table["number of gpus"], errors="coerce")
    bad = gpus.isna() | (gpus < 0) | (gpus != gpus.round())
    if bad.any():
        line = table.index[bad.to_numpy()][0]
        raise TraceFormatError(
            f"{path}, line {line}: number of GPUs {table.at[line, 'number of gpus']!r} is not a count")
    return [
        Machine(mid, n, mem)
        for mid, n, mem in zip(table["machineid"], gpus.astype(int).tolist(), memory)
        if n > 0
    ]


def vc_sizes(path: str | Path | None = None) -> dict[str, int]:
    """Nodes per Philly virtual cluster, from Helios's ``philly_vc.csv``."""
    path = Path(path) if path is not None else philly_dir() / "helios" / "philly_vc.csv"
    table = _read(path, ["vc", "node num"])
    nodes = pd.to_numeric(table["node num"], errors="coerce")
    bad = nodes.isna() | (nodes < 0) | (nodes != nodes.round())
    if bad.any():
        line = table.index[bad.to_numpy()][0]
        raise TraceFormatError(f"{path}, line {line}: node num {table.at[line, 'node num']!r} is not a count")
    return dict(zip(table["vc"], nodes.astype(int).tolist()))


def _read(path: Path, needed: list[str]) -> pd.DataFrame:
    try:
        table = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise TraceFormatError(f"{path}: not a readable CSV file ({err})") from None
    table.columns = [str(c).strip().lower() for c in table.columns]
    missing = [c for c in needed if c not in table]
    if missing:
        raise TraceFormatError(f"{path}, line 1: missing column(s) {missing}; found {list(table.columns)}")
    table.index = table.index + 2
    return table.apply(lambda col: col.str.strip())


def _memory_mb(value: str, path: Path, line: int) -> int:
    match = _MEMORY.match(value)
    if not match:
        raise TraceFormatError(f"{path}, line {line}: GPU memory {value!r} is not like '24GB'")
    return int(float(match.group(1)) * 1024)
