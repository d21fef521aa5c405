"""Dataset names, their splits, and ``get_dataset`` (TF-Slim's dataset factory).

Importing this module, or calling ``get_dataset``, does not import TensorFlow;
only a dataset's ``tf_dataset`` does.
"""

from __future__ import annotations

from dataclasses import dataclass

from slim_models.datasets.synthetic import SyntheticDataset
from slim_models.datasets.tfrecord import (TFRecordImageDataset, count_records, find_files,
                                           read_labels_file)


@dataclass(frozen=True)
class DatasetSpec:
    """Where a TF-Slim dataset's splits live and how big they are."""

    file_pattern: str                  # with %s for the split name
    splits: dict[str, int | None]      # split -> number of examples (None: count the records)
    num_classes: int | None            # None: read from labels.txt


SYNTHETIC_DEFAULTS = {"image_size": 32, "num_classes": 10,
                      "num_samples": {"train": 10000, "validation": 1000, "test": 1000}}

DATASETS: dict[str, DatasetSpec] = {
    "cifar10": DatasetSpec("cifar10_%s.tfrecord", {"train": 50000, "test": 10000}, 10),
    "flowers": DatasetSpec("flowers_%s_*.tfrecord", {"train": 3320, "validation": 350}, 5),
    "folder": DatasetSpec("%s-*.tfrecord", {"train": None, "validation": None}, None),
    "imagenet": DatasetSpec("%s-*", {"train": 1281167, "validation": 50000}, 1001),
}

DATASET_NAMES: tuple[str, ...] = tuple(sorted([*DATASETS, "synthetic"]))


def get_dataset(name: str, split_name: str, dataset_dir: str | None = None, *,
                image_size: int | None = None, num_classes: int | None = None,
                num_samples: int | None = None):
    """The ``split_name`` split of dataset ``name``, with ``tf_dataset(start_example, seed)``.

    ``synthetic`` needs no files; the others read TF-Slim TFRecords from
    ``dataset_dir``. ``image_size`` resizes images to that square size;
    ``num_classes`` and ``num_samples`` override the dataset's own figures.
    """
    _check_optional_positive(image_size=image_size, num_classes=num_classes,
                             num_samples=num_samples)
    if name == "synthetic":
        return SyntheticDataset(
            name, split_name,
            num_classes=num_classes or SYNTHETIC_DEFAULTS["num_classes"],
            num_samples=num_samples or SYNTHETIC_DEFAULTS["num_samples"].get(split_name, 1000),
            image_size=image_size or SYNTHETIC_DEFAULTS["image_size"])
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; valid names: {', '.join(DATASET_NAMES)}")
    spec = DATASETS[name]
    if split_name not in spec.splits:
        raise ValueError(f"unknown split {split_name!r} for dataset {name!r}; "
                         f"valid splits: {', '.join(spec.splits)}")
    if dataset_dir is None:
        raise ValueError(f"dataset {name!r} needs a dataset_dir holding files matching "
                         f"{spec.file_pattern % split_name!r}")
    dataset_dir = str(dataset_dir)
    pattern = spec.file_pattern % split_name
    files = find_files(dataset_dir, pattern)
    labels = read_labels_file(dataset_dir)
    if num_classes is None:
        num_classes = spec.num_classes or len(labels)
        if not num_classes:
            raise FileNotFoundError(
                f"dataset {name!r} in {dataset_dir!r} needs a labels.txt to know its classes")
    if num_samples is None:
        num_samples = spec.splits[split_name] or count_records(files)
        if not num_samples:
            raise ValueError(f"no examples in {pattern!r} in {dataset_dir!r}")
    return TFRecordImageDataset(name, split_name, num_classes, num_samples, dataset_dir,
                                pattern, files, image_size, labels)


def _check_optional_positive(**values) -> None:
    for key, value in values.items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{key} must be a positive integer, got {value!r}")
