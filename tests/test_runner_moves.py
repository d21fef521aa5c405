"""Fast moves: the exported graph, the checkpoint ops, falling back from a corrupt checkpoint."""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("tensorflow")

from runner_helpers import assert_same_state, small_config  # noqa: E402

from tfgshare.runner import checkpoint as ckpt  # noqa: E402
from tfgshare.runner import graph_file  # noqa: E402
from tfgshare.runner import main as runner  # noqa: E402
from tfgshare.runner import protocol as rp  # noqa: E402


def run(config):
    events = []
    result = runner.train(config, on_event=events.append, stop_event=threading.Event())
    return result, events


def one(events, name):
    found = [e for e in events if e["event"] == name]
    assert len(found) == 1, [e["event"] for e in events]
    return found[0]


def test_resume_imports_the_exported_graph_and_matches_a_straight_run(tmp_path):
    straight, _ = run(small_config(tmp_path / "a", max_number_of_steps=8, optimizer="adam"))
    _, first = run(small_config(tmp_path / "b", max_number_of_steps=3, optimizer="adam"))
    fresh = one(first, "start_phases")
    assert fresh["graph_source"] == "built"
    # a fresh start initialises its variables where a resume restores them
    assert fresh["init_s"] > 0 and fresh["input_s"] > 0
    assert fresh["restore_s"] == 0 and fresh["restored_from"] is None
    assert (tmp_path / "b" / graph_file.GRAPH_FILE).exists()
    resumed, second = run(small_config(tmp_path / "b", max_number_of_steps=8, optimizer="adam"))
    phases = one(second, "start_phases")
    assert phases["graph_source"] == "imported"
    assert phases["restored_from"].endswith("model.ckpt-3") and phases["restore_s"] > 0
    assert phases["init_s"] == phases["input_s"] == 0
    assert phases["first_step_s"] > 0 and phases["graph_s"] > 0
    assert not [e for e in second if e["event"] == "warning" and "graph" in e["message"]]
    # a resumed job does not checkpoint again after its sample: only at the end
    assert [e["step"] for e in second if e["event"] == "checkpoint"] == [8]
    assert_same_state(straight.checkpoint, resumed.checkpoint)


@pytest.mark.parametrize("damage", ["stale", "garbled"])
def test_a_stale_or_garbled_graph_file_is_rebuilt_not_used(tmp_path, damage):
    run(small_config(tmp_path, max_number_of_steps=2))
    path = tmp_path / graph_file.GRAPH_FILE
    if damage == "garbled":
        path.write_bytes(path.read_bytes()[:1000])
        # the same job with a changed graph-shaping flag must not reuse it either
    config = small_config(tmp_path, max_number_of_steps=4,
                          label_smoothing=0.1 if damage == "stale" else 0.0)
    result, events = run(config)
    assert one(events, "start_phases")["graph_source"] == "built"
    warning = one(events, "warning")["message"]
    assert ("stale: flags.label_smoothing differ" in warning if damage == "stale"
            else "unreadable" in warning)
    assert result.global_step == 4
    _, again = run(small_config(tmp_path, max_number_of_steps=5,
                                label_smoothing=config.label_smoothing))
    assert one(again, "start_phases")["graph_source"] == "imported"   # rewritten, now current


def test_a_graph_file_naming_an_op_it_lacks_is_rebuilt_not_used(tmp_path):
    """The import makes Python objects only for the ops the run uses, found by the names
    saved with the graph: a file whose names and graph disagree is not used."""
    import json

    from tensorflow.core.protobuf import meta_graph_pb2

    from tfgshare.runner import graph as runner_graph

    config = small_config(tmp_path, max_number_of_steps=2)
    run(config)
    path = tmp_path / graph_file.GRAPH_FILE
    meta = meta_graph_pb2.MetaGraphDef.FromString(path.read_bytes())
    key = graph_file.graph_key(config, runner_graph.tower_devices(1))
    built, why = graph_file.load(key, config)
    assert why == "" and 0 < len(built.graph.get_operations()) < len(meta.graph_def.node) / 4
    values = meta.collection_def[graph_file.INFO_COLLECTION].bytes_list.value
    info = json.loads(values[0])
    info["handles"]["elements"]["train_tensor"] = "no_such_op:0"
    values[0] = json.dumps(info, sort_keys=True).encode()
    path.write_bytes(meta.SerializeToString())
    assert graph_file.load(key, config)[0] is None
    result, events = run(small_config(tmp_path, max_number_of_steps=4))
    assert "cannot be imported" in one(events, "warning")["message"]
    assert one(events, "start_phases")["graph_source"] == "built"
    assert result.global_step == 4

