"""TF-Slim's batch norm on ``tf.compat.v1.nn.fused_batch_norm``, without tf-keras layers.

``tf_slim.batch_norm`` with its default update collection builds a tf-keras legacy
``BatchNormalization`` layer per call, which makes a deep net's graph slow to build.
``batch_norm`` here builds the same computation directly: the same variables
(``<scope>/BatchNorm/beta``, ``gamma``, ``moving_mean``, ``moving_variance``, model
variables, so checkpoints are interchangeable with TF-Slim's), the same fused op, and
the same moving-average updates (``v -= (v - batch_stat) * (1 - decay)``, added to
``UPDATE_OPS``) in training mode. It reads the arguments that an ``arg_scope`` gives
``tf_slim.batch_norm``, so the slim nets need no change: ``use_fused`` swaps it into an
arg scope. Calls it does not cover (rank other than 4, a tensor ``is_training``,
batch weights, renorm, other update collections) go to ``tf_slim.batch_norm``.
"""

from __future__ import annotations

import tensorflow as tf
import tf_slim as slim
from tf_slim.layers import utils as slim_utils
from tf_slim.ops import arg_scope as arg_scope_lib

from slim_models.compat import ensure_tf_compat

_SLIM_KEY = arg_scope_lib.arg_scope_func_key(slim.batch_norm)
_DEFAULTS = dict(decay=0.999, center=True, scale=False, epsilon=0.001, activation_fn=None,
                 param_initializers=None, param_regularizers=None,
                 updates_collections=tf.compat.v1.GraphKeys.UPDATE_OPS, is_training=True,
                 reuse=None, variables_collections=None, outputs_collections=None,
                 trainable=True, batch_weights=None, fused=None, data_format="NHWC",
                 zero_debias_moving_mean=False, scope=None, renorm=False,
                 renorm_clipping=None, renorm_decay=0.99, adjustment=None)


def batch_norm(inputs, **kwargs):
    """``tf_slim.batch_norm(inputs, **kwargs)``, built on the fused op where it can be.

    Arguments an enclosing ``arg_scope`` sets for ``tf_slim.batch_norm`` apply here too.
    """
    args = {**_DEFAULTS, **arg_scope_lib.current_arg_scope().get(_SLIM_KEY, {}), **kwargs}
    inputs = tf.convert_to_tensor(inputs)
    if not _covered(inputs, args):
        ensure_tf_compat()
        return slim.batch_norm(inputs, **kwargs)
    return _fused(inputs, args)


batch_norm._key_op = _SLIM_KEY   # arg_scope([slim.batch_norm], ...) reaches this function


def _covered(inputs, args: dict) -> bool:
    return (inputs.shape.rank == 4 and isinstance(args["is_training"], bool)
            and args["updates_collections"] == tf.compat.v1.GraphKeys.UPDATE_OPS
            and args["fused"] in (None, True) and args["batch_weights"] is None
            and not args["renorm"] and args["adjustment"] is None
            and not args["zero_debias_moving_mean"]
            and args["data_format"] in ("NHWC", "NCHW"))


def _fused(inputs, args: dict):
    channels_last = args["data_format"] == "NHWC"
    with tf.compat.v1.variable_scope(args["scope"], "BatchNorm", [inputs],
                                     reuse=args["reuse"]) as scope:
        params_shape = inputs.shape[-1:] if channels_last else inputs.shape[1:2]
        if not params_shape.is_fully_defined():
            raise ValueError(f"inputs {inputs.name} have an undefined channel dimension")
        initializers = args["param_initializers"] or {}
        regularizers = args["param_regularizers"] or {}

        def variable(name, default_init, trainable, regularizer=None):
            return slim.model_variable(
                name, shape=params_shape, dtype=tf.float32,
                initializer=initializers.get(name, default_init), regularizer=regularizer,
                trainable=trainable and args["trainable"],
                collections=_collections(args["variables_collections"], name))

        beta = (variable("beta", tf.compat.v1.zeros_initializer(), True,
                         regularizers.get("beta")) if args["center"]
                else tf.constant(0.0, tf.float32, params_shape))
        gamma = (variable("gamma", tf.compat.v1.ones_initializer(), True,
                          regularizers.get("gamma")) if args["scale"]
                 else tf.constant(1.0, tf.float32, params_shape))
        moving_mean = variable("moving_mean", tf.compat.v1.zeros_initializer(), False)
        moving_variance = variable("moving_variance", tf.compat.v1.ones_initializer(), False)
        training = args["is_training"]
        outputs, mean, variance = tf.compat.v1.nn.fused_batch_norm(
            inputs, gamma, beta, mean=moving_mean, variance=moving_variance,
            epsilon=args["epsilon"], is_training=training, data_format=args["data_format"])
        if training:
            momentum = tf.convert_to_tensor(args["decay"])
            for var, value in ((moving_mean, mean), (moving_variance, variance)):
                tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.UPDATE_OPS,
                                               _moving_average(var, value, momentum))
        if args["activation_fn"] is not None:
            outputs = args["activation_fn"](outputs)
        return slim_utils.collect_named_outputs(args["outputs_collections"], scope.name,
                                              outputs)


def _moving_average(variable, value, momentum):
    """``variable -= (variable - value) * (1 - momentum)``, as tf-keras's layer updates."""
    with tf.name_scope("AssignMovingAvg") as name:
        with tf.compat.v1.colocate_with(variable):
            decay = tf.cast(1.0 - momentum, variable.dtype.base_dtype)
            return tf.compat.v1.assign_sub(variable, (variable - value) * decay, name=name)


def _collections(variables_collections, name: str):
    if isinstance(variables_collections, dict):
        return variables_collections.get(name)
    return variables_collections


def use_fused(scope: dict) -> dict:
    """A copy of arg scope ``scope`` with ``batch_norm`` wherever it had ``tf_slim.batch_norm``."""
    return {key: {arg: batch_norm if _is_slim_batch_norm(value) else value
                  for arg, value in kwargs.items()}
            for key, kwargs in scope.items()}


def _is_slim_batch_norm(value) -> bool:
    return callable(value) and value is not batch_norm and \
        getattr(value, "_key_op", None) == _SLIM_KEY
