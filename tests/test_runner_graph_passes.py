"""The grappler passes a CPU-only runner skips (``graph.CPU_GRAPH_PASSES``)."""

from __future__ import annotations

import threading

import pytest

tf = pytest.importorskip("tensorflow")

from runner_helpers import assert_same_state, small_config  # noqa: E402

from tfgshare.runner import graph as runner_graph  # noqa: E402
from tfgshare.runner import main as runner  # noqa: E402


def test_the_light_switch_skips_the_costly_passes_on_the_cpu(tmp_path, monkeypatch):
    from tensorflow.core.protobuf.rewriter_config_pb2 import RewriterConfig

    assert not tf.config.list_physical_devices("GPU")   # the light passes are for CPUs only
    config = small_config(tmp_path)
    monkeypatch.setattr(runner_graph, "CPU_GRAPH_PASSES", "default")
    assert runner_graph.session_config(config).graph_options.rewrite_options == RewriterConfig()

    monkeypatch.setattr(runner_graph, "CPU_GRAPH_PASSES", "light")
    options = runner_graph.session_config(config).graph_options.rewrite_options
    for name in ("constant_folding", "arithmetic_optimization", "layout_optimizer", "remapping"):
        assert getattr(options, name) == RewriterConfig.OFF, name
    assert options.meta_optimizer_iterations == RewriterConfig.ONE
    assert options.memory_optimization == RewriterConfig.NO_MEM_OPT
    # the passes that shrink the graph stay on
    assert options.dependency_optimization == RewriterConfig.DEFAULT
    assert not options.disable_model_pruning and not options.disable_meta_optimizer


def test_training_with_the_light_passes_matches_the_default_passes(tmp_path, monkeypatch):
    monkeypatch.setattr(runner_graph, "CPU_GRAPH_PASSES", "light")
    light = runner.train(small_config(tmp_path / "light", optimizer="momentum",
                                      max_number_of_steps=6), stop_event=threading.Event())
    monkeypatch.setattr(runner_graph, "CPU_GRAPH_PASSES", "default")
    default = runner.train(small_config(tmp_path / "default", optimizer="momentum",
                                        max_number_of_steps=6), stop_event=threading.Event())
    assert light.loss == pytest.approx(default.loss, rel=1e-6)
    assert_same_state(default.checkpoint, light.checkpoint)
