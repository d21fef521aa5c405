"""Small cluster_job_log files with every quirk of the original Philly log."""

from __future__ import annotations

import gzip
import json
from datetime import datetime

import pytest

from philly import LoadReport, TraceFormatError, load_trace


def attempt(start, end, *servers):
    return {"start_time": start, "end_time": end,
            "detail": [{"ip": ip, "gpus": [f"gpu{i}" for i in range(n)]} for ip, n in servers]}


def job(jobid, submitted, attempts, vc="ee9e8c", status="Pass"):
    return {"status": status, "vc": vc, "jobid": jobid, "user": "a1b2c3",
            "submitted_time": submitted, "attempts": attempts}


QUIRKY_LOG = [
    # two attempts with a gap between them, first on two servers (4 + 4 GPUs)
    job("app_14199", "2017-10-07 01:11:39", [
        attempt("2017-10-07 01:11:40", "2017-10-07 01:12:54", ("m1", 4), ("m2", 4)),   # 74 s
        attempt("2017-10-07 01:13:01", "2017-10-09 06:52:43", ("m3", 8)),              # 193,182 s
    ]),
    job("no_attempts", "2017-10-07 02:00:00", []),
    job("none_start", "2017-10-07 02:00:00", [attempt("None", "2017-10-07 03:00:00", ("m4", 1))]),
    job("still_running", "2017-10-07 02:00:00", [
        attempt("2017-10-07 02:00:05", "2017-10-07 02:10:05", ("m4", 1)),
        attempt("2017-10-07 02:20:00", "None", ("m4", 1)),
    ]),
    job("empty_times", "2017-10-07 02:00:00", [attempt("", "", ("m4", 1))]),
    job("null_end", "2017-10-07 02:00:00", [attempt("2017-10-07 02:00:05", None, ("m5", 2))]),  # running
    job("gap_none", "2017-10-07 02:00:00", [
        attempt("2017-10-07 02:00:05", "None", ("m5", 2)),
        attempt("2017-10-07 02:30:00", "2017-10-07 02:40:00", ("m5", 2)),
    ]),
    job("no_submit", "None", [attempt("2017-10-07 02:00:05", "2017-10-07 02:01:05", ("m5", 2))]),
    job("no_gpus", "2017-10-07 02:00:00", [attempt("2017-10-07 02:00:05", "2017-10-07 02:01:05")]),
    # GPU count comes from the first attempt even when a later one differs
    job("grew", "2017-10-06 23:00:00", [
        attempt("2017-10-06 23:00:10", "2017-10-06 23:01:10", ("m6", 2)),
        attempt("2017-10-06 23:05:00", "2017-10-06 23:06:00", ("m7", 4)),
    ], vc="6214e9"),
]


def write(tmp_path, entries, name="cluster_job_log", compress=False):
    path = tmp_path / name
    text = json.dumps(entries, indent=2).encode()
    path.write_bytes(gzip.compress(text) if compress else text)
    return path


@pytest.mark.parametrize("compress", [False, True])
def test_job_log_quirks(tmp_path, compress):
    report = LoadReport()
    jobs = load_trace(write(tmp_path, QUIRKY_LOG, compress=compress), report=report)
    assert report.format == "cluster_job_log" and report.rows == len(QUIRKY_LOG)
    assert report.corrupt == 0
    assert report.skipped == {"no attempts": 1, "attempt without start or end time": 3,
                              "still running": 2, "no submit time": 1, "no GPUs": 1}
    assert report.origin == datetime(2017, 10, 6, 23, 0, 0)
    assert [(j.id, j.submit_time, j.num_gpus, j.duration, j.vc) for j in jobs] == [
        ("grew", 0.0, 2, 120.0, "6214e9"),
        ("app_14199", 7899.0, 8, 193_256.0, "ee9e8c"),  # gaps excluded, as Pollux does
    ]


def test_job_log_filters(tmp_path):
    jobs = load_trace(write(tmp_path, QUIRKY_LOG), min_gpus=4)
    assert [(j.id, j.submit_time) for j in jobs] == [("app_14199", 0.0)]


def test_corrupt_entry_strict_and_lenient(tmp_path):
    entries = QUIRKY_LOG + [
        job("bad_time", "2017-10-07 02:00:00", [attempt("yesterday", "2017-10-07 03:00:00", ("m4", 1))]),
    ]
    path = write(tmp_path, entries)
    with pytest.raises(TraceFormatError,
                       match=r"cluster_job_log, job entry 10 \(jobid bad_time\): attempt 0 start_time 'yesterday'"):
        load_trace(path, strict=True)
    report = LoadReport()
    jobs = load_trace(path, report=report)
    assert len(jobs) == 2 and report.corrupt == 1 and "job entry 10" in report.problems[0]


@pytest.mark.parametrize("entry, problem", [
    ("just text", "must be a JSON object"),
    ({"submitted_time": "2017-10-07 02:00:00", "attempts": []}, "missing jobid"),
    (job("x", "2017-10-07 02:00:00", {"start_time": "a"}), "attempts must be a list"),
    (job("x", "2017-10-07 02:00:00", [attempt("2017-10-07 03:00:00", "2017-10-07 02:00:00", ("m1", 1))]),
     "attempt 0 ends .* before it starts"),
    (job("x", 1507341600, []), "submitted_time must be text"),
])
def test_malformed_entries_are_named(tmp_path, entry, problem):
    with pytest.raises(TraceFormatError, match=problem):
        load_trace(write(tmp_path, [entry]), strict=True)


def test_invalid_json_gives_line(tmp_path):
    path = tmp_path / "cluster_job_log"
    path.write_text('[\n  {"jobid": "a",\n  "vc": }\n]\n')
    with pytest.raises(TraceFormatError, match=r"cluster_job_log, line 3: invalid JSON"):
        load_trace(path)


def test_json_object_is_not_a_job_log(tmp_path):
    path = write(tmp_path, {"jobs": []})
    with pytest.raises(TraceFormatError, match="JSON array of jobs"):
        load_trace(path)


def test_many_corrupt_entries_rejected(tmp_path):
    entries = [job(f"j{i}", "2017-10-07 02:00:00" if i % 2 else "soon", []) for i in range(20)]
    with pytest.raises(TraceFormatError, match="10 of 20 job entries are corrupt"):
        load_trace(write(tmp_path, entries))
