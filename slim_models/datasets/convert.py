"""``tfgshare convert-images DIR OUT``: write a folder of class sub-folders as TF-Slim TFRecords.

``DIR/<class name>/*.{jpg,jpeg,png}`` becomes ``OUT/train-00000-of-0000N.tfrecord``,
``OUT/validation-...`` and ``OUT/labels.txt``, readable as ``get_dataset('folder', ...)``.
Labels are the class folders' indices in sorted order.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
from dataclasses import dataclass

from slim_models.datasets.tfrecord import write_labels_file

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")


@dataclass(frozen=True)
class ImageFile:
    """One source image and its class label."""

    path: str
    label: int


def list_images(image_dir: str) -> tuple[list[ImageFile], dict[int, str]]:
    """All images under ``image_dir``'s class sub-folders, and the label -> class name map."""
    if not os.path.isdir(image_dir):
        raise ValueError(f"image folder {image_dir!r} is not a directory")
    classes = sorted(e.name for e in os.scandir(image_dir)
                     if e.is_dir() and not e.name.startswith("."))
    if not classes:
        raise ValueError(f"image folder {image_dir!r} has no class sub-folders")
    images = []
    for label, name in enumerate(classes):
        folder = os.path.join(image_dir, name)
        for filename in sorted(os.listdir(folder)):
            if filename.lower().endswith(IMAGE_EXTENSIONS):
                images.append(ImageFile(os.path.join(folder, filename), label))
    if not images:
        raise ValueError(f"no {'/'.join(IMAGE_EXTENSIONS)} images in the class sub-folders "
                         f"of {image_dir!r}")
    return images, dict(enumerate(classes))


def split_images(images: list[ImageFile], validation_fraction: float,
                 seed: int) -> dict[str, list[ImageFile]]:
    """Hold out ``validation_fraction`` of each class's images; shuffle both splits with ``seed``."""
    if not 0.0 <= validation_fraction < 1.0:
        raise ValueError(f"validation_fraction must be in [0, 1), got {validation_fraction}")
    rng = random.Random(seed)
    splits: dict[str, list[ImageFile]] = {"train": [], "validation": []}
    for label in sorted({image.label for image in images}):
        members = [image for image in images if image.label == label]
        rng.shuffle(members)
        held_out = round(len(members) * validation_fraction)
        splits["validation"] += members[:held_out]
        splits["train"] += members[held_out:]
    for members in splits.values():
        rng.shuffle(members)
    return splits


def _image_format(data: bytes, path: str) -> str:
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if data.startswith(b"\xff\xd8"):
        return "jpeg"
    raise ValueError(f"{path!r} is neither a JPEG nor a PNG image")


def _example(tf, image: ImageFile):
    with open(image.path, "rb") as f:
        data = f.read()
    fmt = _image_format(data, image.path)
    try:
        shape = tf.io.decode_image(data, channels=3, expand_animations=False).shape
    except tf.errors.InvalidArgumentError as exc:
        raise ValueError(f"cannot decode image {image.path!r}: {exc.message}") from None

    def int64(value):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))

    def bytes_(value):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))

    return tf.train.Example(features=tf.train.Features(feature={
        "image/encoded": bytes_(data),
        "image/format": bytes_(fmt.encode()),
        "image/class/label": int64(image.label),
        "image/height": int64(shape[0]),
        "image/width": int64(shape[1]),
    }))


def write_split(split: str, images: list[ImageFile], out_dir: str, shards: int) -> list[str]:
    """Write ``images`` into ``min(shards, len(images))`` TFRecord shards; return their paths."""
    import tensorflow as tf

    count = min(shards, len(images))
    per_shard = math.ceil(len(images) / count) if count else 0
    paths = []
    for shard in range(count):
        path = os.path.join(out_dir, f"{split}-{shard:05d}-of-{count:05d}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for image in images[shard * per_shard:(shard + 1) * per_shard]:
                writer.write(_example(tf, image).SerializeToString())
        paths.append(path)
    return paths


def convert(image_dir: str, out_dir: str, validation_fraction: float = 0.1,
            shards: int = 1, seed: int = 0) -> dict[str, int]:
    """Convert ``image_dir`` into TFRecords in ``out_dir``; return images per split."""
    if shards < 1:
        raise ValueError(f"--shards must be at least 1, got {shards}")
    images, labels_to_names = list_images(image_dir)
    splits = split_images(images, validation_fraction, seed)
    os.makedirs(out_dir, exist_ok=True)
    stale = sorted(f for f in os.listdir(out_dir)
                   if f.endswith(".tfrecord") and f.split("-")[0] in splits)
    if stale:
        raise ValueError(f"output folder {out_dir!r} already holds shards ({stale[0]}, ...); "
                         "remove them or choose another folder")
    for split, members in splits.items():
        write_split(split, members, out_dir, shards)
    write_labels_file(labels_to_names, out_dir)
    return {split: len(members) for split, members in splits.items()}


def main(argv: list[str] | None = None) -> int:
    """Command line entry point of ``tfgshare convert-images``."""
    parser = argparse.ArgumentParser(
        prog="tfgshare convert-images",
        description="Write DIR/<class>/*.{jpg,png} as TF-Slim TFRecords in OUT "
                    "(read them with --dataset_name folder --dataset_dir OUT).")
    parser.add_argument("image_dir", metavar="DIR", help="folder of class sub-folders of images")
    parser.add_argument("out_dir", metavar="OUT", help="folder to write shards and labels.txt to")
    parser.add_argument("--validation_fraction", type=float, default=0.1,
                        help="share of the images held out as the validation split (default 0.1)")
    parser.add_argument("--shards", type=int, default=1, help="shards per split (default 1)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the train/validation split")
    args = parser.parse_args(argv)
    try:
        counts = convert(args.image_dir, args.out_dir, args.validation_fraction,
                         args.shards, args.seed)
    except ValueError as exc:
        print(f"tfgshare convert-images: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {counts['train']} train and {counts['validation']} validation images "
          f"to {args.out_dir}")
    if args.validation_fraction > 0 and not counts["validation"]:
        print(f"note: --validation_fraction {args.validation_fraction:g} held out no image "
              "(too few per class); raise it for a validation split")
    return 0


if __name__ == "__main__":
    sys.exit(main())
