"""The warm runner: a spare with TensorFlow imported takes the next job over stdin."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

from runner_helpers import small_config  # noqa: E402

from tfgshare.agent.supervisor import ExitOut, Supervisor  # noqa: E402
from tfgshare.runner import protocol as rp  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def wait_exit(sup: Supervisor, job: str, timeout: float = 300):
    events, end = [], time.monotonic() + timeout
    while time.monotonic() < end:
        for out in sup.poll():
            if isinstance(out, ExitOut):
                assert out.runner.job == job
                return out, events
            events.append(out.event)
        time.sleep(0.05)
    pytest.fail(f"{job} did not exit in {timeout}s")


def test_spare_runner_takes_the_job_and_is_replaced(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO),
                                                                   os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")   # the agent's own; the job gets its own
    sup = Supervisor(tmp_path / "work", warm=True)
    try:
        sup.keep_spare()
        spare = sup.spare
        assert spare is not None and spare.poll() is None
        # the spare waits with TensorFlow imported; give it time to get there
        time.sleep(2)
        assert spare.poll() is None
        environ = (Path("/proc") / str(spare.pid) / "environ").read_bytes().split(b"\0")
        assert b"CUDA_VISIBLE_DEVICES=" in environ   # empty until a job arrives

        config = small_config(tmp_path / "train", max_number_of_steps=3)
        args = [a for a in config.to_argv()]
        i = args.index("--train_dir")
        del args[i:i + 2]
        proc = sup.start("j1", 1, args, config.train_dir, [(0, 0.5)], virtual=True)
        assert proc.pid == spare.pid                      # the spare took the job
        assert sup.spare is not None and sup.spare.pid != spare.pid   # and was replaced
        out, events = wait_exit(sup, "j1")
        assert out.exit_code == rp.EXIT_OK and out.reason.startswith("finished")
        names = [e["event"] for e in events]
        assert names[0] == "started" and names[-1] == "finished"
        started = events[0]
        assert started["device"] == "/cpu:0" and started["memory_fraction"] == 0.5
        phases = next(e for e in events if e["event"] == "start_phases")
        assert 0 < phases["start_s"] < 60     # counted from the hand-over, not the spawn
        assert 0 <= phases["runner_wait_s"] < 60
        assert "step 3/3" in proc.log_file.read_text()   # its output went to the job's log
    finally:
        sup.stop_all(timeout_s=10)
    assert sup.spare is None


def test_a_job_handed_to_a_spare_still_importing_reports_its_wait(tmp_path, monkeypatch):
    """A start right after a spare was spawned waits for its TensorFlow import: the
    runner tells that wait apart from its own start (``runner_wait_s``, ``start_s``)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO),
                                                                   os.environ.get("PYTHONPATH")])))
    sup = Supervisor(tmp_path / "work", warm=True)
    try:
        sup.keep_spare()
        spare = sup.spare
        config = small_config(tmp_path / "train", max_number_of_steps=2)
        args = [a for a in config.to_argv()]
        i = args.index("--train_dir")
        del args[i:i + 2]
        proc = sup.start("j1", 1, args, config.train_dir, [(0, 0.5)], virtual=True)
        assert proc.pid == spare.pid                      # handed over at once
        out, events = wait_exit(sup, "j1")
        assert out.exit_code == rp.EXIT_OK
        phases = next(e for e in events if e["event"] == "start_phases")
        assert phases["runner_wait_s"] > 0.2              # importing TensorFlow takes seconds
        assert 0 < phases["start_s"] < 60
    finally:
        sup.stop_all(timeout_s=10)


def test_a_dead_spare_means_a_cold_start(tmp_path):
    sup = Supervisor(tmp_path / "work", warm=True,
                     runner_cmd=["/bin/sh", "-c", 'test "$0" = --warm || exec sleep 30'])
    sup.keep_spare()
    sup.spare.wait(timeout=10)      # this "runner" has no warm mode: its spare exits at once
    proc = sup.start("j1", 1, ["--x"], tmp_path / "t", [(0, 1.0)], virtual=True)
    assert proc.popen.poll() is None    # started cold
    sup.kill("j1")
    out, _ = wait_exit(sup, "j1", timeout=10)
    assert out.exit_code == 128 + 9


