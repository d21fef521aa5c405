"""The demo's batch and its script (it only submits: every move is the policy's); its command line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tfgshare.demo import LONG, SHORT, SHORT_AFTER_S, Script, demo_jobs, policy_moves


class FakeClient:
    """Records submits; serves canned job logs."""

    def __init__(self, logs=None) -> None:
        self.calls: list[tuple] = []
        self._logs = logs or {}

    def submit(self, specs):
        self.calls.append(("submit", specs[0].model_name, specs[0].memory_fraction))
        return ["j9"]

    def logs(self, job):
        return self._logs.get(job, [])


def job(id_, state="running"):
    return {"id": id_, "state": state}


def test_demo_batch_is_two_long_jobs_then_a_short_one_all_sized_from_their_sample():
    first, short = demo_jobs()
    assert [s.model_name for s in first] == [row[0] for row in LONG]
    assert short.model_name == SHORT[0]
    assert short.max_number_of_steps < min(s.max_number_of_steps for s in first)
    assert all(s.memory_fraction == "auto" for s in [*first, short])
    # the one sampling configuration: no sampling flag of the demo's own
    assert not any("sample" in f or "warmup" in f for s in first for f in s.extra)


def test_script_submits_the_short_job_once_both_long_jobs_ran_a_while_and_never_moves_one():
    client = FakeClient()
    script = Script(demo_jobs()[1], ["j1", "j2"])
    assert script.step(client, {"j1": job("j1"), "j2": job("j2", "sampling")}, now=0.0) == []
    assert script.step(client, {"j1": job("j1"), "j2": job("j2")}, now=5.0) == []
    assert script.step(client, {"j1": job("j1"), "j2": job("j2")},
                       now=5.0 + SHORT_AFTER_S - 1) == []
    assert script.step(client, {"j1": job("j1"), "j2": job("j2")},
                       now=5.0 + SHORT_AFTER_S) == ["j9"]
    assert client.calls == [("submit", SHORT[0], "auto")]   # a submit, and nothing else
    assert script.step(client, {"j1": job("j1"), "j2": job("j2")}, now=100.0) == []


def test_policy_moves_are_read_from_the_job_logs_and_user_moves_are_not_counted():
    client = FakeClient({"j1": ["12:00:01 start on n:0", "12:01:00 suspend (policy fgs)"],
                         "j2": ["12:00:30 suspend (asked by the user)"]})
    assert policy_moves(client, ["j1", "j2"]) == ["j1: 12:01:00 suspend (policy fgs)"]


@pytest.mark.parametrize("args, code, words", [
    (["--help"], 0, "--keep"),
    (["--jobs", "2"], 2, "unrecognized arguments"),
])
def test_demo_command_line(args, code, words):
    done = subprocess.run([sys.executable, "-m", "tfgshare.cli", "demo", *args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == code
    assert words in done.stdout + done.stderr


@pytest.mark.timeout(600)
def test_the_demo_runs_to_its_end_and_the_policy_moves_a_long_job():
    # what `make demo` runs, as a user runs it: a coordinator, an agent and real TF-Slim
    # training; it succeeds only if every job finished and fgs made a move by itself
    done = subprocess.run([sys.executable, "-m", "tfgshare.cli", "demo", "--plain",
                           "--timeout", "500"], capture_output=True, text=True, timeout=580)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "demo done" in out and "suspend (policy fgs)" in out, out[-3000:]
    assert "policy actions refused: 0" in out
