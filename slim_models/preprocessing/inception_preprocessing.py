"""Inception preprocessing: random distorted crop, flip and colour jitter; scale to [-1, 1]."""

from __future__ import annotations

import tensorflow as tf

from slim_models.preprocessing import seeds

_CENTRAL_FRACTION = 0.875


def distort_color(image, seed):
    """Random brightness, saturation, hue and contrast of a [0, 1] float image."""
    s_bright, s_sat, s_hue, s_contrast = seeds.split(seed, 4)
    image = tf.image.stateless_random_brightness(image, 32.0 / 255.0, s_bright)
    image = tf.image.stateless_random_saturation(image, 0.5, 1.5, s_sat)
    image = tf.image.stateless_random_hue(image, 0.2, s_hue)
    image = tf.image.stateless_random_contrast(image, 0.5, 1.5, s_contrast)
    return tf.clip_by_value(image, 0.0, 1.0)


def distorted_crop(image, seed, min_object_covered=0.1, aspect_ratio_range=(0.75, 1.33),
                   area_range=(0.05, 1.0)):
    """A random crop covering part of the image, with bounded area and aspect ratio."""
    whole = tf.constant([0.0, 0.0, 1.0, 1.0], shape=[1, 1, 4])
    begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
        tf.shape(image), bounding_boxes=whole, seed=seed,
        min_object_covered=min_object_covered, aspect_ratio_range=aspect_ratio_range,
        area_range=area_range, max_attempts=100, use_image_if_no_bounding_boxes=True)
    crop = tf.slice(image, begin, size)
    crop.set_shape([None, None, image.shape[-1]])
    return crop


def preprocess_for_train(image, output_height, output_width, seed=None):
    """Random crop, resize, random flip and colour distortion."""
    crop_seed, flip_seed, color_seed = seeds.split(seeds.as_seed(seed), 3)
    image = tf.image.convert_image_dtype(image, tf.float32)
    image = distorted_crop(image, crop_seed)
    image = tf.image.resize(image, [output_height, output_width])
    image = tf.image.stateless_random_flip_left_right(image, flip_seed)
    image = distort_color(image, color_seed)
    return (image - 0.5) * 2.0


def preprocess_for_eval(image, output_height, output_width,
                        central_fraction=_CENTRAL_FRACTION):
    """Central crop and resize."""
    image = tf.image.convert_image_dtype(image, tf.float32)
    if central_fraction:
        image = tf.image.central_crop(image, central_fraction)
    image = tf.image.resize(image, [output_height, output_width])
    image = tf.clip_by_value(image, 0.0, 1.0)
    return (image - 0.5) * 2.0


def preprocess_image(image, output_height, output_width, is_training=False, seed=None):
    """Train- or eval-time Inception preprocessing."""
    if is_training:
        return preprocess_for_train(image, output_height, output_width, seed)
    return preprocess_for_eval(image, output_height, output_width)
