"""The shipped Philly trace and the CSV trace formats, as a user would check them."""

from __future__ import annotations

import gzip
import statistics
import subprocess
import sys
from collections import Counter
from datetime import datetime

import pytest

from philly import LoadReport, TraceFormatError, TraceJob, load_trace


@pytest.fixture(scope="module")
def philly():
    report = LoadReport()
    return load_trace(report=report), report


def test_shipped_trace_size_and_origin(philly):
    jobs, report = philly
    assert len(jobs) == 82_247
    assert report.format == "pollux" and report.rows == 82_247 and report.corrupt == 0
    assert report.origin == datetime(2017, 9, 4, 10, 30, 41)
    assert jobs[0].submit_time == 0.0
    assert jobs[-1].submit_time / 86400 == pytest.approx(108.9, abs=0.05)
    assert len({j.id for j in jobs}) == len(jobs)
    assert all(a.submit_time <= b.submit_time for a, b in zip(jobs, jobs[1:]))


def test_shipped_trace_gpu_shares_and_vcs(philly):
    jobs, _ = philly
    counts = Counter(j.num_gpus for j in jobs)
    shares = {g: round(100 * counts[g] / len(jobs), 2) for g in (1, 2, 4, 8)}
    assert shares == {1: 93.17, 2: 2.21, 4: 2.27, 8: 2.00}
    assert not {3, 5, 6, 7} & set(counts)
    vcs = Counter(j.vc for j in jobs)
    assert len(vcs) == 15 and vcs["6214e9"] == 41_226 and vcs["795a4c"] == 3
    assert round(sum(j.gpu_time for j in jobs) / 3600) == 978_078


def test_shipped_trace_durations_are_seconds(philly):
    jobs, _ = philly
    durations = [j.duration for j in jobs]
    assert statistics.median(durations) == 1144
    assert min(durations) == 1 and max(durations) == 4_628_226
    # the README's example job: submitted 2017-10-07 01:11:39, 8 GPUs, 74 s + 193,182 s
    origin = datetime(2017, 9, 4, 10, 30, 41)
    at = (datetime(2017, 10, 7, 1, 11, 39) - origin).total_seconds()
    assert TraceJob("", at, 8, 193_256.0, "ee9e8c") in [
        TraceJob("", j.submit_time, j.num_gpus, j.duration, j.vc) for j in jobs if j.submit_time == at]


def test_date_window_filter_is_rebased():
    report = LoadReport()
    jobs = load_trace(start="2017-10-01", end=datetime(2017, 11, 1), report=report)
    assert len(jobs) == 47_192  # October, per the README
    assert jobs[0].submit_time == 0 and report.origin >= datetime(2017, 10, 1)
    assert report.filtered_out == 82_247 - 47_192


def test_filters_pass_through(philly):
    jobs = load_trace(vcs={"ee9e8c"}, min_gpus=8, max_jobs=100)
    assert len(jobs) == 100 and {j.vc for j in jobs} == {"ee9e8c"}
    assert all(j.num_gpus >= 8 for j in jobs)
    with pytest.raises(TypeError, match="colour"):
        load_trace(colour="red")


def test_gzip_detected_by_content_not_name(tmp_path):
    path = tmp_path / "trace.txt"
    path.write_bytes(gzip.compress(b"timestamp,duration,num_gpus,gpu_time,cluster\n"
                                   b"2017-10-09 07:01:55,66.0,1,66.0,11cb48\n"
                                   b"2017-10-09 06:13:03,2951.0,2,5902.0,6214e9\n"))
    jobs = load_trace(path)
    assert [(j.submit_time, j.num_gpus, j.duration, j.vc) for j in jobs] == [
        (0.0, 2, 2951.0, "6214e9"), (2932.0, 1, 66.0, "11cb48")]


