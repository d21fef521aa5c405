"""VGG preprocessing: aspect-preserving random rescale, random crop and flip, mean subtraction.

The rescale range is [256, 512] for a 224 crop as in VGG, and scales with the
output size so small crops of small images keep the same proportions.
"""

from __future__ import annotations

import math

import tensorflow as tf

from slim_models.preprocessing import seeds

CHANNEL_MEANS = (123.68, 116.78, 103.94)
_RESIZE_SIDE_MIN = 256.0 / 224.0
_RESIZE_SIDE_MAX = 512.0 / 224.0


def _resize_smaller_side(image, side):
    """Rescale so the smaller side equals ``side``, keeping the aspect ratio."""
    shape = tf.shape(image)
    height, width = tf.cast(shape[0], tf.float32), tf.cast(shape[1], tf.float32)
    scale = tf.cast(side, tf.float32) / tf.minimum(height, width)
    new_size = tf.cast(tf.math.ceil(tf.stack([height, width]) * scale), tf.int32)
    return tf.image.resize(image, new_size)


def _subtract_means(image):
    return image - tf.constant(CHANNEL_MEANS, dtype=tf.float32)


def _side_range(output_height, output_width):
    out = max(output_height, output_width)
    return math.ceil(out * _RESIZE_SIDE_MIN), math.ceil(out * _RESIZE_SIDE_MAX)


def preprocess_for_train(image, output_height, output_width, seed=None):
    """Random aspect-preserving rescale, random crop, random flip, mean subtraction."""
    side_seed, crop_seed, flip_seed = seeds.split(seeds.as_seed(seed), 3)
    low, high = _side_range(output_height, output_width)
    side = tf.random.stateless_uniform([], side_seed, low, high + 1, dtype=tf.int32)
    image = _resize_smaller_side(tf.cast(image, tf.float32), side)
    image = tf.image.stateless_random_crop(image, [output_height, output_width, 3], crop_seed)
    image = tf.image.stateless_random_flip_left_right(image, flip_seed)
    return _subtract_means(image)


def preprocess_for_eval(image, output_height, output_width):
    """Rescale the smaller side, central crop, mean subtraction."""
    low, _ = _side_range(output_height, output_width)
    image = _resize_smaller_side(tf.cast(image, tf.float32), low)
    image = tf.image.resize_with_crop_or_pad(image, output_height, output_width)
    return _subtract_means(image)


def preprocess_image(image, output_height, output_width, is_training=False, seed=None):
    """Train- or eval-time VGG preprocessing."""
    if is_training:
        return preprocess_for_train(image, output_height, output_width, seed)
    return preprocess_for_eval(image, output_height, output_width)
