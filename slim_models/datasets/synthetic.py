"""A deterministic, learnable synthetic image classification dataset.

Example ``j`` of a split has a label drawn from a hash of ``j``; its image is the
label's colour modulated by the label's stripe pattern (orientation and
frequency), at a per-example phase, plus per-example noise. Everything is a
pure function of (split, j), so any example is computed from its index and the
input pipeline can start at any position for free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from slim_models.datasets.stream import check_stream_args

_SPLIT_CODES = {"train": 1, "validation": 2, "test": 3}
_CLASS_KEY = 7919  # seed stream for per-class colour and pattern
_MAX_MULTIPLIERS = 4096


@dataclass(frozen=True)
class SyntheticDataset:
    """A synthetic split: ``num_samples`` images of ``image_size`` squared pixels."""

    name: str
    split_name: str
    num_classes: int
    num_samples: int
    image_size: int
    noise_stddev: float = 16.0

    def __post_init__(self):
        if self.split_name not in _SPLIT_CODES:
            raise ValueError(f"unknown split {self.split_name!r} for dataset {self.name!r}; "
                             f"valid splits: {', '.join(_SPLIT_CODES)}")
        for field in ("num_classes", "num_samples", "image_size"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{field} must be a positive integer, got {value!r}")

    def example(self, index):
        """The (uint8 image, int64 label) pair of example ``index`` (an int64 tensor)."""
        import tensorflow as tf

        split = _SPLIT_CODES[self.split_name]
        index = tf.cast(index, tf.int64)
        label = tf.random.stateless_uniform([], tf.stack([tf.constant(split, tf.int64), index]),
                                            0, self.num_classes, dtype=tf.int64)
        class_seed = tf.stack([tf.constant(_CLASS_KEY, tf.int64), label])
        colour = tf.random.stateless_uniform([3], class_seed, 40.0, 216.0)
        angle, freq = tf.unstack(tf.random.stateless_uniform([2], class_seed + [0, 1_000_003]))
        angle = angle * math.pi
        freq = 1.0 + 3.0 * freq  # stripes across the image
        example_seed = tf.stack([tf.constant(split + 100, tf.int64), index])
        phase = tf.random.stateless_uniform([], example_seed, 0.0, 2.0 * math.pi)
        size = self.image_size
        coords = tf.range(size, dtype=tf.float32) / float(size)
        y, x = tf.meshgrid(coords, coords, indexing="ij")
        stripes = tf.sin(2.0 * math.pi * freq * (x * tf.cos(angle) + y * tf.sin(angle)) + phase)
        image = colour * (0.7 + 0.3 * stripes[..., None])
        noise = tf.random.stateless_normal([size, size, 3], example_seed + [0, 1],
                                           stddev=self.noise_stddev)
        image = tf.clip_by_value(tf.round(image + noise), 0.0, 255.0)
        return tf.cast(image, tf.uint8), label

    def position_to_index(self, position, seed: int):
        """The example index at absolute stream ``position`` (an int64 tensor) for ``seed``.

        Each epoch visits the examples in the order ``(a * k + b) mod num_samples``,
        with ``a`` coprime to num_samples and ``b`` drawn from (seed, epoch).
        """
        import tensorflow as tf

        n = self.num_samples
        multipliers = tf.constant(_coprimes(n), tf.int64)
        epoch, k = position // n, position % n
        draw = tf.random.stateless_uniform([2], tf.stack([tf.constant(seed, tf.int64), epoch]),
                                           0, 2**62, dtype=tf.int64)
        a = tf.gather(multipliers, draw[0] % tf.size(multipliers, out_type=tf.int64))
        return (a * k + draw[1] % n) % n

    def tf_dataset(self, start_example: int = 0, seed: int = 0, with_position: bool = False):
        """``(image, label)`` pairs forever, in an order set by ``seed``, from ``start_example``.

        With ``with_position`` each element also carries its absolute stream position
        (e.g. to seed its preprocessing).
        """
        import tensorflow as tf

        check_stream_args(start_example, seed)

        def at(position):
            image, label = self.example(self.position_to_index(position, seed))
            return (image, label, position) if with_position else (image, label)

        return tf.data.Dataset.counter(start_example, dtype=tf.int64).map(
            at, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def _coprimes(n: int) -> list[int]:
    """Multipliers ``a`` with gcd(a, n) == 1, so ``a * k mod n`` permutes range(n)."""
    found = [a for a in range(1, min(n, _MAX_MULTIPLIERS)) if math.gcd(a, n) == 1]
    return found or [1]
