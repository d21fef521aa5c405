"""Loading a cluster trace file into :class:`TraceJob` lists.

The format is recognised by the file's content, not its name (gzip is undone
first):

* ``pollux``: the Pollux job CSV ``timestamp,duration,num_gpus,gpu_time,cluster``
  (the default Philly trace shipped in ``philly_dir()/pollux/philly.csv.gz``).
* ``cluster_job_log``: the original Philly JSON array of jobs (see
  :mod:`philly.joblog` for how attempts become one run time).
* ``tiresias``: the Tiresias simulator CSV
  ``job_id,num_gpu,submit_time,iterations,model_name,duration,interval``.
* ``helios``: the Helios/Lucid CSV
  ``job_id,user,vc,jobname,gpu_num,cpu_num,state,submit_time,duration``, where
  ``submit_time`` is a date-time or seconds.

Pollux rows carry no job id; their id is ``philly-<n>``, n the 0-based data row.
Jobs that cannot be replayed (no GPUs; job-log entries without a finished
attempt) are skipped and counted in the :class:`LoadReport` in either mode.
Corrupt lines raise :class:`TraceFormatError` with ``strict=True``; by default a
few (at most 10 % of the file, or 5 lines) are skipped and counted.
"""

from __future__ import annotations

import gzip
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from philly import joblog
from philly.checks import Checks
from philly.csvtable import read_table
from philly.filters import rebase, select
from philly.jobs import TraceJob
from philly.report import LoadReport, TraceFormatError
from tfgshare.paths import philly_dir

log = logging.getLogger(__name__)

DEFAULT_TRACE = "philly"


def default_trace_path() -> Path:
    """The shipped Philly job CSV (Pollux's projection of ``cluster_job_log``)."""
    return philly_dir() / "pollux" / "philly.csv.gz"


def load_trace(source: str | Path = DEFAULT_TRACE, *, strict: bool = False,
               report: LoadReport | None = None, **filters) -> list[TraceJob]:
    """Jobs of a trace file, filtered, sorted by submit time and re-based to start at 0.

    ``source`` is ``"philly"`` (the shipped trace) or a file path. ``filters`` are
    those of :func:`philly.filters.select`; numeric ``start``/``end`` are seconds
    since the trace's first submission. Pass a :class:`LoadReport` to receive the
    counts of corrupt, skipped and filtered entries.
    """
    report = LoadReport() if report is None else report
    path = _resolve(source)
    report.path = str(path)
    fmt, compression = _sniff(path)
    report.format = fmt.name
    frame = fmt.read(path, compression, strict, report)
    jobs, origin = _to_jobs(frame)
    kept = select(jobs, origin=origin, **filters)
    shift = kept[0].submit_time if kept else 0.0
    kept = rebase(kept)
    report.filtered_out = len(jobs) - len(kept)
    report.loaded = len(kept)
    report.origin = origin + timedelta(seconds=shift) if origin is not None else None
    if report.corrupt:
        log.warning("%s", report.summary())
    elif report.skipped:
        log.info("%s", report.summary())
    return kept


@dataclass(frozen=True)
class TraceFormat:
    """A recognised trace format: the header columns that identify it and its reader."""

    name: str
    required: frozenset[str]
    read: Callable[[Path, str | None, bool, LoadReport], pd.DataFrame]


def _resolve(source: str | Path) -> Path:
    if str(source) == DEFAULT_TRACE:
        path = default_trace_path()
        if not path.is_file():
            raise FileNotFoundError(
                f"the default Philly trace is missing: {path} (set TFGSHARE_SHARED to the shared folder)")
        return path
    path = Path(source)
    if not path.is_file():
        raise FileNotFoundError(f"trace file not found: {path} (or use source={DEFAULT_TRACE!r})")
    return path


def _sniff(path: Path) -> tuple[TraceFormat, str | None]:
    with open(path, "rb") as f:
        compression = "gzip" if f.read(2) == b"\x1f\x8b" else None
    opener = gzip.open if compression else open
    try:
        with opener(path, "rt", encoding="utf-8", errors="replace") as f:
            head = f.read(4096)
    except (OSError, EOFError) as err:
        raise TraceFormatError(f"{path}: cannot read the file ({err})") from None
    head = head.lstrip("\ufeff \t\r\n")
    if not head:
        raise TraceFormatError(f"{path}: the file is empty")
    if head[0] in "[{":
        return JOB_LOG, compression
    header = head.splitlines()[0]
    names = {c.strip().lower() for c in header.split(",")}
    for fmt in CSV_FORMATS:
        if fmt.required <= names:
            return fmt, compression
    known = "; ".join(f"{f.name}: {','.join(sorted(f.required))}" for f in CSV_FORMATS)
    raise TraceFormatError(
        f"{path}, line 1: unknown trace header {header[:200]!r}; expected a JSON cluster_job_log "
        f"or a CSV with the columns of one of: {known}")


