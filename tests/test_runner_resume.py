"""Suspend in one runner process, resume in a new one: same state as never stopping."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

from runner_helpers import assert_same_state, checkpoint_values, small_config  # noqa: E402

from tfgshare.runner import protocol as rp  # noqa: E402
from tfgshare.runner.graph_file import GRAPH_FILE  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PYTHONPATH = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))


def start(config, *extra: str) -> subprocess.Popen:
    """Start ``python -m tfgshare.runner`` for ``config`` in a new process."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": PYTHONPATH}
    return subprocess.Popen([sys.executable, "-m", "tfgshare.runner", *config.to_argv(), *extra],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def finish(proc: subprocess.Popen, timeout: float = 240) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out


def wait_for_step(events_file: Path, step: int, proc: subprocess.Popen,
                  timeout: float = 120) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        progress = [e["step"] for e in rp.iter_events(events_file) if e["event"] == "progress"]
        if progress and progress[-1] >= step:
            return
        if proc.poll() is not None:
            pytest.fail(f"runner exited early ({proc.returncode}): {proc.stdout.read()}")
        time.sleep(0.05)
    pytest.fail(f"runner did not reach step {step} in {timeout}s")


def test_suspend_by_max_steps_or_signal_then_resume_in_new_processes(tmp_path):
    # Two interrupted jobs run side by side: one stops at --max_number_of_steps=4
    # (momentum), one is suspended by SIGUSR1 (adam). Each resumes in a new process twice,
    # from copies of its train dir: from the graph the first attempt exported, and (the
    # graph file deleted) from a rebuilt one.
    by_steps = small_config(tmp_path / "steps", optimizer="momentum", max_number_of_steps=4)
    by_signal = small_config(tmp_path / "signal", optimizer="adam", max_number_of_steps=100000,
                             events_file=str(tmp_path / "signal.jsonl"))
    first_steps, first_signal = start(by_steps), start(by_signal)
    wait_for_step(Path(by_signal.events_file), 3, first_signal)
    rp.request_suspend(first_signal.pid)
    code, out = finish(first_signal)
    assert code == rp.EXIT_SUSPENDED, out
    assert "suspending after the current step" in out
    suspended = [e for e in rp.iter_events(by_signal.events_file) if e["event"] == "suspended"]
    k = suspended[0]["step"]
    assert k >= 3
    code, out = finish(first_steps)
    assert code == rp.EXIT_OK, out

    resumes = {}
    for graph in ("imported", "built"):
        for name, config, steps in (("steps", by_steps, 9), ("signal", by_signal, k + 5)):
            train_dir = tmp_path / f"{name}-{graph}"
            shutil.copytree(config.train_dir, train_dir)
            if graph == "built":
                (train_dir / GRAPH_FILE).unlink()
            resumes[graph, name] = replace(config, train_dir=str(train_dir),
                                           max_number_of_steps=steps,
                                           events_file=str(tmp_path / f"{name}-{graph}.jsonl"))
    # meanwhile, in new processes too, the same jobs without a stop
    straight = {"steps": small_config(tmp_path / "a", optimizer="momentum",
                                      max_number_of_steps=9),
                "signal": small_config(tmp_path / "b", optimizer="adam",
                                       max_number_of_steps=k + 5)}
    runs = [start(c) for c in [*resumes.values(), *straight.values()]]
    for proc in runs:
        code, out = finish(proc)
        assert code == rp.EXIT_OK, out
    for (graph, name), config in resumes.items():
        started = [e for e in rp.iter_events(config.events_file) if e["event"] == "started"]
        assert started[-1]["restored"] is True
        assert started[-1]["global_step"] == (4 if name == "steps" else k)
        phases = [e for e in rp.iter_events(config.events_file) if e["event"] == "start_phases"]
        assert phases[-1]["graph_source"] == graph and phases[-1]["start_s"] > 0
        latest = runner_checkpoint_latest(config.train_dir)
        assert latest.endswith(f"model.ckpt-{config.max_number_of_steps}")
        # bit for bit: the same flags and threads give the same arithmetic, built or imported
        assert_same_state(runner_checkpoint_latest(straight[name].train_dir), latest,
                          exact=True)
    values = checkpoint_values(runner_checkpoint_latest(resumes["built", "signal"].train_dir))
    assert any(key.endswith("Adam_1/.ATTRIBUTES/VARIABLE_VALUE") for key in values)
    assert any("beta1_power" in key for key in values)


def test_sigterm_suspends_too(tmp_path):
    config = small_config(tmp_path / "t", max_number_of_steps=100000,
                          events_file=str(tmp_path / "e.jsonl"))
    proc = start(config)
    wait_for_step(Path(config.events_file), 2, proc)
    proc.send_signal(signal.SIGTERM)
    code, out = finish(proc)
    assert code == rp.EXIT_SUSPENDED, out
    events = list(rp.iter_events(config.events_file))
    assert events[-1]["event"] == "suspended"
    saved = [e["step"] for e in events if e["event"] == "checkpoint"]
    assert saved[-1] == events[-1]["step"]   # the state at the suspended step is on disk


def test_tfgshare_train_command_rejects_bad_input(tmp_path):
    env = {**os.environ, "PYTHONPATH": PYTHONPATH}
    proc = subprocess.run(
        [sys.executable, "-m", "tfgshare.cli", "train", "--train_dir", str(tmp_path),
         "--model_name", "inception_v3", "--image_size", "20"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == rp.EXIT_BAD_INPUT
    assert "image size 20 is too small for inception_v3" in proc.stderr


def runner_checkpoint_latest(train_dir: str) -> str:
    from tfgshare.runner.checkpoint import latest_checkpoint

    return latest_checkpoint(train_dir)


def test_threads_not_in_effect_in_a_process_whose_devices_exist_are_warned_about(tmp_path):
    # the runner makes the process's devices with the job's threads; an in-process caller
    # whose TensorFlow made them already (here with its default threads) is told
    config = small_config(tmp_path / "w", max_number_of_steps=2)
    code = ("import sys, tensorflow as tf; tf.constant(1.0) + 1\n"
            "from tfgshare.runner import main\nfrom tfgshare.runner.config import parse_args\n"
            "main.train(parse_args(sys.argv[1:]))")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": PYTHONPATH}
    done = subprocess.run([sys.executable, "-c", code, *config.to_argv()], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    assert "not in effect: intra_op_threads 1 (made with 0)" in done.stderr
    assert "inter_op_threads 1 (made with 0)" in done.stderr
