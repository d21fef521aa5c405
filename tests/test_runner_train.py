"""The runner in-process on the CPU: learning, events, sampling, checkpoints, errors."""

from __future__ import annotations

import json
import threading

import pytest

pytest.importorskip("tensorflow")

from runner_helpers import assert_same_state, checkpoint_values, small_config  # noqa: E402

from tfgshare.runner import main as runner  # noqa: E402
from tfgshare.runner import protocol as rp  # noqa: E402
from tfgshare.runner.protocol import CheckpointError  # noqa: E402


def run(config, stop_at=None):
    """Train ``config`` in-process; stop after step ``stop_at``. Returns (result, events)."""
    events = []
    stop = threading.Event()

    def on_event(event):
        events.append(event)
        if stop_at is not None and event["event"] == "progress" and event["step"] >= stop_at:
            stop.set()

    return runner.train(config, on_event=on_event, stop_event=stop), events


def losses(events):
    return [e["loss"] for e in events if e["event"] == "progress"]


@pytest.mark.parametrize("model", ["lenet", "cifarnet"])
def test_small_nets_learn_the_synthetic_task(tmp_path, model):
    config = small_config(tmp_path, model_name=model, max_number_of_steps=50, batch_size=16,
                          optimizer="momentum", learning_rate=0.02, log_every_n_steps=5)
    result, events = run(config)
    assert result.status == "finished" and result.global_step == 50
    first, last = losses(events)[:2], losses(events)[-2:]
    assert sum(last) < 0.6 * sum(first), losses(events)


def test_events_carry_the_protocol_fields(tmp_path):
    events_file = tmp_path / "events.jsonl"
    result, events = run(small_config(tmp_path / "t", events_file=str(events_file),
                                      job_id="job-3"))
    names = [e["event"] for e in events]
    assert names[0] == "started" and names[-1] == "finished"
    assert {"sample", "progress", "checkpoint"} <= set(names)
    for event in events:
        assert set(rp.EVENTS[event["event"]]) <= set(event), event
        assert event["job_id"] == "job-3"
    assert list(rp.iter_events(events_file)) == events
    assert [e["step"] for e in events if e["event"] == "progress"] == list(range(1, 11))
    # a checkpoint right after the sample (the job may be moved then), and at the end
    assert [e["step"] for e in events if e["event"] == "checkpoint"] == [4, 10]
    assert names.index("checkpoint") == names.index("sample") + 1
    assert events[0]["restored"] is False and events[0]["global_step"] == 0


def test_session_gets_the_memory_fraction(tmp_path, monkeypatch):
    import tensorflow as tf

    used = []
    real_session = tf.compat.v1.Session

    class RecordingSession(real_session):
        def __init__(self, *args, config=None, **kwargs):
            used.append(config)
            super().__init__(*args, config=config, **kwargs)

    monkeypatch.setattr(tf.compat.v1, "Session", RecordingSession)
    run(small_config(tmp_path, memory_fraction=0.3, max_number_of_steps=2,
                     intra_op_threads=2, inter_op_threads=1))
    assert len(used) == 1
    assert used[0].gpu_options.per_process_gpu_memory_fraction == pytest.approx(0.3)
    assert used[0].intra_op_parallelism_threads == 2


def _prediction_errors(train_dir):
    config = small_config(train_dir, max_number_of_steps=200, batch_size=32, warmup_steps=5,
                          num_sample_steps=30, max_sample_share=0.15, log_every_n_steps=50,
                          deterministic=False)
    result, events = run(config)
    by_name = {e["event"]: e for e in events}
    sample, finished = by_name["sample"], by_name["finished"]
    assert (sample["warmup_steps"], sample["sampled_steps"]) == (5, 25)
    assert sample["memory_source"] == "process_rss_peak" and sample["peak_memory_mb"] > 10
    assert sample["images_per_sec"] == pytest.approx(32 / sample["step_time_mean_s"])
    on_disk = json.loads((train_dir / runner.SAMPLE_FILE).read_text())
    assert on_disk["predicted_total_s"] == sample["predicted_total_s"]
    assert on_disk["step"] == 30
    assert result.sample == {k: v for k, v in sample.items() if k not in ("event", "time")}
    saving = sum(e["seconds"] for e in events if e["event"] == "checkpoint")
    measured_rest = finished["time"] - sample["time"] - saving
    measured_total = finished["time"] - events[0]["time"] - saving
    return (abs(sample["predicted_remaining_s"] / measured_rest - 1),
            abs(sample["predicted_total_s"] / measured_total - 1))


