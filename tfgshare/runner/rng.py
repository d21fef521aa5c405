"""A graph whose random ops draw from (seed, op, step) instead of a hidden stream.

TensorFlow's stateful random ops (dropout masks, random initializers) keep
their position inside the session, so a job restored into a new process would
draw different numbers than one that never stopped. ``KeyedRandomGraph``
builds every stateful random op of the main graph as its stateless twin, keyed
by the graph seed, the op's creation order and the ``step_key`` fed each step:
step n draws the same numbers whether or not the job was suspended before it.
"""

from __future__ import annotations

import tensorflow as tf

# stateful op type -> builder(inputs, attrs, seed) of its stateless twin
_TWINS = {
    "RandomUniform": lambda ins, attrs, seed: tf.raw_ops.StatelessRandomUniform(
        shape=ins[0], seed=seed, dtype=tf.dtypes.as_dtype(attrs["dtype"].type)),
    "RandomStandardNormal": lambda ins, attrs, seed: tf.raw_ops.StatelessRandomNormal(
        shape=ins[0], seed=seed, dtype=tf.dtypes.as_dtype(attrs["dtype"].type)),
    "TruncatedNormal": lambda ins, attrs, seed: tf.raw_ops.StatelessTruncatedNormal(
        shape=ins[0], seed=seed, dtype=tf.dtypes.as_dtype(attrs["dtype"].type)),
    "RandomUniformInt": lambda ins, attrs, seed: tf.raw_ops.StatelessRandomUniformInt(
        shape=ins[0], seed=seed, minval=ins[1], maxval=ins[2]),
}


class KeyedRandomGraph(tf.Graph):
    """A tf.Graph that turns stateful random ops into stateless ones keyed by step."""

    def __init__(self, seed: int):
        super().__init__()
        self.rng_seed = int(seed)
        self.random_ops_replaced = 0
        with self.as_default():
            self.step_key = tf.compat.v1.placeholder_with_default(
                tf.constant(0, tf.int64), shape=[], name="rng_step_key")

    def _create_op_internal(self, op_type, inputs, dtypes=None, input_types=None,
                            name=None, attrs=None, op_def=None, compute_device=True):
        twin = _TWINS.get(op_type)
        if twin is None:
            return super()._create_op_internal(
                op_type, inputs, dtypes=dtypes, input_types=input_types, name=name,
                attrs=attrs, op_def=op_def, compute_device=compute_device)
        self.random_ops_replaced += 1
        op_seed = self.rng_seed * 1_000_003 + self.random_ops_replaced
        with tf.name_scope(name.rstrip("/").split("/")[-1] if name else "keyed_random"):
            seed = tf.stack([tf.constant(op_seed, tf.int64), self.step_key])
            return twin(list(inputs), attrs or {}, seed).op
