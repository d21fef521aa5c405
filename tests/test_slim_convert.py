"""``tfgshare convert-images``: a folder of class images becomes a readable 'folder' dataset."""

from __future__ import annotations

import os

import numpy as np
import pytest

from slim_models.datasets import convert
from slim_models.datasets.dataset_factory import get_dataset
from slim_models.datasets.tfrecord import count_records
from tfgshare import cli

COLOURS = {"blue": (0, 0, 255), "green": (0, 255, 0), "red": (255, 0, 0)}


def _write_images(root, per_class=5, size=(6, 9)):
    """Tiny solid-colour images, one class per folder; PNG except one JPEG per class."""
    import tensorflow as tf

    for name, colour in COLOURS.items():
        folder = root / name
        folder.mkdir(parents=True)
        image = tf.constant(np.full([*size, 3], colour, np.uint8))
        for i in range(per_class):
            if i == 0:
                data = tf.io.encode_jpeg(image, quality=100).numpy()
                (folder / f"img{i}.JPG").write_bytes(data)
            else:
                (folder / f"img{i}.png").write_bytes(tf.io.encode_png(image).numpy())
        (folder / "notes.txt").write_text("not an image")
    return root


def test_round_trip_through_the_folder_dataset(tmp_path):
    images_dir = _write_images(tmp_path / "images")
    out = tmp_path / "records"
    code = cli.main(["convert-images", str(images_dir), str(out),
                     "--validation_fraction", "0.2", "--shards", "2"])
    assert code == 0
    assert sorted(os.listdir(out)) == [
        "labels.txt", "train-00000-of-00002.tfrecord", "train-00001-of-00002.tfrecord",
        "validation-00000-of-00002.tfrecord", "validation-00001-of-00002.tfrecord"]
    assert (out / "labels.txt").read_text() == "0:blue\n1:green\n2:red\n"

    train = get_dataset("folder", "train", str(out))
    validation = get_dataset("folder", "validation", str(out))
    assert (train.num_classes, train.num_samples, validation.num_samples) == (3, 12, 3)
    assert train.labels_to_names == {0: "blue", 1: "green", 2: "red"}

    items = list(train.tf_dataset(seed=1).take(12).as_numpy_iterator())
    for image, label in items:
        assert image.shape == (6, 9, 3) and image.dtype == np.uint8
        # each image keeps its class colour (JPEG within a few levels)
        assert np.abs(image.astype(int) - COLOURS[train.labels_to_names[label]]).max() <= 8
    # each class is split 4 train / 1 validation
    assert sorted(int(label) for _, label in items) == [0] * 4 + [1] * 4 + [2] * 4
    held_out = validation.tf_dataset().take(3).as_numpy_iterator()
    assert sorted(int(label) for _, label in held_out) == [0, 1, 2]


def test_folder_stream_resumes_and_reshuffles(tmp_path):
    out = tmp_path / "records"
    convert.convert(str(_write_images(tmp_path / "images", per_class=4)), str(out),
                    validation_fraction=0.0, shards=3)
    data = get_dataset("folder", "train", str(out), image_size=4)
    assert count_records(data.files) == data.num_samples == 12

    def take(count, **kwargs):
        return [(image.tobytes(), int(label)) for image, label, _ in
                data.tf_dataset(with_position=True, **kwargs).take(count).as_numpy_iterator()]

    whole = take(30, seed=5)
    assert all(len(image) == 4 * 4 * 3 for image, _ in whole)
    for start in (3, 12, 17):
        assert take(30 - start, start_example=start, seed=5) == whole[start:]
    labels = [label for _, label in whole]
    for epoch in range(2):
        assert sorted(labels[epoch * 12:(epoch + 1) * 12]) == sorted(labels[:12])
    other = [label for _, label in take(24, seed=6)]
    assert other != labels[:24]


def test_bad_input_folder_gives_a_clear_error(tmp_path, capsys):
    assert cli.main(["convert-images", str(tmp_path / "nowhere"), str(tmp_path / "out")]) == 2
    assert "nowhere" in capsys.readouterr().err
    (tmp_path / "empty" / "cats").mkdir(parents=True)
    assert convert.main([str(tmp_path / "empty"), str(tmp_path / "out")]) == 2
    assert "no .jpg/.jpeg/.png images" in capsys.readouterr().err
    bad = tmp_path / "bad" / "cats"
    bad.mkdir(parents=True)
    (bad / "x.png").write_bytes(b"not really a png")
    with pytest.raises(ValueError, match="x.png"):
        convert.convert(str(tmp_path / "bad"), str(tmp_path / "out2"))


def test_refuses_to_mix_with_existing_shards(tmp_path):
    images_dir = _write_images(tmp_path / "images", per_class=2)
    convert.convert(str(images_dir), str(tmp_path / "out"))
    with pytest.raises(ValueError, match="already holds shards"):
        convert.convert(str(images_dir), str(tmp_path / "out"))


@pytest.mark.parametrize("name,split,filename,declared", [
    ("flowers", "validation", "flowers_validation_00000-of-00005.tfrecord", 350),
    ("cifar10", "test", "cifar10_test.tfrecord", 10000),
    ("imagenet", "validation", "validation-00000-of-00128", 50000),
])
def test_slim_layouts_are_found_by_their_patterns(tmp_path, name, split, filename, declared):
    records = tmp_path / "records"
    convert.convert(str(_write_images(tmp_path / "images", per_class=2)), str(records),
                    validation_fraction=0.0)
    (records / "train-00000-of-00001.tfrecord").rename(records / filename)
    data = get_dataset(name, split, str(records), image_size=5)
    assert (data.num_samples, data.files) == (declared, (str(records / filename),))
    data = get_dataset(name, split, str(records), image_size=5, num_samples=6)
    items = list(data.tf_dataset().take(12).as_numpy_iterator())
    assert all(image.shape == (5, 5, 3) for image, _ in items)
    for epoch in (items[:6], items[6:]):  # each epoch is the six records once
        assert sorted(int(label) for _, label in epoch) == [0, 0, 1, 1, 2, 2]


def test_the_command_prints_no_tensorflow_start_up_chatter(tmp_path):
    """On a CPU node TensorFlow's import logs CUDA probing errors (``failed call to
    cuInit``) before its log level applies; the command mutes them as the runner does."""
    import subprocess
    import sys

    images_dir = _write_images(tmp_path / "images", per_class=2)
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from tfgshare import cli; "
         "sys.exit(cli.main(sys.argv[1:]))", "convert-images", str(images_dir),
         str(tmp_path / "out")], capture_output=True, text=True, timeout=120,
        env={k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"})
    assert done.returncode == 0, done.stderr
    assert "wrote 6 train" in done.stdout + done.stderr
    assert "--validation_fraction 0.1 held out no image (too few per class)" in done.stdout
    for chatter in ("cuInit", "E0000", "oneDNN", "cpu_feature_guard"):
        assert chatter not in done.stderr, done.stderr
