"""The runner supervisor with a fake runner: start, events, suspend, cancel, escalate."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from agent_fakes import write_fake_runner
from tfgshare.agent.supervisor import EventOut, ExitOut, Supervisor


def run_until_exit(sup: Supervisor, job: str, timeout: float = 30.0):
    """Poll until ``job``'s runner exits; return (events, exit)."""
    events, end = [], time.monotonic() + timeout
    while time.monotonic() < end:
        for out in sup.poll():
            if isinstance(out, EventOut) and out.runner.job == job:
                events.append(out.event)
            elif isinstance(out, ExitOut) and out.runner.job == job:
                return events, out
        time.sleep(0.02)
    raise AssertionError(f"{job} did not exit within {timeout}s")


def wait_for_step(sup: Supervisor, job: str, step: int, events: list, timeout=30.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for out in sup.poll():
            assert isinstance(out, EventOut), f"runner exited early: {out}"
            events.append(out.event)
        if sup.runners[job].step >= step:
            return
        time.sleep(0.02)
    raise AssertionError(f"{job} did not reach step {step}")


@pytest.fixture
def sup(tmp_path):
    s = Supervisor(tmp_path / "work", runner_cmd=write_fake_runner(tmp_path),
                   suspend_timeout_s=1.0, cancel_timeout_s=1.0)
    yield s
    for job in list(s.runners):
        s.kill(job)
    while s.runners:
        s.poll()


def test_runner_gets_its_devices_fraction_and_threads_and_finishes(sup, tmp_path):
    proc = sup.start("j1", 1, ["--model_name", "lenet", "--max_number_of_steps", "5"],
                     tmp_path / "ckpt" / "j1", [(1, 0.3)], virtual=False)
    assert proc.events_file.name == "attempt-1.events.jsonl"
    events, exit_ = run_until_exit(sup, "j1")
    started = events[0]
    assert started["event"] == "started"
    assert started["memory_fraction"] == 0.3
    env = json.loads((tmp_path / "ckpt" / "j1" / "env.json").read_text())
    assert env == {"cuda_visible_devices": "1", "threads": "1"}
    assert [e["step"] for e in events if e["event"] == "progress"] == [1, 2, 3, 4, 5]
    assert events[-1]["event"] == "finished"
    assert (exit_.exit_code, exit_.reason) == (0, "finished")
    assert exit_.runner.step == 5 and not sup.runners


def test_virtual_gpu_hides_cuda_devices_but_keeps_fraction(sup, tmp_path):
    sup.start("j1", 1, ["--model_name", "lenet", "--max_number_of_steps", "1"],
              tmp_path / "ckpt", [(0, 0.25), (1, 0.5)], virtual=True)
    events, exit_ = run_until_exit(sup, "j1")
    assert json.loads((tmp_path / "ckpt" / "env.json").read_text())["cuda_visible_devices"] == ""
    assert events[0]["memory_fraction"] == 0.25   # the smallest of its fragments
    assert exit_.exit_code == 0


def test_suspend_checkpoints_and_next_attempt_continues(sup, tmp_path):
    args = ["--model_name", "lenet", "--max_number_of_steps", "400", "--step_time", "0.01"]
    train_dir = tmp_path / "ckpt" / "j1"
    sup.start("j1", 1, args, train_dir, [(0, 0.5)], virtual=True)
    first: list = []
    wait_for_step(sup, "j1", 3, first)
    sup.suspend("j1")
    more, exit_ = run_until_exit(sup, "j1")
    first += more
    assert (exit_.exit_code, exit_.reason) == (75, "suspended")
    sup.start("j1", 2, args, train_dir, [(1, 0.5)], virtual=True)
    second, exit2 = run_until_exit(sup, "j1")
    assert exit2.exit_code == 0
    steps = [e["step"] for e in first + second if e["event"] == "progress"]
    assert steps == list(range(1, 401))      # no step repeated or lost
    assert second[0]["global_step"] == first[-1]["step"]
    # each attempt wrote its own events file
    assert {p.name for p in (tmp_path / "work" / "j1").glob("*.events.jsonl")} == {
        "attempt-1.events.jsonl", "attempt-2.events.jsonl"}


def test_sample_only_exit_is_reported_as_sampled(sup, tmp_path):
    sup.start("j1", 1, ["--model_name", "lenet"], tmp_path / "c", [(0, 0.5)],
              virtual=True, sample_only=True)
    events, exit_ = run_until_exit(sup, "j1")
    assert (exit_.exit_code, exit_.reason) == (75, "sampled")
    assert any(e["event"] == "sample" for e in events)


def test_suspend_that_hangs_is_escalated_to_sigkill_and_said(sup, tmp_path):
    sup.start("j1", 1, ["--model_name", "lenet", "--max_number_of_steps", "100000",
                        "--ignore_signals"], tmp_path / "c", [(0, 0.5)], virtual=True)
    wait_for_step(sup, "j1", 1, [])
    sup.suspend("j1")
    _, exit_ = run_until_exit(sup, "j1")
    assert exit_.exit_code == 128 + signal.SIGKILL
    assert "suspend not done after 1s: killed" in exit_.reason


def test_cancel_stops_the_runner(sup, tmp_path):
    sup.start("j1", 1, ["--model_name", "lenet", "--max_number_of_steps", "100000"],
              tmp_path / "c", [(0, 0.5)], virtual=True)
    wait_for_step(sup, "j1", 1, [])
    sup.cancel("j1")
    _, exit_ = run_until_exit(sup, "j1")
    assert exit_.reason.startswith("cancelled")


def test_bad_input_exit_names_the_log(sup, tmp_path):
    sup.start("j1", 1, ["--model_name", "nosuchnet"], tmp_path / "c", [(0, 0.5)], virtual=True)
    events, exit_ = run_until_exit(sup, "j1")
    assert exit_.exit_code == 2 and "bad input" in exit_.reason
    assert "attempt-1.log" in exit_.reason
    assert events[-1] == {**events[-1], "event": "error", "message": "unknown model nosuchnet"}


def test_start_refuses_bad_requests(sup, tmp_path):
    with pytest.raises(ValueError, match="not in"):
        sup.start("j1", 1, [], tmp_path, [(0, 1.5)], virtual=True)
    with pytest.raises(ValueError, match="no fragments"):
        sup.start("j1", 1, [], tmp_path, [], virtual=True)
    sup.start("j1", 1, ["--max_number_of_steps", "100000"], tmp_path / "c", [(0, 0.5)], virtual=True)
    with pytest.raises(ValueError, match="already has a runner"):
        sup.start("j1", 2, [], tmp_path / "c", [(0, 0.5)], virtual=True)
    with pytest.raises(KeyError, match="no runner for job j9"):
        sup.suspend("j9")


def test_runner_dies_with_a_killed_agent(tmp_path):
    """An agent killed with SIGKILL leaves no runner behind to touch the checkpoint."""
    cmd = write_fake_runner(tmp_path)
    script = textwrap.dedent(f"""
        import sys, time
        from tfgshare.agent.supervisor import Supervisor
        sup = Supervisor({str(tmp_path / 'work')!r}, runner_cmd={cmd!r})
        p = sup.start("j1", 1, ["--max_number_of_steps", "100000"], {str(tmp_path / 'c')!r},
                      [(0, 0.5)], virtual=True)
        print(p.pid, flush=True)
        time.sleep(120)
    """)
    agent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        runner_pid = int(agent.stdout.readline())
        os.kill(runner_pid, 0)        # alive while the agent lives
        agent.kill()
        agent.wait()
        end = time.monotonic() + 10
        while time.monotonic() < end and _alive(runner_pid):
            time.sleep(0.05)
        assert not _alive(runner_pid)
    finally:
        agent.kill()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_runner_slow_to_exit_after_its_final_event_is_killed_and_reported_done(tmp_path):
    slow = tmp_path / "slow_exit.py"
    slow.write_text(
        "import json, sys, time\n"
        "ev = sys.argv[sys.argv.index('--events_file') + 1]\n"
        "open(ev, 'a').write(json.dumps({'event': 'finished', 'step': 3, 'loss': 0.1}) + '\\n')\n"
        "time.sleep(600)\n")
    sup = Supervisor(tmp_path / "work", runner_cmd=[sys.executable, str(slow)], exit_grace_s=0.5)
    sup.start("j1", 1, [], tmp_path / "c", [(0, 0.5)], virtual=True)
    events, exit_ = run_until_exit(sup, "j1")
    assert [e["event"] for e in events] == ["finished"]
    assert exit_.exit_code == 0
    assert exit_.reason == "finished (still exiting 0.5s after its finished event: killed)"


def test_runner_past_its_virtual_fragment_is_stopped_as_out_of_memory(sup, tmp_path):
    from tfgshare.agent.gpus import VirtualGpus, parse_virtual_gpus
    from tfgshare.runner import protocol as rp
    source = VirtualGpus(parse_virtual_gpus("1x16GiB"))
    proc = sup.start("big", 1, ["--max_number_of_steps", "100000", "--step_time", "0.05",
                                "--hold_mb", "120"], tmp_path / "t", [(0, 0.004)],
                     virtual=True, limits_mb={0: 0.004 * 16384})       # 65.5 MiB
    events: list = []
    wait_for_step(sup, "big", 2, events)
    within = sup.enforce_memory({proc.pid + 10**6: {0: 1e6}})   # another process: not it
    assert within == []
    tel = source.read({proc.pid: (0,)})
    (oom,) = sup.enforce_memory(tel.process_memory_mb)
    assert oom.event["event"] == "out_of_memory"
    assert set(rp.EVENTS["out_of_memory"]) == set(oom.event) - {"event", "time"}
    assert oom.event["peak_memory_mb"] >= 120 and oom.event["limit_mb"] == pytest.approx(65.536)
    _, done = run_until_exit(sup, "big")
    assert done.exit_code == rp.EXIT_OUT_OF_MEMORY
    assert "out of memory" in done.reason and "fragment is 66 MiB" in done.reason
