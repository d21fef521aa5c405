"""TF-Slim image TFRecords (``image/encoded``, ``image/format``, ``image/class/label``).

The stream visits every record once per epoch. Each epoch reads the shard files
in an order drawn from (seed, epoch) and permutes records within consecutive
blocks with a stateless shuffle, so the order depends only on ``seed`` and a
stream can start at any position by skipping undecoded records within its epoch.
"""

from __future__ import annotations

import glob
import os
import struct
from dataclasses import dataclass, field

from slim_models.datasets.stream import check_stream_args

SHUFFLE_BLOCK = 1024
_EPOCH_KEY = 104729  # mixes (seed, epoch) into stateless seeds


@dataclass(frozen=True)
class TFRecordImageDataset:
    """One split of a folder of TF-Slim image TFRecords."""

    name: str
    split_name: str
    num_classes: int
    num_samples: int
    dataset_dir: str
    file_pattern: str            # glob relative to dataset_dir, e.g. "flowers_train_*.tfrecord"
    files: tuple[str, ...]       # matching shard files, sorted
    image_size: int | None = None  # resize to this square size; None keeps each image's size
    labels_to_names: dict[int, str] = field(default_factory=dict)

    def decode(self, serialized):
        """The (uint8 HxWx3 image, int64 label) pair of one serialized tf.train.Example."""
        import tensorflow as tf

        features = tf.io.parse_single_example(serialized, {
            "image/encoded": tf.io.FixedLenFeature([], tf.string),
            "image/format": tf.io.FixedLenFeature([], tf.string, default_value="jpeg"),
            "image/class/label": tf.io.FixedLenFeature([], tf.int64),
        })
        image = tf.io.decode_image(features["image/encoded"], channels=3,
                                   expand_animations=False)
        image.set_shape([None, None, 3])
        if self.image_size is not None:
            image = tf.image.resize(image, [self.image_size, self.image_size])
            image = tf.cast(tf.clip_by_value(tf.round(image), 0.0, 255.0), tf.uint8)
        return image, features["image/class/label"]

    def epoch_records(self, epoch, seed: int):
        """The serialized records of ``epoch`` (an int64 tensor) in their shuffled order."""
        import tensorflow as tf

        epoch_seed = tf.stack([tf.constant(seed, tf.int64) * _EPOCH_KEY + epoch,
                               tf.constant(_EPOCH_KEY, tf.int64)])
        files = tf.random.experimental.stateless_shuffle(tf.constant(self.files), epoch_seed)
        records = tf.data.TFRecordDataset(files)
        block = min(SHUFFLE_BLOCK, self.num_samples)
        blocks = records.batch(block).enumerate()

        def shuffle_block(i, batch):
            return tf.random.experimental.stateless_shuffle(batch, epoch_seed + [0, i + 1])

        return blocks.map(shuffle_block).unbatch()

    def tf_dataset(self, start_example: int = 0, seed: int = 0, with_position: bool = False):
        """``(image, label)`` pairs forever, in an order set by ``seed``, from ``start_example``.

        With ``with_position`` each element also carries its absolute stream position.
        """
        import tensorflow as tf

        check_stream_args(start_example, seed)
        first_epoch = start_example // self.num_samples   # ints or an int64 tensor
        skip = start_example % self.num_samples
        first = self.epoch_records(tf.cast(first_epoch, tf.int64), seed).skip(skip)
        rest = tf.data.Dataset.counter(first_epoch + 1, dtype=tf.int64).flat_map(
            lambda epoch: self.epoch_records(epoch, seed))
        records = first.concatenate(rest)
        if with_position:
            positions = tf.data.Dataset.counter(start_example, dtype=tf.int64)
            return tf.data.Dataset.zip((records, positions)).map(
                lambda record, position: (*self.decode(record), position),
                num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        return records.map(self.decode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def find_files(dataset_dir: str, file_pattern: str) -> tuple[str, ...]:
    """Sorted files matching ``file_pattern`` in ``dataset_dir``; errors name both."""
    if not dataset_dir:
        raise ValueError(f"a dataset_dir is needed to read files matching {file_pattern!r}")
    if not os.path.isdir(dataset_dir):
        raise FileNotFoundError(f"dataset_dir {dataset_dir!r} is not a directory")
    files = tuple(sorted(glob.glob(os.path.join(glob.escape(dataset_dir), file_pattern))))
    if not files:
        raise FileNotFoundError(f"no files match {file_pattern!r} in {dataset_dir!r}")
    return files


def count_records(files) -> int:
    """The number of records in TFRecord ``files``, read from their length headers."""
    total = 0
    for path in files:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            offset = 0
            while offset < size:
                header = f.read(8)
                if len(header) < 8:
                    raise ValueError(f"truncated TFRecord file {path!r} at byte {offset}")
                (length,) = struct.unpack("<Q", header)
                offset += 8 + 4 + length + 4
                f.seek(offset)
                total += 1
            if offset != size:
                raise ValueError(f"truncated TFRecord file {path!r}")
    return total


def read_labels_file(dataset_dir: str, filename: str = "labels.txt") -> dict[int, str]:
    """The ``id:name`` lines of ``dataset_dir/labels.txt`` as a dict; {} when absent."""
    path = os.path.join(dataset_dir, filename)
    if not os.path.exists(path):
        return {}
    labels = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            line = line.rstrip("\n")
            if not line:
                continue
            key, sep, name = line.partition(":")
            if not sep or not key.strip().isdigit():
                raise ValueError(f"{path}:{number}: expected 'id:name', got {line!r}")
            labels[int(key)] = name
    return labels


def write_labels_file(labels_to_names: dict[int, str], dataset_dir: str,
                      filename: str = "labels.txt") -> None:
    """Write ``id:name`` lines to ``dataset_dir/labels.txt``."""
    with open(os.path.join(dataset_dir, filename), "w", encoding="utf-8") as f:
        for label in sorted(labels_to_names):
            f.write(f"{label}:{labels_to_names[label]}\n")
