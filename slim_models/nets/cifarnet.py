"""CifarNet: the small CIFAR-10 classifier of the TF-Slim examples (default 32x32)."""

from __future__ import annotations

import tensorflow as tf
import tf_slim as slim

from slim_models.compat import ensure_tf_compat


def _lrn(net, name):
    return tf.nn.lrn(net, depth_radius=4, bias=1.0, alpha=0.001 / 9.0, beta=0.75, name=name)


def cifarnet(images, num_classes=10, is_training=False, dropout_keep_prob=0.5,
             prediction_fn=tf.nn.softmax, scope="CifarNet"):
    """Two conv/pool/LRN stages and three fully connected layers; returns (logits, end_points)."""
    ensure_tf_compat()
    end_points = {}
    with tf.compat.v1.variable_scope(scope, "CifarNet", [images]):
        net = end_points["conv1"] = slim.conv2d(images, 64, [5, 5], scope="conv1")
        net = end_points["pool1"] = slim.max_pool2d(net, [3, 3], 2, padding="SAME", scope="pool1")
        net = _lrn(net, "norm1")
        net = end_points["conv2"] = slim.conv2d(net, 64, [5, 5], scope="conv2")
        net = _lrn(net, "norm2")
        net = end_points["pool2"] = slim.max_pool2d(net, [3, 3], 2, padding="SAME", scope="pool2")
        net = slim.flatten(net)
        end_points["Flatten"] = net
        net = end_points["fc3"] = slim.fully_connected(net, 384, scope="fc3")
        net = slim.dropout(net, dropout_keep_prob, is_training=is_training, scope="dropout3")
        net = end_points["fc4"] = slim.fully_connected(net, 192, scope="fc4")
        logits = end_points["Logits"] = slim.fully_connected(
            net, num_classes, activation_fn=None,
            weights_initializer=tf.compat.v1.truncated_normal_initializer(stddev=1 / 192.0),
            weights_regularizer=None, biases_initializer=tf.compat.v1.zeros_initializer(),
            scope="logits")
    end_points["Predictions"] = prediction_fn(logits, name="Predictions")
    return logits, end_points


cifarnet.default_image_size = 32


def cifarnet_arg_scope(weight_decay=0.004):
    """Default arg scope: small-stddev conv init, L2 decay on the dense layers."""
    with slim.arg_scope(
            [slim.conv2d],
            weights_initializer=tf.compat.v1.truncated_normal_initializer(stddev=5e-2),
            activation_fn=tf.nn.relu):
        with slim.arg_scope(
                [slim.fully_connected],
                biases_initializer=tf.compat.v1.constant_initializer(0.1),
                weights_initializer=tf.compat.v1.truncated_normal_initializer(stddev=0.04),
                weights_regularizer=slim.l2_regularizer(weight_decay),
                activation_fn=tf.nn.relu) as scope:
            return scope
