"""CifarNet preprocessing: padded random crop, flip and brightness/contrast, then standardize."""

from __future__ import annotations

import tensorflow as tf

from slim_models.preprocessing import seeds

_PADDING = 4


def preprocess_for_train(image, output_height, output_width, seed=None):
    """Pad by 4 pixels, take a random crop, random flip and brightness/contrast jitter."""
    crop_seed, flip_seed, bright_seed, contrast_seed = seeds.split(seeds.as_seed(seed), 4)
    image = tf.cast(image, tf.float32)
    image = tf.image.resize_with_crop_or_pad(
        image, output_height + 2 * _PADDING, output_width + 2 * _PADDING)
    image = tf.image.stateless_random_crop(image, [output_height, output_width, 3], crop_seed)
    image = tf.image.stateless_random_flip_left_right(image, flip_seed)
    image = tf.image.stateless_random_brightness(image, 63.0, bright_seed)
    image = tf.image.stateless_random_contrast(image, 0.2, 1.8, contrast_seed)
    return tf.image.per_image_standardization(image)


def preprocess_for_eval(image, output_height, output_width):
    """Centre-crop or pad to the output size and standardize."""
    image = tf.cast(image, tf.float32)
    image = tf.image.resize_with_crop_or_pad(image, output_height, output_width)
    return tf.image.per_image_standardization(image)


def preprocess_image(image, output_height, output_width, is_training=False, seed=None):
    """Train- or eval-time CifarNet preprocessing."""
    if is_training:
        return preprocess_for_train(image, output_height, output_width, seed)
    return preprocess_for_eval(image, output_height, output_width)
