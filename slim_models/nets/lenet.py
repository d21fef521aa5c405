"""LeNet-style classifier for small images (default 28x28), in TF-Slim style."""

from __future__ import annotations

import tensorflow as tf
import tf_slim as slim

from slim_models.compat import ensure_tf_compat


def lenet(images, num_classes=10, is_training=False, dropout_keep_prob=0.5,
          prediction_fn=tf.nn.softmax, scope="LeNet"):
    """Two conv/pool stages and two fully connected layers; returns (logits, end_points)."""
    ensure_tf_compat()
    end_points = {}
    with tf.compat.v1.variable_scope(scope, "LeNet", [images]):
        net = end_points["conv1"] = slim.conv2d(images, 32, [5, 5], scope="conv1")
        net = end_points["pool1"] = slim.max_pool2d(net, [2, 2], 2, scope="pool1")
        net = end_points["conv2"] = slim.conv2d(net, 64, [5, 5], scope="conv2")
        net = end_points["pool2"] = slim.max_pool2d(net, [2, 2], 2, scope="pool2")
        net = slim.flatten(net)
        end_points["Flatten"] = net
        net = end_points["fc3"] = slim.fully_connected(net, 1024, scope="fc3")
        net = end_points["dropout3"] = slim.dropout(
            net, dropout_keep_prob, is_training=is_training, scope="dropout3")
        logits = end_points["Logits"] = slim.fully_connected(
            net, num_classes, activation_fn=None, scope="fc4")
    end_points["Predictions"] = prediction_fn(logits, name="Predictions")
    return logits, end_points


lenet.default_image_size = 28


def lenet_arg_scope(weight_decay=0.0):
    """Default arg scope: L2 weight decay, truncated-normal init, ReLU."""
    with slim.arg_scope(
            [slim.conv2d, slim.fully_connected],
            weights_regularizer=slim.l2_regularizer(weight_decay),
            weights_initializer=tf.compat.v1.truncated_normal_initializer(stddev=0.1),
            activation_fn=tf.nn.relu) as scope:
        return scope
