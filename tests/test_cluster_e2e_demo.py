"""The demo's script of forced moves, against a scripted client; and its command line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tfgshare.client.api import Refused
from tfgshare.demo import BIG, LATE_AFTER_S, Script, demo_jobs


class FakeClient:
    """Records requests; refuses migrations until ``room`` is set."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.room = False

    def migrate(self, job, to):
        if not self.room:
            raise Refused(f"job {job} needs a fraction of 0.350, which does not fit on {to} now")
        self.calls.append(("migrate", job, to))

    def suspend(self, job):
        self.calls.append(("suspend", job))

    def resume(self, job):
        self.calls.append(("resume", job))

    def submit(self, specs):
        self.calls.append(("submit", specs[0].model_name, specs[0].memory_fraction))
        return ["j9"]


def job(id_, state="running", steps=0, total=100, gpu="node1:0"):
    return {"id": id_, "state": state, "steps_done": steps, "total_steps": total,
            "fragments": [[gpu, 0.35]] if state == "running" else []}


def test_demo_batch_is_small_jobs_then_a_late_one_all_sized_from_their_sample():
    small, big = demo_jobs(4)
    assert [s.model_name for s in small] == ["lenet", "cifarnet", "mobilenet_v1"]
    assert all(s.memory_fraction == "auto" for s in [*small, big])
    assert big.model_name == BIG[0]
    assert small[2].image_size == 32              # mobilenet at a small size
    # the one sampling configuration: no sampling flag of the demo's own
    assert not any("sample" in f or "warmup" in f for s in small for f in s.extra)


def test_script_moves_only_jobs_that_made_progress_in_this_attempt():
    client, script = FakeClient(), Script(demo_jobs(4)[1], t0=0.0)
    client.room = True
    jobs = {"j1": job("j1", steps=10), "j2": job("j2", steps=10)}
    assert script.step(client, jobs, now=1.0) == []
    assert client.calls == []                         # just seen running: no steps yet
    jobs = {"j1": job("j1", steps=16), "j2": job("j2", steps=12)}
    script.step(client, jobs, now=2.0)
    assert client.calls == [("migrate", "j1", "node1:1")]
    jobs = {"j1": job("j1", "migrating"), "j2": job("j2", steps=16)}
    script.step(client, jobs, now=3.0)
    assert client.calls[-1] == ("suspend", "j2")


def test_script_waits_for_room_then_resumes_and_submits_the_big_job():
    client, script = FakeClient(), Script(demo_jobs(4)[1], t0=0.0)
    start = {"j1": job("j1", steps=5), "j2": job("j2", steps=5, gpu="node1:1")}
    script.step(client, start, now=1.0)
    jobs = {"j1": job("j1", steps=20), "j2": job("j2", steps=20, gpu="node1:1")}
    script.step(client, jobs, now=2.0)                # no room to migrate: j1 is suspended
    assert client.calls == [("suspend", "j1")] and script.mover is None
    assert not any("refused" in n for n in script.notes)   # "does not fit" is retried quietly
    client.room = True
    jobs["j1"] = job("j1", "suspended (held)")
    script.step(client, jobs, now=3.0)
    assert client.calls[-1] == ("migrate", "j2", "node1:0")
    assert ("resume", "j1") not in client.calls       # held for two seconds first
    new = script.step(client, jobs, now=5.5)
    assert client.calls[-2:] == [("resume", "j1"), ("submit", "cifarnet", "auto")]
    assert new == ["j9"] and script.done


def test_script_submits_the_big_job_by_the_deadline_anyway():
    client, script = FakeClient(), Script(demo_jobs(4)[1], t0=0.0)
    assert script.step(client, {}, now=LATE_AFTER_S - 1) == []
    assert script.step(client, {}, now=LATE_AFTER_S + 1) == ["j9"]
    assert not script.done                            # the moves never happened


@pytest.mark.parametrize("args, code, words", [
    (["--help"], 0, "--keep"),
    (["--jobs", "2"], 2, "--jobs must be between 3 and"),
])
def test_demo_command_line(args, code, words):
    done = subprocess.run([sys.executable, "-m", "tfgshare.cli", "demo", *args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == code
    assert words in done.stdout + done.stderr
