"""``tfgshare trace generate``: seeded, fitted to Philly and Alibaba, at the asked load,
and read back by ``tfgshare simulate``."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from philly.report import LoadReport
from tfgshare.cli import main as tfgshare
from tfgshare.sim import synth
from tfgshare.sim.alibaba import load_pods, trace_jobs

CLUSTER_GPUS = 512   # 64x8: every Philly job fits


@pytest.fixture(scope="module")
def src():
    return synth.fit_sources()


@pytest.fixture(scope="module")
def big(src):
    return synth.generate(50_000, CLUSTER_GPUS, 0.9, seed=3, sources=src)


def _generate(tmp_path, name, *extra, jobs="300", cluster="4x8", load="0.8", seed="7"):
    out = tmp_path / name
    rc = tfgshare(["trace", "generate", "--jobs", jobs, "--cluster", cluster, "--load", load,
                   "--seed", seed, "--out", str(out), *extra])
    return rc, out


def test_same_seed_same_file_other_seed_other_file(tmp_path, capsys):
    rc1, a = _generate(tmp_path, "a.csv")
    rc2, b = _generate(tmp_path, "b.csv")
    rc3, c = _generate(tmp_path, "c.csv", seed="8")
    assert (rc1, rc2, rc3) == (0, 0, 0)
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()
    assert "offered load" in capsys.readouterr().out
    rc, g1 = _generate(tmp_path, "a.csv.gz")
    rc, g2 = _generate(tmp_path, "b.csv.gz")
    assert g1.read_bytes() == g2.read_bytes() and g1.read_bytes()[:2] == b"\x1f\x8b"


@pytest.mark.parametrize("args, message", [
    (["--jobs", "0"], "--jobs must be >= 1"),
    (["--load", "0"], "--load must be a finite number > 0"),
    (["--load", "-1"], "--load must be a finite number > 0"),
    (["--load", "nan"], "--load must be a finite number > 0"),
    (["--cluster", "bogus"], "bad cluster spec"),
    (["--jobs", "ten"], "invalid int value"),
])
def test_bad_input_exits_2_with_a_clear_error(tmp_path, capsys, args, message):
    base = {"--jobs": "10", "--cluster": "4x8", "--load": "0.5",
            "--out": str(tmp_path / "x.csv")}
    base.update(dict(zip(args[::2], args[1::2])))
    argv = ["trace", "generate"] + [x for kv in base.items() for x in kv]
    assert tfgshare(argv) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x.csv").exists()
    assert tfgshare(["trace"]) == 2


def test_gpu_count_shares_match_philly(src, big):
    want = Counter(src.num_gpus.tolist())
    got = Counter(big.num_gpus.tolist())
    for g, n in want.items():
        assert abs(got[g] / len(big.num_gpus) - n / len(src.num_gpus)) < 0.01, g


def test_median_duration_per_gpu_count_matches_philly(src, big):
    for g in (1, 2, 4, 8):
        want = np.median(src.durations[src.num_gpus == g])
        got = np.median(big.durations[big.num_gpus == g])
        assert abs(got / want - 1) < 0.15, (g, got, want)


def test_vc_mix_matches_philly(src, big):
    want = np.bincount(src.vc_index, minlength=len(src.vcs)) / len(src.vc_index)
    got_counts = Counter(big.vcs)
    got = np.array([got_counts[v] for v in src.vcs]) / len(big.vcs)
    assert 0.5 * np.abs(got - want).sum() < 0.02   # total variation distance


def test_share_requests_of_one_gpu_jobs_match_alibaba(src, big):
    alibaba = np.mean(src.one_gpu_milli < 1000)
    assert 0.42 < alibaba < 0.46
    one = big.gpu_milli[big.num_gpus == 1]
    assert abs(np.mean(one < 1000) - alibaba) < 0.02
    assert abs(np.median(one[one < 1000]) - np.median(src.one_gpu_milli[
        src.one_gpu_milli < 1000])) <= 50
    assert (big.gpu_milli[big.num_gpus > 1] == 1000).all()


def test_hour_of_week_arrivals_follow_philly(src, big):
    hours = (big.submit // 3600).astype(int)
    got = synth.hour_profile(hours % synth.HOURS_PER_WEEK, hours[0], hours[-1])
    assert big.submit[-1] > 4 * 7 * 86400          # four weeks and more of arrivals
    assert np.corrcoef(got, src.hour_rate)[0, 1] > 0.8
    # the daily pattern: Philly's busiest hour of the day busier than its quietest
    day = src.hour_rate.reshape(7, 24).sum(0)
    assert day.max() > 1.5 * day.min()
    gday = got.reshape(7, 24).sum(0)
    assert np.argmax(gday) in {(int(np.argmax(day)) + d) % 24 for d in (-2, -1, 0, 1, 2)}


def test_offered_load_of_the_written_file_is_the_asked_one(tmp_path, capsys):
    rc, out = _generate(tmp_path, "load.csv", jobs="5000", cluster="16x8", load="0.9")
    assert rc == 0
    jobs = trace_jobs(load_pods(out), LoadReport())
    assert len(jobs) == 5000
    work = sum(j.duration * j.num_gpus * (j.gpu_fraction or 1.0) for j in jobs)
    span = jobs[-1].submit_time - jobs[0].submit_time
    assert abs(work / (span * 128) / 0.9 - 1) < 0.10
    assert max(j.num_gpus for j in jobs) <= 128
    assert 0.3 < np.mean([j.gpu_fraction is not None for j in jobs]) < 0.6


def test_simulate_reads_the_generated_trace(tmp_path, capsys):
    rc, trace = _generate(tmp_path, "sim.csv", jobs="400")
    assert rc == 0
    out = tmp_path / "out"
    rc = tfgshare(["simulate", "--trace", str(trace), "--cluster", "4x8", "--jobs", "200",
                   "--policy", "fifo", "--no-plots", "--out", str(out)])
    assert rc == 0
    report = json.loads((out / "report.json").read_text())
    assert "fifo" in json.dumps(report)
