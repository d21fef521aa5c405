"""MobileNet v1 (depthwise-separable convolutions) in TF-Slim style (default 224x224)."""

from __future__ import annotations

import tensorflow as tf
import tf_slim as slim

from slim_models.compat import ensure_tf_compat

# (output depth, stride) of each depthwise-separable block after the first conv.
_SEPARABLE_BLOCKS = (
    (64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2),
    (512, 1), (512, 1), (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1),
)


def mobilenet_v1_base(images, depth_multiplier=1.0, min_depth=8, scope="MobilenetV1"):
    """The convolutional trunk; returns (features, end_points)."""
    if depth_multiplier <= 0:
        raise ValueError(f"depth_multiplier must be > 0, got {depth_multiplier}")

    def depth(d):
        return max(int(d * depth_multiplier), min_depth)

    end_points = {}
    with tf.compat.v1.variable_scope(scope, "MobilenetV1", [images]):
        with slim.arg_scope([slim.conv2d, slim.separable_conv2d], padding="SAME"):
            net = slim.conv2d(images, depth(32), [3, 3], stride=2, scope="Conv2d_0")
            end_points["Conv2d_0"] = net
            for i, (d, stride) in enumerate(_SEPARABLE_BLOCKS, start=1):
                name = f"Conv2d_{i}"
                net = slim.separable_conv2d(net, None, [3, 3], depth_multiplier=1,
                                            stride=stride, scope=f"{name}_depthwise")
                end_points[f"{name}_depthwise"] = net
                net = slim.conv2d(net, depth(d), [1, 1], stride=1, scope=f"{name}_pointwise")
                end_points[f"{name}_pointwise"] = net
    return net, end_points


def mobilenet_v1(images, num_classes=1000, is_training=False, dropout_keep_prob=0.999,
                 depth_multiplier=1.0, prediction_fn=tf.nn.softmax, scope="MobilenetV1"):
    """MobileNet v1 classifier with global average pooling; returns (logits, end_points)."""
    ensure_tf_compat()
    with tf.compat.v1.variable_scope(scope, "MobilenetV1", [images]) as sc:
        with slim.arg_scope([slim.batch_norm, slim.dropout], is_training=is_training):
            net, end_points = mobilenet_v1_base(images, depth_multiplier, scope=sc)
            with tf.compat.v1.variable_scope("Logits"):
                net = tf.reduce_mean(net, [1, 2], keepdims=True, name="global_pool")
                end_points["global_pool"] = net
                net = slim.dropout(net, dropout_keep_prob, scope="Dropout_1b")
                logits = slim.conv2d(net, num_classes, [1, 1], activation_fn=None,
                                     normalizer_fn=None, scope="Conv2d_1c_1x1")
                logits = tf.squeeze(logits, [1, 2], name="SpatialSqueeze")
        end_points["Logits"] = logits
        end_points["Predictions"] = prediction_fn(logits, name="Predictions")
    return logits, end_points


mobilenet_v1.default_image_size = 224


def mobilenet_v1_arg_scope(weight_decay=0.00004, is_training=True, stddev=0.09,
                           batch_norm_decay=0.9997, batch_norm_epsilon=0.001):
    """Default arg scope: batch norm after every conv, ReLU6, L2 decay on pointwise convs."""
    batch_norm_params = {
        "center": True, "scale": True,
        "decay": batch_norm_decay, "epsilon": batch_norm_epsilon,
    }
    if is_training is not None:
        batch_norm_params["is_training"] = is_training
    init = tf.compat.v1.truncated_normal_initializer(stddev=stddev)
    regularizer = slim.l2_regularizer(weight_decay)
    with slim.arg_scope([slim.conv2d, slim.separable_conv2d], weights_initializer=init,
                        activation_fn=tf.nn.relu6, normalizer_fn=slim.batch_norm):
        with slim.arg_scope([slim.batch_norm], **batch_norm_params):
            with slim.arg_scope([slim.conv2d], weights_regularizer=regularizer):
                with slim.arg_scope([slim.separable_conv2d], weights_regularizer=None) as sc:
                    return sc
