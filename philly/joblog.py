"""Reading Philly's original ``cluster_job_log`` (one JSON array of jobs).

A job's run time is the sum of its attempts' durations (``end_time -
start_time``), so the gaps between a retry or preemption and the next attempt are
not counted; this is how Pollux built its job CSV. Its GPU count is the number of
GPUs in the first attempt, summed over the servers listed in its ``detail``.

Missing times are the string ``"None"``, ``""`` or JSON null. A job whose
submission time is missing, that has no attempts, an attempt without a start or
end (for instance still running when the log was taken) or no GPUs cannot be
replayed: it is skipped and counted by reason. An entry of the wrong shape, or a
time that is neither missing nor ``YYYY-MM-DD HH:MM:SS``, is corrupt.
"""

from __future__ import annotations

import gzip
import json
from datetime import datetime
from pathlib import Path

import pandas as pd

from philly.checks import reject_if_mostly_corrupt
from philly.report import LoadReport, TraceFormatError

MISSING = (None, "", "None")


class _Corrupt(ValueError):
    """An entry that does not have the cluster_job_log shape."""


def read_job_log(path: Path, compression: str | None, strict: bool, report: LoadReport) -> pd.DataFrame:
    """The usable jobs of a cluster_job_log file as a table (see the module docstring)."""
    opener = gzip.open if compression == "gzip" else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            entries = json.load(f)
    except json.JSONDecodeError as err:
        raise TraceFormatError(f"{path}, line {err.lineno}: invalid JSON ({err.msg})") from None
    except UnicodeDecodeError as err:
        raise TraceFormatError(f"{path}: not UTF-8 text ({err})") from None
    if not isinstance(entries, list):
        raise TraceFormatError(
            f"{path}: a cluster_job_log is a JSON array of jobs, found a JSON {type(entries).__name__}")
    report.rows = len(entries)
    rows = []
    for number, entry in enumerate(entries):
        try:
            job = _parse(entry)
        except _Corrupt as err:
            jobid = entry.get("jobid") if isinstance(entry, dict) else None
            where = f"{path}, job entry {number}" + (f" (jobid {jobid})" if isinstance(jobid, str) else "")
            if strict:
                raise TraceFormatError(f"{where}: {err}") from None
            report.add_problem(where, str(err))
            continue
        if isinstance(job, str):
            report.skipped[job] += 1
        else:
            rows.append(job)
    reject_if_mostly_corrupt(path, report, len(entries), "job entries")
    frame = pd.DataFrame(rows, columns=["id", "submit", "num_gpus", "duration", "vc"])
    frame["submit"] = pd.to_datetime(frame["submit"])
    return frame


def _parse(entry) -> tuple | str:
    """(jobid, submitted, num_gpus, run seconds, vc), or the reason it is skipped."""
    if not isinstance(entry, dict):
        raise _Corrupt(f"a job entry must be a JSON object, found {type(entry).__name__}")
    jobid = entry.get("jobid")
    if not isinstance(jobid, str) or not jobid:
        raise _Corrupt("missing jobid")
    submitted = _time(entry.get("submitted_time"), "submitted_time")
    attempts = entry.get("attempts")
    if not isinstance(attempts, list):
        raise _Corrupt(f"attempts must be a list, found {type(attempts).__name__}")
    spans = []
    for k, attempt in enumerate(attempts):
        if not isinstance(attempt, dict):
            raise _Corrupt(f"attempt {k} must be a JSON object")
        start = _time(attempt.get("start_time"), f"attempt {k} start_time")
        end = _time(attempt.get("end_time"), f"attempt {k} end_time")
        if start is not None and end is not None and end < start:
            raise _Corrupt(f"attempt {k} ends ({end}) before it starts ({start})")
        spans.append((start, end))
    gpus = _gpu_count(attempts[0]) if attempts else 0
    if submitted is None:
        return "no submit time"
    if not attempts:
        return "no attempts"
    if spans[-1][0] is not None and spans[-1][1] is None:
        return "still running"
    if any(start is None or end is None for start, end in spans):
        return "attempt without start or end time"
    if gpus == 0:
        return "no GPUs"
    run = sum((end - start).total_seconds() for start, end in spans)
    vc = entry.get("vc")
    return jobid, submitted, gpus, run, vc if isinstance(vc, str) else ""


def _time(value, what: str) -> datetime | None:
    if value in MISSING:
        return None
    if not isinstance(value, str):
        raise _Corrupt(f"{what} must be text like 2017-10-07 01:11:39, found {value!r}")
    try:
        return datetime.fromisoformat(value.strip())
    except ValueError:
        raise _Corrupt(f"{what} {value!r} is not a date-time like 2017-10-07 01:11:39") from None


def _gpu_count(attempt: dict) -> int:
    detail = attempt.get("detail")
    if detail in MISSING:
        return 0
    if not isinstance(detail, list):
        raise _Corrupt(f"attempt 0 detail must be a list of servers, found {type(detail).__name__}")
    total = 0
    for server in detail:
        gpus = server.get("gpus") if isinstance(server, dict) else None
        if not isinstance(gpus, list):
            raise _Corrupt("attempt 0 detail entries must be objects with a gpus list")
        total += len(gpus)
    return total