def test_sample_record_predicts_the_rest_of_the_run(tmp_path):
    # Other jobs share this machine's CPUs and can slow part of a run; a run whose
    # prediction misses is repeated (at most three runs), one must be within 25%.
    errors = []
    for attempt in range(3):
        errors.append(_prediction_errors(tmp_path / str(attempt)))
        if max(errors[-1]) <= 0.25:
            return
    pytest.fail(f"relative errors (remaining, total) of three runs: {errors}")


def test_progress_keeps_refreshing_the_prediction(tmp_path):
    _, events = run(small_config(tmp_path, max_number_of_steps=12))
    remaining = [e["predicted_remaining_s"] for e in events if e["event"] == "progress"]
    assert remaining[-1] == 0
    assert all(r is not None for r in remaining[2:])
    assert remaining[2] > remaining[-2] > 0


def test_stop_request_finishes_the_step_and_checkpoints(tmp_path):
    result, events = run(small_config(tmp_path, max_number_of_steps=50), stop_at=4)
    assert result.status == "suspended" and result.exit_code == rp.EXIT_SUSPENDED
    assert result.global_step == 4
    assert [e["step"] for e in events if e["event"] == "checkpoint"] == [4]
    assert events[-1] == {**events[-1], "event": "suspended", "step": 4}
    resumed, events2 = run(small_config(tmp_path, max_number_of_steps=6))
    assert events2[0]["restored"] is True and events2[0]["global_step"] == 4
    assert resumed.global_step == 6 and resumed.restored_from.endswith("model.ckpt-4")


def test_in_process_resume_matches_an_uninterrupted_run(tmp_path):
    straight, _ = run(small_config(tmp_path / "a", max_number_of_steps=8, optimizer="momentum"))
    run(small_config(tmp_path / "b", max_number_of_steps=3, optimizer="momentum"))
    resumed, _ = run(small_config(tmp_path / "b", max_number_of_steps=8, optimizer="momentum"))
    assert resumed.global_step == straight.global_step == 8
    assert_same_state(straight.checkpoint, resumed.checkpoint)
    slots = [k for k in checkpoint_values(resumed.checkpoint) if "Momentum" in k]
    assert slots, "momentum slots are not in the checkpoint"


def test_sample_only_checkpoints_and_suspends(tmp_path):
    result, events = run(small_config(tmp_path, max_number_of_steps=100, warmup_steps=2,
                                      num_sample_steps=4, max_sample_share=0.1,
                                      sample_only=True))
    assert result.status == "suspended" and result.global_step == 6
    names = [e["event"] for e in events]
    assert names[-5:] == ["sample", "progress", "checkpoint", "stop_phases", "suspended"]
    assert (tmp_path / runner.SAMPLE_FILE).exists()
    sample = next(e for e in events if e["event"] == "sample")
    # measured over the sampled steps only: they began after the warm-up
    started = next(e for e in events if e["event"] == "started")
    assert started["time"] <= sample["window_start"] <= sample["time"]
    assert 0.0 < sample["cpu_util"] <= 1.0
    # resumed after its sample, it does not sample again (nor save an extra checkpoint)
    again, events = run(small_config(tmp_path, max_number_of_steps=12, warmup_steps=2,
                                     num_sample_steps=4, max_sample_share=0.1))
    assert again.status == "finished" and again.sample is None
    names = [e["event"] for e in events]
    assert "sample" not in names and names.count("checkpoint") == 1


def test_a_suspend_asked_after_the_sample_ended_the_run_has_no_stop_wait(tmp_path):
    """A sampling run stops on its own; a suspend that arrives while it saves did not
    stop it, so its ``stop_phases`` reports no wait for it (it read -0.5 s)."""
    from tfgshare.runner.stop import StopRequest

    events, stop = [], StopRequest()

    def on_event(event):
        events.append(event)
        if event["event"] == "checkpoint":
            stop.set()
    runner.train(small_config(tmp_path, max_number_of_steps=100, warmup_steps=2,
                              num_sample_steps=4, sample_only=True),
                 on_event=on_event, stop_event=stop)
    phases = next(e for e in events if e["event"] == "stop_phases")
    assert phases["stop_wait_s"] is None and phases["save_s"] >= 0


def test_periodic_checkpoints_keep_the_newest(tmp_path):
    result, events = run(small_config(tmp_path, max_number_of_steps=14, save_interval_steps=3,
                                      max_to_keep=2, num_sample_steps=0))
    assert [e["step"] for e in events if e["event"] == "checkpoint"] == [3, 6, 9, 12, 14]
    kept = sorted(p.name for p in tmp_path.glob("model.ckpt-*.index"))
    assert kept == ["model.ckpt-12.index", "model.ckpt-14.index"]
    assert result.checkpoint.endswith("model.ckpt-14")


