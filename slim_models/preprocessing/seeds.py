"""Seeds for the stateless random ops used by the preprocessing functions."""

from __future__ import annotations

import tensorflow as tf


def as_seed(seed=None):
    """A shape-[2] int64 seed: ``seed`` itself, or one drawn from the graph's random state.

    Given an explicit seed (e.g. derived from an example's index) the preprocessing
    is a pure function of (image, seed); given None it draws one from a stateful op,
    which is deterministic under a graph-level seed.
    """
    if seed is None:
        return tf.random.uniform([2], 0, 2**31 - 1, dtype=tf.int64)
    seed = tf.convert_to_tensor(seed)
    if seed.dtype not in (tf.int32, tf.int64):
        raise ValueError(f"a preprocessing seed must be integer, got {seed.dtype.name}")
    seed = tf.cast(seed, tf.int64)
    if seed.shape.rank is not None and seed.shape.as_list() != [2]:
        raise ValueError(f"a preprocessing seed must have shape [2], got {seed.shape}")
    return seed


def split(seed, count: int):
    """``count`` independent shape-[2] seeds derived from ``seed``."""
    return tf.unstack(tf.random.experimental.stateless_split(seed, count))
