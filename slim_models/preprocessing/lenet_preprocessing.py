"""LeNet preprocessing: scale to [-1, 1) and crop or pad to the output size."""

from __future__ import annotations

import tensorflow as tf


def preprocess_image(image, output_height, output_width, is_training=False, seed=None):
    """Centre-crop or pad ``image`` to the output size and scale pixels to [-1, 1)."""
    del is_training, seed  # no augmentation for LeNet
    image = tf.cast(image, tf.float32)
    image = tf.image.resize_with_crop_or_pad(image, output_height, output_width)
    return (image - 128.0) / 128.0
