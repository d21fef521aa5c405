"""Shared helpers for the runner tests: small configs and checkpoint contents."""

from __future__ import annotations

import numpy as np

from tfgshare.runner.config import TrainConfig

SKIP_KEYS = ("_CHECKPOINTABLE_OBJECT_GRAPH", "save_counter", "job_spec")


def small_config(train_dir, **changes) -> TrainConfig:
    """A quick, deterministic lenet job on synthetic data."""
    base = dict(train_dir=str(train_dir), model_name="lenet", dataset_name="synthetic",
                batch_size=8, max_number_of_steps=10, optimizer="sgd",
                learning_rate=0.01, learning_rate_decay_type="fixed", weight_decay=0.0,
                num_classes=4, seed=7, deterministic=True, intra_op_threads=1,
                inter_op_threads=1, warmup_steps=1, num_sample_steps=3,
                max_sample_share=0.5, log_every_n_steps=1, save_interval_secs=0)
    base.update(changes)
    return TrainConfig(**base)


def checkpoint_values(path: str) -> dict[str, np.ndarray]:
    """Every saved variable of a checkpoint, by its key."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(path)
    return {key: reader.get_tensor(key) for key, _ in tf.train.list_variables(path)
            if not any(skip in key for skip in SKIP_KEYS)}


def assert_same_state(path_a: str, path_b: str, exact: bool = False) -> None:
    """Both checkpoints hold the same variables with allclose (or, ``exact``, equal) values."""
    a, b = checkpoint_values(path_a), checkpoint_values(path_b)
    assert sorted(a) == sorted(b)
    same = np.array_equal if exact else lambda x, y: np.allclose(x, y, rtol=1e-5, atol=1e-6)
    differ = [k for k in a if not same(a[k], b[k])]
    assert not differ, f"{len(differ)} variables differ, e.g. {differ[:3]}"