def test_graph_key_covers_devices_versions_and_sources(tmp_path):
    config = small_config(tmp_path / "here")
    key = graph_file.graph_key(config, ["/cpu:0"])
    assert graph_file._differences(key, graph_file.graph_key(config, ["/gpu:0"])) == ["devices"]
    moved = small_config(tmp_path / "elsewhere", max_number_of_steps=99, memory_fraction=0.5)
    assert graph_file._differences(key, graph_file.graph_key(moved, ["/cpu:0"])) == []
    assert {"tensorflow", "tf_slim", "sources", "graph_version", "batch_norm"} <= set(key)


def test_corrupt_latest_checkpoint_falls_back_to_the_newest_good_one(tmp_path):
    straight, _ = run(small_config(tmp_path / "a", max_number_of_steps=9, save_interval_steps=3,
                                   num_sample_steps=0))
    run(small_config(tmp_path / "b", max_number_of_steps=6, save_interval_steps=3,
                     num_sample_steps=0))
    data = next((tmp_path / "b").glob("model.ckpt-6.data-*"))
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF   # one flipped byte inside the weights
    data.write_bytes(bytes(raw))
    resumed, events = run(small_config(tmp_path / "b", max_number_of_steps=9,
                                       save_interval_steps=3, num_sample_steps=0))
    warnings = [e["message"] for e in events if e["event"] == "warning"]
    assert any("model.ckpt-6 cannot be read" in w for w in warnings), warnings
    assert any("resuming from" in w and "model.ckpt-3" in w for w in warnings), warnings
    assert one(events, "started")["global_step"] == 3
    assert resumed.global_step == 9
    assert_same_state(straight.checkpoint, resumed.checkpoint)


def test_no_readable_checkpoint_is_an_error(tmp_path):
    run(small_config(tmp_path, max_number_of_steps=2))
    for data in tmp_path.glob("model.ckpt-2.data-*"):
        data.write_bytes(data.read_bytes()[:40])   # a partial write
    with pytest.raises(rp.CheckpointError, match="no readable checkpoint"):
        run(small_config(tmp_path, max_number_of_steps=4))


def test_checkpoints_keep_tf_train_checkpoint_format_both_ways(tmp_path):
    """tf.train.Checkpoint reads the runner's checkpoints; the runner restores its writes."""
    import tensorflow as tf

    from tfgshare.runner import graph as runner_graph

    result, _ = run(small_config(tmp_path / "new", max_number_of_steps=2, optimizer="momentum"))
    config = small_config(tmp_path / "old", max_number_of_steps=4, optimizer="momentum")
    built = runner_graph.build_training_graph(config)
    with built.graph.as_default(), tf.compat.v1.Session() as session:
        session.run(built.init_op)
        reference = tf.train.Checkpoint(variables={v.op.name: v for v in built.variables})
        session.run(reference.save_counter.initializer)
        status = reference.read(result.checkpoint)
        status.assert_consumed()
        status.run_restore_ops(session)
        assert session.run(built.global_step) == 2
        manager = tf.train.CheckpointManager(reference, config.train_dir, max_to_keep=2,
                                             checkpoint_name=ckpt.CHECKPOINT_NAME)
        with session.as_default():
            manager.save(checkpoint_number=2)
    resumed, events = run(config)
    assert one(events, "started")["global_step"] == 2 and resumed.global_step == 4
