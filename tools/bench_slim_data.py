"""Timing of slim_models: input streams (resume cost, throughput) and net graph builds.

Run: .venv/bin/python tools/bench_slim_data.py   (writes only to a temp dir)
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from slim_models import nets_factory  # noqa: E402
from slim_models.datasets.dataset_factory import get_dataset  # noqa: E402
from slim_models.preprocessing.preprocessing_factory import get_preprocessing  # noqa: E402


def timed(label: str, fn, repeat: int = 5):
    """Run fn repeat times; print the median and best seconds as a table row."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    print(f"| {label} | {statistics.median(times):.3f} s | {min(times):.3f} s |", flush=True)
    return statistics.median(times)


def first_element(dataset, start: int):
    """Build the stream at ``start`` and pull one element."""
    next(iter(dataset.tf_dataset(start_example=start, seed=1)))


def throughput(dataset, model: str, size: int, count: int = 512) -> float:
    """Images per second through the stream and the model's training preprocessing."""
    preprocess = get_preprocessing(model, is_training=True)
    stream = dataset.tf_dataset(seed=1, with_position=True).map(
        lambda image, label, position: (
            preprocess(image, size, size, seed=tf.stack([tf.constant(1, tf.int64), position])),
            label),
        num_parallel_calls=tf.data.AUTOTUNE).batch(32).prefetch(2)
    batches = iter(stream)
    next(batches)
    start = time.perf_counter()
    for _ in range(count // 32):
        next(batches)
    return count / (time.perf_counter() - start)


def write_records(out: Path, count: int, size: int = 32) -> None:
    """``count`` random PNG examples in the 'folder' layout (4 shards + labels.txt)."""
    rng = np.random.default_rng(0)
    per_shard = count // 4
    for shard in range(4):
        with tf.io.TFRecordWriter(str(out / f"train-{shard:05d}-of-00004.tfrecord")) as w:
            for _ in range(per_shard):
                image = rng.integers(0, 256, [size, size, 3], dtype=np.uint8)
                feature = {
                    "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(
                        value=[tf.io.encode_png(image).numpy()])),
                    "image/format": tf.train.Feature(bytes_list=tf.train.BytesList(
                        value=[b"png"])),
                    "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(
                        value=[int(rng.integers(0, 10))])),
                }
                example = tf.train.Example(features=tf.train.Features(feature=feature))
                w.write(example.SerializeToString())
    (out / "labels.txt").write_text("".join(f"{i}:class{i}\n" for i in range(10)))


def build_seconds(model: str, size: int, batch: int = 1) -> None:
    """Build the training-mode graph of ``model`` at ``size``."""
    with tf.Graph().as_default():
        fn = nets_factory.get_network_fn(model, 1000, weight_decay=4e-5, is_training=True)
        fn(tf.zeros([batch, size, size, 3]))


def main() -> None:
    print("| step | median | best |\n|---|---|---|")
    synthetic = get_dataset("synthetic", "train", image_size=224, num_classes=1000,
                            num_samples=1_281_167)
    timed("synthetic 224 px: first element at position 0", lambda: first_element(synthetic, 0))
    timed("synthetic 224 px: first element at position 10,000,000",
          lambda: first_element(synthetic, 10_000_000))
    with tempfile.TemporaryDirectory() as tmp:
        write_records(Path(tmp), 8000)
        folder = get_dataset("folder", "train", tmp, image_size=32)
        timed("folder 8,000 records: first element at position 0",
              lambda: first_element(folder, 0))
        timed("folder 8,000 records: first element at position 7,999 (skip in epoch)",
              lambda: first_element(folder, 7_999))
        timed("folder 8,000 records: first element at position 800,000 (epoch 100)",
              lambda: first_element(folder, 800_000))
        rate = throughput(folder, "cifarnet", 32)
        print(f"| folder 32 px + cifarnet train preprocessing | {rate:.0f} img/s | |")
    small = get_dataset("synthetic", "train", image_size=32)
    for model, size in (("cifarnet", 32), ("inception_v3", 299), ("vgg_16", 224)):
        rate = throughput(small if size == 32 else synthetic, model, size,
                          count=1024 if size == 32 else 256)
        print(f"| synthetic + {model} train preprocessing to {size} px | {rate:.0f} img/s | |",
              flush=True)
    for model in nets_factory.PAPER_MODELS:
        size = nets_factory.default_image_size(model)
        timed(f"build {model} training graph at {size} px", lambda: build_seconds(model, size),
              repeat=3)


if __name__ == "__main__":
    main()
