"""``tfgshare replay`` as a user sees it, against a stand-in coordinator (no runners): the
help's ``--as-model`` example, the header and live row of the live cluster and the
replayed jobs, the expected wall time up front and ``--within``."""

from __future__ import annotations

import re

import pytest

from tfgshare.metrics import Report
from tfgshare.repro import replay
from tfgshare.repro import replay_plan as plan


def test_the_helps_as_model_example_is_in_the_shipped_profile():
    from tfgshare.sim.profiles import load_profiles

    example = re.search(r"such as (\w+:\d+)", " ".join(replay._parser().format_help().split()))
    profiles = load_profiles(replay.default_live_profile())
    assert plan.parse_as_model(example.group(1), profiles) == ("lenet", 8)
    assert plan.parse_as_model("lenet", profiles) == ("lenet", 8)     # its profiled batch


@pytest.mark.parametrize("flag, words", [
    ("lenet:4", "the profile has lenet at batch size 8 only (e.g. --as-model lenet:8)"),
    ("nonet:8", "the profile has no model 'nonet'; it has alexnet_v2, "),
    ("lenet:x", "--as-model takes MODEL:BATCH"),
])
def test_an_unprofiled_as_model_is_refused_naming_what_the_profile_has(capsys, flag, words):
    code = replay.main(["--speedup", "2000", "--as-model", flag])
    assert code == 2
    assert words in capsys.readouterr().err


@pytest.mark.parametrize("text, seconds", [("10m", 600), ("90s", 90), ("1h30m", 5400),
                                           ("45", 45), ("2 min", 120)])
def test_within_reads_durations(text, seconds):
    assert plan.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["soon", "10 parsecs", "-5", "0m"])
def test_within_refuses_what_is_not_a_duration(text):
    with pytest.raises(ValueError, match="--within"):
        plan.parse_duration(text)


def test_within_chooses_the_smallest_speedup_that_fits():
    def expected(k):          # 60 s of start-ups plus the trace's 2e6 s compressed k times
        return 60 + 2e6 / k

    k, wall = plan.choose_speedup(600, expected)
    assert wall <= 600 and expected(k * 0.97) > 600
    assert k == pytest.approx(2e6 / 540, rel=0.02)
    with pytest.raises(ValueError, match="cannot fit --within 30 s"):
        plan.choose_speedup(30, expected)


NODES = [{"name": "a", "state": "up", "gpus": [{"index": 0, "memory_mb": 8192},
                                               {"index": 1, "memory_mb": 8192}]},
         {"name": "b", "state": "up", "gpus": [{"index": 0, "memory_mb": 8192}]},
         {"name": "c", "state": "lost", "gpus": [{"index": 0, "memory_mb": 8192}]}]


def test_the_live_cluster_is_its_gpus_as_they_are():
    cluster = plan.live_cluster(NODES)
    assert cluster.num_gpus == 3 and cluster.spec == "a:2x8192,b:1x8192"
    assert cluster.text == "3 GPUs on 2 nodes (a: 2 x 8192 MiB, b: 1 x 8192 MiB)"
    assert plan.live_cluster(NODES[:1]).spec == "1x2:8192"


class StandIn:
    """A coordinator that has run 11 jobs before and finishes each new one at once."""

    address = "tcp://stand-in:5555"
    OLD = 11

    def __init__(self, *args, **kwargs):
        self.submitted: list[dict] = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def nodes(self):
        return NODES

    def status(self):
        return {"policy": "fifo"}

    def submit(self, specs):
        ids = []
        for spec in specs:
            n = len(self.submitted)
            self.submitted.append({
                "id": f"j{n}", "name": spec.name, "model": spec.model_name,
                "state": "finished", "submit_time": 100.0 + n, "finish_time": 110.0 + 2 * n,
                "waited_s": 1.0, "suspends": 0, "resumes": 0, "migrations": 0,
                "prediction_error": 0.1, "fragments": []})
            ids.append(f"j{n}")
        return ids

    def jobs(self, active=False):
        return list(self.submitted)

    def logs(self, job, tail=None):
        return []

    def metrics(self):
        total = self.OLD + len(self.submitted)
        summary = Report(jobs=total, finished=total, jct_mean=500.0, jct_median=500.0,
                         jct_p95=900.0, wait_mean=30.0, util_allocated=0.5,
                         util_effective=0.4, makespan=4000.0, suspends=7, resumes=7,
                         migrations=2, move_cost_s=20.0, pred_error_mean=0.5,
                         pred_error_median=0.5).as_dict()
        return {"summary": summary, "jobs": [{"job": "old1", "state": "failed"}]}


def test_replay_describes_the_live_cluster_counts_only_its_jobs_and_says_how_long(
        tmp_path, monkeypatch, capsys):
    import tfgshare.client.api

    monkeypatch.setattr(tfgshare.client.api, "Client", StandIn)
    out = tmp_path / "out"
    code = replay.main(["--within", "10m", "--jobs", "3", "--start", "2017-10-09",
                        "--as-model", "lenet:8", "--out", str(out), "--timeout", "30"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    err = " ".join(captured.err.split())     # the lines as read, unwrapped
    assert "replaying 3 jobs at speed-up" in err
    assert "on tcp://stand-in:5555: 3 GPUs on 2 nodes (a: 2 x 8192 MiB, b: 1 x 8192 MiB), " \
           "policy fifo" in err
    expected = re.search(r"expected to take about (\d+) (s|min) at --speedup ([0-9.e+]+), the "
                         r"smallest speed-up expected to finish --within 10m", err)
    assert expected, captured.err
    wall = float(expected.group(1)) * (60 if expected.group(2) == "min" else 1)
    assert 0 < wall <= 600
    assert "the coordinator also ran 11 other jobs: the live row counts the 3 replayed" \
        in " ".join(captured.out.split())
    import json

    doc = json.loads((out / "report.json").read_text())
    assert doc["live"]["report"]["jobs"] == 3 and doc["live"]["report"]["finished"] == 3
    assert doc["live"]["report"]["jct_mean"] == pytest.approx((10 + 11 + 12) / 3)
    assert doc["live"]["report"]["suspends"] == 0 and doc["live"]["jobs"] == []
    assert doc["cluster"] == "a:2x8192,b:1x8192"
    assert doc["speedup"] == float(expected.group(3))
    assert re.search(r"jobs finished\s+3\.0\s+3\.0", captured.out)