def _read_csv(convert: Callable[[Checks, pd.DataFrame], dict]) -> Callable:
    def read(path: Path, compression: str | None, strict: bool, report: LoadReport) -> pd.DataFrame:
        table = read_table(path, compression, strict, report)
        report.rows = len(table) + report.corrupt
        checks = Checks(path, table)
        columns = convert(checks, table)
        frame = pd.DataFrame(columns, index=table.index)
        frame = frame[checks.good_rows(strict, report)]
        if "interval" in frame:
            _note_interval(frame.pop("interval"), frame["submit"], report)
        no_gpus = frame["num_gpus"] == 0
        if no_gpus.any():
            report.skipped["no GPUs"] += int(no_gpus.sum())
            frame = frame[~no_gpus]
        return frame
    return read


def _row_ids(prefix: str, table: pd.DataFrame) -> pd.Series:
    return prefix + pd.Series(table.index - 2, index=table.index).astype(str)


def _pollux(checks: Checks, table: pd.DataFrame) -> dict:
    return {
        "id": _row_ids("philly-", table),
        "submit": checks.datetime("timestamp"),
        "num_gpus": checks.number("num_gpus", integer=True),
        "duration": checks.number("duration"),
        "vc": checks.text("cluster"),
    }


def _tiresias(checks: Checks, table: pd.DataFrame) -> dict:
    columns = {
        "id": checks.text("job_id", required=True),
        "submit": checks.number("submit_time", minimum=-np.inf),
        "num_gpus": checks.number("num_gpu", integer=True),
        "duration": checks.number("duration"),
        "model": checks.text("model_name"),
    }
    # neither column drives the Tiresias simulator: a bad value makes the job's
    # iterations unknown (0) or is counted in the interval note, never drops the row
    if "iterations" in table:
        it = pd.to_numeric(table["iterations"], errors="coerce")
        columns["total_steps"] = it.where((it >= 1) & (it == np.floor(it)), 0).fillna(0)
    if "interval" in table:
        columns["interval"] = pd.to_numeric(table["interval"], errors="coerce")
    return columns


def _note_interval(interval: pd.Series, submit: pd.Series, report: LoadReport) -> None:
    """The Tiresias ``interval`` (gap to the next row's submit) is not used: say so."""
    gaps = submit.shift(-1) - submit
    rows = interval.iloc[:-1]
    off = int((~((rows - gaps.iloc[:-1]).abs() <= 0.5)).sum()) if len(rows) else 0
    report.notes.append(
        "interval column not used: arrivals come from submit_time, as in the Tiresias "
        f"simulator ({off} of {len(rows)} rows give a gap that differs from the "
        "next row's submit_time)")


def _helios(checks: Checks, table: pd.DataFrame) -> dict:
    return {
        "id": checks.text("job_id", required=True),
        "submit": checks.seconds_or_datetime("submit_time"),
        "num_gpus": checks.number("gpu_num", integer=True),
        "duration": checks.number("duration"),
        "vc": checks.text("vc"),
    }


def _to_jobs(frame: pd.DataFrame) -> tuple[list[TraceJob], datetime | None]:
    """Sorted jobs with times in seconds since the first submission, and that time."""
    if frame.empty:
        return [], None
    submit = frame["submit"]
    order = np.argsort(submit.to_numpy(), kind="stable")
    frame = frame.iloc[order]
    submit = frame["submit"]
    origin = None
    if pd.api.types.is_datetime64_any_dtype(submit):
        origin = submit.iloc[0].to_pydatetime()
        seconds = (submit - submit.iloc[0]).dt.total_seconds()
    else:
        seconds = submit - submit.iloc[0]
    n = len(frame)

    def column(name: str, default, kind):
        if name not in frame:
            return [default] * n
        return frame[name].astype(kind).tolist()

    jobs = [
        TraceJob(*fields) for fields in zip(
            column("id", "", str), seconds.astype(float).tolist(), column("num_gpus", 0, int),
            column("duration", 0.0, float), column("vc", "", str), column("model", "", str),
            column("batch_size", 0, int), column("total_steps", 0, int),
        )
    ]
    return jobs, origin


CSV_FORMATS = (
    TraceFormat("pollux", frozenset({"timestamp", "duration", "num_gpus"}), _read_csv(_pollux)),
    TraceFormat("tiresias", frozenset({"job_id", "num_gpu", "submit_time", "duration"}), _read_csv(_tiresias)),
    TraceFormat("helios", frozenset({"job_id", "gpu_num", "submit_time", "duration"}), _read_csv(_helios)),
)
JOB_LOG = TraceFormat("cluster_job_log", frozenset(), joblog.read_job_log)
