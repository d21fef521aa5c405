"""Fenced checkpoints: an older attempt of a job can never replace a newer attempt's checkpoint."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

from runner_helpers import small_config  # noqa: E402

from tfgshare.runner import checkpoint as ckpt  # noqa: E402
from tfgshare.runner import main as runner  # noqa: E402
from tfgshare.runner import protocol as rp  # noqa: E402


def fake_checkpoint(train_dir: Path, epoch: int, step: int) -> str:
    """Files where attempt ``epoch`` would write its checkpoint of ``step``."""
    folder = ckpt.attempt_dir(train_dir, epoch)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{ckpt.CHECKPOINT_NAME}-{step}"
    for suffix in (".index", ".data-00000-of-00001"):
        Path(str(path) + suffix).write_bytes(b"x")
    return str(path)


def test_pointer_refuses_an_older_epoch_and_keeps_the_newer_checkpoint(tmp_path):
    newer = fake_checkpoint(tmp_path, 3, 10)
    ckpt.publish(tmp_path, newer, 3, max_to_keep=2)
    stale = fake_checkpoint(tmp_path, 2, 12)      # a stalled attempt saves later, further on
    with pytest.raises(rp.FencedError, match="attempt 2 is fenced off .* attempt 3"):
        ckpt.publish(tmp_path, stale, 2, max_to_keep=2)
    assert ckpt.candidates(tmp_path) == [newer]
    assert ckpt.pointer_epoch(tmp_path) == 3
    # the same epoch and newer ones move it on; the oldest beyond max_to_keep are deleted
    ckpt.publish(tmp_path, fake_checkpoint(tmp_path, 3, 20), 3, max_to_keep=2)
    latest = fake_checkpoint(tmp_path, 4, 30)
    ckpt.publish(tmp_path, latest, 4, max_to_keep=2)
    assert ckpt.candidates(tmp_path) == [latest, str(tmp_path / "attempt-3/model.ckpt-20")]
    assert not list(tmp_path.glob("attempt-3/model.ckpt-10.*"))


def test_a_claim_fences_older_attempts_before_the_new_one_saves(tmp_path):
    first = fake_checkpoint(tmp_path, 1, 5)
    ckpt.publish(tmp_path, first, 1, max_to_keep=3)
    ckpt.claim(tmp_path, 2)                       # attempt 2 starts: same checkpoints, epoch 2
    assert ckpt.candidates(tmp_path) == [first] and ckpt.pointer_epoch(tmp_path) == 2
    with pytest.raises(rp.FencedError):
        ckpt.publish(tmp_path, fake_checkpoint(tmp_path, 1, 9), 1, max_to_keep=3)
    with pytest.raises(rp.FencedError):
        ckpt.claim(tmp_path, 1)
    fresh = tmp_path / "fresh"
    ckpt.claim(fresh, 4)                          # a claim before any save: nothing to restore
    assert ckpt.candidates(fresh) == [] and ckpt.pointer_epoch(fresh) == 4


def test_stalled_runner_cannot_replace_a_newer_attempts_checkpoint(tmp_path):
    """Attempt 1 stalls mid-run; attempt 2 runs the job to the end; attempt 1 wakes up and
    tries to checkpoint: it is fenced off, and attempt 2's checkpoint stays current."""
    train_dir = tmp_path / "job"
    newer: list = []

    def stall_then_wake(event: dict) -> None:
        if event["event"] == "progress" and event["step"] == 4 and not newer:
            newer.append(runner.train(small_config(train_dir, epoch=2, max_number_of_steps=6),
                                      stop_event=threading.Event()))

    old = small_config(train_dir, epoch=1, max_number_of_steps=12, save_interval_steps=5)
    with pytest.raises(rp.FencedError, match="attempt 1 is fenced off"):
        runner.train(old, on_event=stall_then_wake, stop_event=threading.Event())
    (done,) = newer
    assert done.status == "finished" and done.global_step == 6
    assert done.checkpoint == str(train_dir / "attempt-2" / "model.ckpt-6")
    assert ckpt.candidates(train_dir)[0] == done.checkpoint
    assert ckpt.pointer_epoch(train_dir) == 2
    assert not list(train_dir.glob("attempt-1/model.ckpt-5.*"))
    # the next attempt resumes from attempt 2's checkpoint
    events: list = []
    result = runner.train(small_config(train_dir, epoch=3, max_number_of_steps=8),
                          on_event=events.append, stop_event=threading.Event())
    assert result.restored_from == done.checkpoint and result.global_step == 8
    assert result.checkpoint == str(train_dir / "attempt-3" / "model.ckpt-8")
