"""slim_models.compat: tf_slim's batch norm works on TF 2.16+ with tf-keras."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

BATCH_NORM_IN_GRAPH_MODE = """
import sys
import numpy as np
from slim_models.compat import ensure_tf_compat
ensure_tf_compat()
first = sys.modules.get("tf_keras.legacy_tf_layers.normalization")
ensure_tf_compat()
assert sys.modules.get("tf_keras.legacy_tf_layers.normalization") is first
import tensorflow as tf
import tf_slim as slim
graph = tf.Graph()
with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [4, 5, 5, 3])
    y = slim.batch_norm(x, decay=0.5, is_training=True, scale=True)
    updates = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS)
    mean = [v for v in tf.compat.v1.global_variables() if "moving_mean" in v.name][0]
    with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        out, _ = sess.run([y, updates], {x: np.full([4, 5, 5, 3], 2.0) + np.arange(3)})
        print(len(updates), np.round(sess.run(mean), 3).tolist(), float(np.abs(out).max()))
"""


def test_tf_slim_batch_norm_builds_and_updates_in_graph_mode():
    done = subprocess.run([sys.executable, "-c", BATCH_NORM_IN_GRAPH_MODE], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    fields = done.stdout.strip().splitlines()[-1]
    assert fields.startswith("2 ")  # moving mean and variance updates
    # decay 0.5 from 0 towards the batch mean [2, 3, 4]
    assert "[1.0, 1.5, 2.0]" in fields
    assert float(fields.rsplit(" ", 1)[1]) < 1e-3  # constant input normalizes to 0


def test_fix_is_idempotent_in_process():
    from slim_models.compat import ensure_tf_compat

    ensure_tf_compat()
    aliased = dict((k, v) for k, v in sys.modules.items() if k.startswith("tf_keras.legacy"))
    ensure_tf_compat()
    assert aliased == {k: v for k, v in sys.modules.items() if k.startswith("tf_keras.legacy")}
    import tensorflow.python.layers.normalization as normalization

    assert normalization.BatchNormalization.__name__ == "BatchNormalization"
