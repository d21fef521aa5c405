"""slim_models.batch_norm: same variables, outputs and updates as tf_slim's batch norm."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from slim_models import nets_factory  # noqa: E402
from slim_models.batch_norm import batch_norm as fused_batch_norm  # noqa: E402
from slim_models.batch_norm import use_fused  # noqa: E402
from slim_models.compat import ensure_tf_compat  # noqa: E402

ensure_tf_compat()
import tf_slim as slim  # noqa: E402

BN_PARAMS = {  # two styles of the slim nets: resnet's (scale) and inception's (collections)
    "resnet": dict(decay=0.9, epsilon=1e-5, scale=True),
    "inception": dict(decay=0.9997, epsilon=0.001, scale=False,
                      variables_collections={"beta": None, "gamma": None,
                                             "moving_mean": ["moving_vars"],
                                             "moving_variance": ["moving_vars"]}),
}


def small_net(images, is_training: bool, bn_params: dict, fused: bool):
    """Two conv + batch norm layers under a slim-net style arg scope."""
    scope = {}
    with slim.arg_scope([slim.conv2d], normalizer_fn=slim.batch_norm,
                        normalizer_params=bn_params), \
            slim.arg_scope([slim.batch_norm], **bn_params) as scope:
        pass
    if fused:
        scope = use_fused(scope)
    with slim.arg_scope(scope), slim.arg_scope([slim.batch_norm], is_training=is_training):
        net = slim.conv2d(images, 6, [3, 3], scope="conv1")
        net = slim.conv2d(net, 4, [3, 3], scope="conv2")
        # a direct call, as resnet_v2 makes it
        return (fused_batch_norm if fused else slim.batch_norm)(net, scope="postnorm")


def run(fused: bool, is_training: bool, style: str, images: np.ndarray):
    """Outputs, then the model variables after one step of updates, by name."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf.constant(images)
        y = small_net(x, is_training, BN_PARAMS[style], fused)
        updates = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS)
        variables = tf.compat.v1.global_variables()
        rng = np.random.default_rng(3)
        assigns = [v.assign(rng.normal(size=v.shape).astype(np.float32) * 0.5 + 1.0)
                   for v in sorted(variables, key=lambda v: v.op.name)]
        with tf.compat.v1.Session() as session:
            session.run(assigns)
            out = session.run(y)
            session.run(updates)
            values = {v.op.name: session.run(v) for v in variables}
        collections = {name: sorted(v.op.name for v in graph.get_collection(name))
                       for name in ("moving_vars", tf.compat.v1.GraphKeys.MODEL_VARIABLES,
                                    tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES)}
    return out, values, len(updates), collections


@pytest.mark.parametrize("style", sorted(BN_PARAMS))
@pytest.mark.parametrize("is_training", [True, False])
def test_fused_batch_norm_matches_tf_slim(style, is_training):
    images = np.random.default_rng(0).normal(size=(4, 9, 9, 3)).astype(np.float32)
    slim_out, slim_vars, slim_updates, slim_collections = run(False, is_training, style, images)
    out, values, updates, collections = run(True, is_training, style, images)
    assert sorted(values) == sorted(slim_vars)
    assert any(name.endswith("conv1/BatchNorm/moving_variance") for name in values)
    assert (style == "resnet") == any(name.endswith("BatchNorm/gamma") for name in values)
    assert collections == slim_collections
    assert updates == slim_updates == (6 if is_training else 0)
    np.testing.assert_allclose(out, slim_out, rtol=1e-5, atol=1e-5)
    for name, value in values.items():
        np.testing.assert_allclose(value, slim_vars[name], rtol=1e-5, atol=1e-6,
                                   err_msg=name)
    if is_training:  # the moving statistics moved
        assert not np.allclose(values["conv1/BatchNorm/moving_mean"],
                               run(True, False, style, images)[1]["conv1/BatchNorm/moving_mean"])


def test_nets_factory_switch_keeps_a_nets_variables():
    def names(batch_norm: str) -> list[str]:
        with tf.Graph().as_default():
            fn = nets_factory.get_network_fn("mobilenet_v1", 5, is_training=True,
                                             batch_norm=batch_norm)
            fn(tf.zeros([2, 32, 32, 3]))
            return sorted(v.op.name for v in tf.compat.v1.global_variables())

    fused = names("fused")
    assert fused == names("slim")
    assert "MobilenetV1/Conv2d_0/BatchNorm/moving_mean" in fused
    with pytest.raises(ValueError, match="unknown batch norm 'keras'"):
        nets_factory.get_network_fn("lenet", 5, batch_norm="keras")
