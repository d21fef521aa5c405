"""``tfgshare simulate`` end to end on a small trace file."""

from __future__ import annotations

import csv
import json

import pytest

from tfgshare.cli import main as tfgshare


def _trace(tmp_path):
    path = tmp_path / "mini.csv"
    rows = ["timestamp,duration,num_gpus,gpu_time,cluster"]
    for i in range(14):
        gpus = (1, 1, 2, 4)[i % 4]
        dur = 120 + 97 * i
        rows.append(f"2017-10-01 00:{2 * i:02d}:00,{dur}.0,{gpus},{dur * gpus}.0,vc1")
    path.write_text("\n".join(rows) + "\n")
    return path


def test_simulate_writes_table_csv_json_and_plots(tmp_path, capsys):
    out = tmp_path / "out"
    rc = tfgshare(["simulate", "--trace", str(_trace(tmp_path)), "--cluster", "2x2",
                   "--policy", "fifo,gandiva,fgs", "--out", str(out), "--check"])
    assert rc == 0
    printed = capsys.readouterr().out
    lines = printed.splitlines()
    assert lines[0].split()[0] == "policy"
    assert [ln.split()[0] for ln in lines[2:5]] == ["fifo", "gandiva", "fgs"]
    with open(out / "report.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["policy"] for r in rows] == ["fifo", "gandiva", "fgs"]
    assert all(r["finished"] == "14" for r in rows)
    assert float(rows[0]["jct_ratio"]) == 1.0
    doc = json.loads((out / "report.json").read_text())
    assert doc["num_gpus"] == 4 and doc["jobs"] == 14 and doc["baseline"] == "fifo"
    fgs = doc["policies"]["fgs"]
    assert fgs["report"]["jct_mean"] > 0 and fgs["decide"]["rounds"] > 0
    # the tick each policy ran under: gandiva the --tick, fgs its own timed events
    assert doc["policies"]["gandiva"]["tick_s"] == 60.0 and fgs["tick_s"] is None
    for name in ("jct_cdf.png", "utilisation.png", "queue.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"
    assert str(out) in printed


def test_simulate_bad_input_is_named(tmp_path, capsys):
    trace = str(_trace(tmp_path))
    assert tfgshare(["simulate", "--trace", trace, "--policy", "fifo,nope",
                     "--out", str(tmp_path / "o")]) == 2
    assert "unknown policy 'nope'" in capsys.readouterr().err
    assert tfgshare(["simulate", "--trace", trace, "--cluster", "12y",
                     "--out", str(tmp_path / "o")]) == 2
    assert "bad cluster spec '12y'" in capsys.readouterr().err
    assert tfgshare(["simulate", "--trace", str(tmp_path / "missing.csv"),
                     "--out", str(tmp_path / "o")]) == 2
    assert "not found" in capsys.readouterr().err


def test_simulator_never_imports_tensorflow(tmp_path):
    import subprocess
    import sys
    code = ("import sys; from tfgshare.cli import main; "
            f"rc = main(['simulate', '--trace', {str(_trace(tmp_path))!r}, '--cluster', '2x2', "
            f"'--out', {str(tmp_path / 'o')!r}]); "
            "assert rc == 0; assert 'tensorflow' not in sys.modules, 'tensorflow imported'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_simulate_knobs_and_per_job_output(tmp_path, capsys):
    trace = str(_trace(tmp_path))
    jobs_out = tmp_path / "jobs.csv"
    rc = tfgshare(["simulate", "--trace", trace, "--cluster", "2x2", "--policy", "fifo,tiresias",
                   "--cross-node-slowdown", "0", "--zero-move-costs",
                   "--policy-param", "tiresias.thresholds=600,1800",
                   "--sim-param", "refresh_s=60", "--out", str(tmp_path / "o"), "--no-plots",
                   "--jobs-out", str(jobs_out)])
    assert rc == 0
    printed = capsys.readouterr()
    assert "cross-node slowdown 0, start-up 0 s, checkpoint 0 s" in printed.err
    assert "report.json give times in seconds" in printed.out
    doc = json.loads((tmp_path / "o" / "report.json").read_text())
    assert doc["units"]["times"] == "seconds"
    assert doc["sim_config"]["startup_s"] == 0 and doc["sim_config"]["refresh_s"] == 60
    assert doc["policy_params"]["tiresias"]["thresholds"] == [600.0, 1800.0]
    with open(jobs_out) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 28 and {r["policy"] for r in rows} == {"fifo", "tiresias"}
    for r in rows:
        assert float(r["jct_s"]) == pytest.approx(float(r["finish_s"]) - float(r["submit_s"]))
        assert float(r["move_cost_s"]) == 0.0
    assert sum(int(r["preemptions"]) for r in rows if r["policy"] == "fifo") == 0


def test_simulate_bad_knobs_are_named(tmp_path, capsys):
    trace = str(_trace(tmp_path))
    base = ["simulate", "--trace", trace, "--cluster", "2x2", "--policy", "fifo",
            "--out", str(tmp_path / "o"), "--no-plots"]
    assert tfgshare(base + ["--policy-param", "thresholds=1,2"]) == 2
    assert "no listed policy has parameter 'thresholds'" in capsys.readouterr().err
    assert tfgshare(base + ["--sim-param", "nope=1"]) == 2
    assert "--sim-param nope: unknown" in capsys.readouterr().err
    assert tfgshare(base + ["--startup-s", "-1"]) == 2
    assert "startup_s must be >= 0" in capsys.readouterr().err


def test_the_same_run_writes_the_same_report_whatever_the_hash_seed(tmp_path):
    # Python salts string hashes per process: a figure summed in set order would differ
    # in its last digits from one run of the same command to the next
    import os
    import subprocess
    import sys
    trace = tmp_path / "gen.csv"
    assert tfgshare(["trace", "generate", "--jobs", "300", "--cluster", "4x4", "--load", "0.9",
                     "--seed", "1", "--out", str(trace)]) == 0
    reports = []
    for salt in ("1", "2"):
        out = tmp_path / f"out{salt}"
        proc = subprocess.run(
            [sys.executable, "-m", "tfgshare.cli", "simulate", "--trace", str(trace),
             "--cluster", "4x4", "--policy", "fgs,gandiva", "--out", str(out), "--no-plots"],
            capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": salt})
        assert proc.returncode == 0, proc.stderr
        reports.append((out / "report.csv").read_bytes())
    assert reports[0] == reports[1]
