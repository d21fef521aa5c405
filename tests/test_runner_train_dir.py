"""``tfgshare train`` as a user sees it: what it says at the end, on a resume and on a
finished train dir, and the train dirs it refuses (left as they were)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tfgshare.runner import main as runner
from tfgshare.runner import protocol as rp


def _listing(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def test_a_train_dir_of_unrelated_files_is_refused_and_left_alone(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("my notes\n")
    (tmp_path / "photos").mkdir()
    code = runner.main(["--train_dir", str(tmp_path), "--max_number_of_steps", "2"])
    assert code == rp.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert f"--train_dir {tmp_path} holds other files (notes.txt, photos)" in err
    assert "no checkpoint of a job" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "photos"]


def test_the_runs_own_events_file_does_not_make_a_train_dir_unrelated(tmp_path):
    from tfgshare.runner.train_dir import refuse_unrelated

    events = tmp_path / "events.jsonl"
    events.write_text("")
    refuse_unrelated(tmp_path, events)            # a first run that failed early
    refuse_unrelated(tmp_path / "missing")        # a new one
    with pytest.raises(rp.BadInputError, match="holds other files"):
        refuse_unrelated(tmp_path)


tf_needed = pytest.mark.skipif(__import__("importlib").util.find_spec("tensorflow") is None,
                               reason="needs TensorFlow")


@tf_needed
def test_finish_then_already_finished_then_resume_each_say_so(tmp_path, capsys):
    from runner_helpers import small_config

    config = small_config(tmp_path, max_number_of_steps=6, log_every_n_steps=100)
    assert runner.main(config.to_argv()) == rp.EXIT_OK
    out = capsys.readouterr().out
    assert f"finished: 6 steps in " in out and f"s, checkpoint in {tmp_path}\n" in out
    assert "resuming" not in out

    before = _listing(tmp_path)
    assert runner.main(config.to_argv()) == rp.EXIT_OK
    out = capsys.readouterr().out
    assert out == f"already finished: {tmp_path} holds step 6 of 6; nothing to do\n"
    assert _listing(tmp_path) == before

    config.max_number_of_steps = 9
    assert runner.main(config.to_argv()) == rp.EXIT_OK
    out = capsys.readouterr().out
    assert f"resuming from step 6 of 9 ({tmp_path}/model.ckpt-6)" in out
    assert "finished: 3 steps in " in out and "(resumed at step 6, now 9 of 9)" in out


@tf_needed
def test_another_models_train_dir_is_refused_before_anything_is_written(tmp_path, capsys):
    from runner_helpers import small_config

    assert runner.main(small_config(tmp_path, max_number_of_steps=2).to_argv()) == rp.EXIT_OK
    capsys.readouterr()
    before = _listing(tmp_path)
    assert "graph.meta" in before
    code = runner.main(small_config(tmp_path, model_name="cifarnet",
                                    max_number_of_steps=4).to_argv())
    assert code == rp.EXIT_CHECKPOINT_ERROR
    err = capsys.readouterr().err
    assert "model_name='lenet' but this run has model_name='cifarnet'" in err
    assert "use another --train_dir" in err
    assert _listing(tmp_path) == before        # graph.meta and the pointer untouched


@tf_needed
def test_a_foreign_tensorflow_checkpoint_is_refused_before_anything_is_written(tmp_path, capsys):
    import tensorflow as tf
    from runner_helpers import small_config

    tf.train.Checkpoint(v=tf.Variable(1.0)).save(str(tmp_path / "model.ckpt"))
    before = _listing(tmp_path)
    code = runner.main(small_config(tmp_path, max_number_of_steps=2).to_argv())
    assert code == rp.EXIT_CHECKPOINT_ERROR
    err = capsys.readouterr().err
    assert f"no readable checkpoint in {tmp_path}" in err and "not a tfgshare checkpoint" in err
    assert _listing(tmp_path) == before and "graph.meta" not in before