# a stand-in runner: as a spare it waits for its job line, then "trains" (sleeps)
STAND_IN = ["/bin/sh", "-c", 'if [ "$0" = --warm ]; then read job; fi; exec sleep 30']


def emit(proc, event: str, **fields) -> None:
    """Append an event to a runner's events file, as the runner writes it."""
    assert set(fields) == set(rp.EVENTS[event])
    with open(proc.events_file, "a") as f:
        f.write(json.dumps({"event": event, "time": time.time(), **fields}) + "\n")


STEP = {"step": 1, "loss": 2.3, "step_time_s": 0.1, "images_per_sec": 10.0,
        "predicted_remaining_s": 5.0}
STARTED = {"global_step": 0, "restored": True, "device": "/cpu:0", "memory_fraction": 1.0}


def test_two_spares_take_a_burst_of_two_starts_and_are_both_replaced(tmp_path):
    sup = Supervisor(tmp_path / "work", warm=True, spares=2, spare_wait_s=0,
                     runner_cmd=STAND_IN)
    try:
        sup.keep_spare()
        first = [p.pid for p in sup.spare_pool]
        assert len(first) == 2
        a = sup.start("j1", 1, ["--x"], tmp_path / "a", [(0, 1.0)], virtual=True)
        b = sup.start("j2", 1, ["--x"], tmp_path / "b", [(1, 1.0)], virtual=True)
        assert [a.pid, b.pid] == first                    # both warm, the oldest first
        # spare_wait_s=0: replaced at the hand-over
        assert len(sup.spare_pool) == 2 and not {p.pid for p in sup.spare_pool} & set(first)
    finally:
        sup.stop_all(timeout_s=5)
    assert sup.spare is None and sup.spare_pool == []


def test_a_used_spare_is_replaced_after_the_jobs_first_step(tmp_path):
    sup = Supervisor(tmp_path / "work", warm=True, spares=1, spare_wait_s=60,
                     runner_cmd=STAND_IN)
    try:
        sup.keep_spare()
        spare = sup.spare
        proc = sup.start("j1", 2, ["--x"], tmp_path / "a", [(0, 1.0)], virtual=True)
        assert proc.pid == spare.pid
        emit(proc, "started", **STARTED)       # restoring: its replacement must wait
        assert [o.event["event"] for o in sup.poll()] == ["started"]
        for _ in range(3):
            sup.poll()
            assert sup.spare is None
            time.sleep(0.05)
        emit(proc, "progress", **STEP)         # its first step: now the new spare starts
        events = [o.event["event"] for o in sup.poll()]
        assert events == ["progress"]
        assert sup.spare is not None and sup.spare.pid != spare.pid
    finally:
        sup.stop_all(timeout_s=5)


def test_a_job_that_dies_before_its_first_step_still_gets_its_spare_replaced(tmp_path):
    sup = Supervisor(tmp_path / "work", warm=True, spares=1, spare_wait_s=60,
                     runner_cmd=STAND_IN)
    try:
        sup.keep_spare()
        sup.start("j1", 1, ["--x"], tmp_path / "a", [(0, 1.0)], virtual=True)
        assert sup.spare is None
        sup.kill("j1")
        out, _ = wait_exit(sup, "j1", timeout=10)
        assert out.exit_code == 128 + 9
        assert sup.spare is not None and sup.spare.poll() is None
    finally:
        sup.stop_all(timeout_s=5)


def test_a_job_that_hangs_before_its_first_step_gets_its_spare_replaced_after_the_bound(
        tmp_path):
    sup = Supervisor(tmp_path / "work", warm=True, spares=1, spare_wait_s=0.5,
                     runner_cmd=STAND_IN)
    try:
        sup.keep_spare()
        sup.start("j1", 1, ["--x"], tmp_path / "a", [(0, 1.0)], virtual=True)
        sup.poll()
        assert sup.spare is None
        time.sleep(0.6)
        sup.poll()
        assert sup.spare is not None and sup.spare.poll() is None
        assert "j1" in sup.runners          # still running, never stepped
    finally:
        sup.stop_all(timeout_s=5)