def test_two_towers_share_one_set_of_weights(tmp_path):
    two, events = run(small_config(tmp_path, num_gpus=2, batch_size=8, max_number_of_steps=20,
                                   optimizer="momentum", learning_rate=0.02,
                                   log_every_n_steps=5))
    assert two.devices == ["/cpu:0", "/cpu:0"]
    assert events[-1]["event"] == "finished"
    first, last = losses(events)[:2], losses(events)[-2:]
    assert sum(last) < sum(first)
    one, _ = run(small_config(tmp_path / "one", max_number_of_steps=1, optimizer="momentum"))
    assert sorted(checkpoint_values(two.checkpoint)) == sorted(checkpoint_values(one.checkpoint))
    # a two-tower job resumes on one device (migration to fewer GPUs)
    moved, _ = run(small_config(tmp_path, num_gpus=1, max_number_of_steps=22,
                                optimizer="momentum", learning_rate=0.02))
    assert moved.global_step == 22 and moved.restored_from.endswith("model.ckpt-20")


def test_checkpoint_of_another_model_is_refused(tmp_path):
    run(small_config(tmp_path, max_number_of_steps=2))
    with pytest.raises(CheckpointError, match="model_name='lenet' but this run has "
                                              "model_name='cifarnet'"):
        run(small_config(tmp_path, model_name="cifarnet", max_number_of_steps=4))
    with pytest.raises(CheckpointError, match="num_classes"):
        run(small_config(tmp_path, num_classes=5, max_number_of_steps=4))


def test_corrupt_checkpoint_is_an_error_not_a_fresh_start(tmp_path):
    result, _ = run(small_config(tmp_path, max_number_of_steps=2))
    data = next(tmp_path.glob("model.ckpt-2.data-*"))
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 3])
    events_file = tmp_path / "events.jsonl"
    code = runner.main(small_config(tmp_path, max_number_of_steps=4,
                                    events_file=str(events_file)).to_argv())
    assert code == rp.EXIT_CHECKPOINT_ERROR
    errors = [e for e in rp.iter_events(events_file) if e["event"] == "error"]
    assert "model.ckpt-2" in errors[0]["message"]
    assert not list(tmp_path.glob("model.ckpt-4*")), "it must not have trained from scratch"


def test_garbled_checkpoint_state_is_an_error(tmp_path):
    run(small_config(tmp_path, max_number_of_steps=2))
    (tmp_path / "checkpoint").write_text("this is not a checkpoint state\n")
    with pytest.raises(CheckpointError, match="checkpoint"):
        run(small_config(tmp_path, max_number_of_steps=4))


@pytest.mark.parametrize("flags, words", [
    (["--model_name", "nonet"], "unknown model 'nonet'"),
    (["--model_name", "alexnet_v2", "--image_size", "64"], "too small for alexnet_v2"),
    (["--dataset_dir", "/nonexistent/tfgshare-data"], "does not exist"),
])
def test_bad_input_exits_with_a_clear_message(tmp_path, capsys, flags, words):
    events_file = tmp_path / "e.jsonl"
    code = runner.main(["--train_dir", str(tmp_path / "t"), "--events_file", str(events_file),
                        *flags])
    assert code == rp.EXIT_BAD_INPUT
    assert words in capsys.readouterr().err
    assert words in list(rp.iter_events(events_file))[-1]["message"]


def test_a_crash_loses_at_most_the_steps_since_the_last_periodic_checkpoint(tmp_path):
    class Crash(Exception):
        pass

    def crash_at_step_8(event):
        if event["event"] == "progress" and event["step"] == 8:
            raise Crash

    with pytest.raises(Crash):
        runner.train(small_config(tmp_path, max_number_of_steps=20, save_interval_steps=5),
                     on_event=crash_at_step_8)
    resumed, events = run(small_config(tmp_path, max_number_of_steps=20, save_interval_steps=5))
    assert events[0]["restored"] is True and events[0]["global_step"] == 5
    assert resumed.global_step == 20


def test_time_based_checkpoints(tmp_path, monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(runner.time, "monotonic", lambda: clock[0])

    def tick(event):
        if event["event"] == "progress":
            clock[0] += 4.0   # every step "takes" four seconds

    runner.train(small_config(tmp_path, max_number_of_steps=9, save_interval_secs=10,
                              num_sample_steps=0), on_event=tick)
    saved = sorted(int(p.name.split("-")[1].split(".")[0])
                   for p in tmp_path.glob("model.ckpt-*.index"))
    assert saved == [3, 6, 9]   # 12 s after the start, 12 s later, and the final save


def test_in_process_run_leaves_op_determinism_as_it_was(tmp_path):
    import tensorflow as tf

    run(small_config(tmp_path, max_number_of_steps=1, deterministic=True))
    with tf.Graph().as_default():
        tf.random.uniform([2])   # raises while op determinism is on and no seed is set