def test_tiresias_csv(tmp_path):
    path = tmp_path / "tiresias.csv"
    path.write_text("job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
                    "1,4,100,5000,vgg19,3600,10\n"
                    "2,1,50,200,resnet50,120,5\n"
                    "3,2,100,800,alexnet,300,5\n")
    report = LoadReport()
    jobs = load_trace(path, report=report)
    assert report.format == "tiresias" and report.origin is None
    assert [(j.id, j.submit_time, j.num_gpus, j.duration, j.model, j.total_steps) for j in jobs] == [
        ("2", 0.0, 1, 120.0, "resnet50", 200),
        ("1", 50.0, 4, 3600.0, "vgg19", 5000),   # ties keep file order
        ("3", 50.0, 2, 300.0, "alexnet", 800),
    ]


def test_helios_csv_with_dates_and_cpu_jobs(tmp_path):
    path = tmp_path / "helios.csv"
    path.write_text("job_id,user,vc,jobname,gpu_num,cpu_num,state,submit_time,duration\n"
                    "j1,u1,vcA,train,8,16,COMPLETED,2020-04-01 00:10:00,600\n"
                    "j2,u2,vcB,cpu,0,4,COMPLETED,2020-04-01 00:00:00,30\n"
                    "j3,u1,vcA,eval,1,2,FAILED,2020-04-01 00:05:00,60\n")
    report = LoadReport()
    jobs = load_trace(path, report=report)
    assert report.format == "helios" and report.skipped == {"no GPUs": 1}
    assert report.origin == datetime(2020, 4, 1, 0, 5)
    assert [(j.id, j.submit_time, j.num_gpus, j.vc) for j in jobs] == [("j3", 0.0, 1, "vcA"), ("j1", 300.0, 8, "vcA")]


def test_helios_csv_with_seconds(tmp_path):
    path = tmp_path / "lucid.csv"
    path.write_text("job_id,user,vc,jobname,gpu_num,cpu_num,state,submit_time,duration\n"
                    "a,u,v,n,2,4,COMPLETED,7200,100\n"
                    "b,u,v,n,1,4,COMPLETED,3600,100\n")
    jobs = load_trace(path, start=100)
    assert [(j.id, j.submit_time) for j in jobs] == [("a", 0.0)]


def _pollux_lines(n: int) -> list[str]:
    return [f"2017-10-01 00:{i // 60:02d}:{i % 60:02d},{60 + i}.0,1,{60 + i}.0,vc1" for i in range(n)]


def test_corrupt_lines_strict_and_lenient(tmp_path):
    lines = _pollux_lines(30)
    lines[10] = "2017-10-01 01:00:00,abc,1,0,vc1"       # line 12: bad number
    lines[20] = "2017-10-01 01:00:00,60.0,1,60.0,vc1,x"  # line 22: extra field
    path = tmp_path / "bad.csv"
    path.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n" + "\n".join(lines) + "\n")
    with pytest.raises(TraceFormatError, match=r"bad\.csv, line 22: expected 5 fields, found 6"):
        load_trace(path, strict=True)
    lines[20] = "2017-10-01 01:00:00,60.0,1.5,60.0,vc1"  # line 22: fractional GPUs
    path.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n" + "\n".join(lines) + "\n")
    with pytest.raises(TraceFormatError, match=r"bad\.csv, line 12: duration 'abc' is not a number"):
        load_trace(path, strict=True)
    report = LoadReport()
    jobs = load_trace(path, report=report)
    assert len(jobs) == 28 and report.rows == 30 and report.corrupt == 2
    assert "line 12" in report.problems[0] and "line 22: num_gpus '1.5'" in report.problems[1]


def test_ragged_line_skipped_when_lenient(tmp_path):
    lines = _pollux_lines(30)
    lines[5] = "2017-10-01 01:00:00,60.0"
    lines[6] = "2017-10-01 01:00:00,60.0,1,60.0,vc1,extra,fields"
    path = tmp_path / "ragged.csv"
    path.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n" + "\n".join(lines) + "\n\n")
    report = LoadReport()
    jobs = load_trace(path, report=report)
    assert len(jobs) == 28 and report.corrupt == 2 and report.rows == 30
    assert any("line 8: expected 5 fields, found 7" in p for p in report.problems)
    assert any("line 7: expected 5 fields, found 2" in p for p in report.problems)


def test_mostly_corrupt_file_is_rejected(tmp_path):
    lines = _pollux_lines(30)
    for i in range(0, 30, 2):
        lines[i] = lines[i].replace(",1,", ",many,")
    path = tmp_path / "worse.csv"
    path.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n" + "\n".join(lines) + "\n")
    with pytest.raises(TraceFormatError, match="15 of 30 lines are corrupt"):
        load_trace(path)


@pytest.mark.parametrize("text, message", [
    ("jobid,start,end\n1,2,3\n", r"line 1: unknown trace header 'jobid,start,end'"),
    ("", "the file is empty"),
    ("\n\n", "the file is empty"),
])
def test_unknown_or_empty_file(tmp_path, text, message):
    path = tmp_path / "mystery.csv"
    path.write_text(text)
    with pytest.raises(TraceFormatError, match=message):
        load_trace(path)


def test_missing_file_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.csv"):
        load_trace(tmp_path / "nope.csv")


def test_philly_never_imports_tensorflow():
    code = ("import sys, philly, philly.filters, philly.mapping, philly.machines\n"
            "philly.load_trace(max_jobs=10)\n"
            "assert 'tensorflow' not in sys.modules, 'tensorflow was imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_empty_job_id_is_corrupt(tmp_path):
    path = tmp_path / "tiresias.csv"
    path.write_text("job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
                    " ,4,100,5000,vgg19,3600,10\n")
    with pytest.raises(TraceFormatError, match=r"tiresias\.csv, line 2: job_id '' is not a non-empty name"):
        load_trace(path, strict=True)


def test_file_of_only_corrupt_lines_is_rejected(tmp_path):
    path = tmp_path / "one.csv"
    path.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-01 00:00:00,-5,1,0,vc1\n")
    with pytest.raises(TraceFormatError, match=r"1 of 1 lines are corrupt.*line 2: duration '-5' is not a number >= 0"):
        load_trace(path)


def test_file_of_only_ragged_lines_is_rejected(tmp_path):
    path = tmp_path / "ragged.csv"
    path.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n1,2,3,4,5,6\n1,2,3,4,5,6,7\n")
    with pytest.raises(TraceFormatError, match=r"2 of 2 lines are corrupt.*line 2: expected 5 fields, found 6"):
        load_trace(path)


@pytest.mark.parametrize("prefix, newline", [("\ufeff", "\r\n"), ("\n\n", "\n")])
def test_bom_crlf_and_leading_blank_lines(tmp_path, prefix, newline):
    rows = ["timestamp,duration,num_gpus,gpu_time,cluster", *_pollux_lines(3), "bad,1,1,1,vc1"]
    path = tmp_path / "odd.csv"
    path.write_bytes((prefix + newline.join(rows) + newline).encode())
    report = LoadReport()
    assert len(load_trace(path, report=report)) == 3
    assert report.corrupt == 1 and f"line {4 + prefix.count(chr(10)) + 1}: timestamp 'bad'" in report.problems[0]
    path.write_bytes((prefix + newline.join(rows[:-1] + ["x,1,1,1,vc1,extra"]) + newline).encode())
    report = LoadReport()
    assert len(load_trace(path, report=report)) == 3
    assert f"line {4 + prefix.count(chr(10)) + 1}: expected 5 fields" in report.problems[0]


def test_lenient_load_warns_with_counts(tmp_path, caplog):
    lines = _pollux_lines(20)
    lines[3] = "2017-10-01 00:00:03,60.0,1,60.0,vc1,extra"
    path = tmp_path / "warn.csv"
    path.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n" + "\n".join(lines) + "\n")
    with caplog.at_level("WARNING", logger="philly.trace"):
        assert len(load_trace(path)) == 19
    assert "20 entries, 19 jobs loaded, 1 corrupt" in caplog.text
