"""slim_models.datasets: synthetic and TFRecord streams, resumable and seed-ordered; convert."""

from __future__ import annotations

import numpy as np
import pytest

from slim_models.datasets.dataset_factory import DATASET_NAMES, get_dataset


def _take(dataset, count, **kwargs):
    items = list(dataset.tf_dataset(**kwargs).take(count).as_numpy_iterator())
    return [item[0] for item in items], [int(item[1]) for item in items]


def _same(a, b):
    images_a, labels_a = a
    images_b, labels_b = b
    return labels_a == labels_b and all(np.array_equal(x, y) for x, y in zip(images_a, images_b))


def test_synthetic_defaults_and_element_types():
    data = get_dataset("synthetic", "train")
    assert (data.name, data.split_name, data.num_classes, data.num_samples) == \
        ("synthetic", "train", 10, 10000)
    images, labels = _take(get_dataset("synthetic", "train", image_size=20, num_classes=3), 6)
    assert images[0].shape == (20, 20, 3) and images[0].dtype == np.uint8
    assert all(0 <= label < 3 for label in labels)


def test_synthetic_is_deterministic_and_resumes_at_any_position():
    data = get_dataset("synthetic", "train", image_size=16, num_classes=5, num_samples=7)
    whole = _take(data, 20, seed=3)
    assert _same(whole, _take(data, 20, seed=3))
    for start in (1, 6, 7, 13):  # inside, at and across epoch boundaries
        resumed = _take(data, 20 - start, start_example=start, seed=3)
        assert _same(resumed, (whole[0][start:], whole[1][start:]))


def test_synthetic_epochs_are_permutations_whose_order_depends_on_seed():
    import tensorflow as tf

    data = get_dataset("synthetic", "train", image_size=8, num_samples=11)
    orders = {}
    for seed in (0, 1):
        positions = tf.range(33, dtype=tf.int64)
        indices = [data.position_to_index(p, seed).numpy() for p in positions]
        for epoch in range(3):
            assert sorted(indices[epoch * 11:(epoch + 1) * 11]) == list(range(11))
        orders[seed] = indices
    assert orders[0] != orders[1]
    assert orders[0][:11] != orders[0][11:22]  # reshuffled each epoch


def test_synthetic_splits_differ():
    train = _take(get_dataset("synthetic", "train", image_size=8), 4)
    validation = _take(get_dataset("synthetic", "validation", image_size=8), 4)
    assert not _same(train, validation)


def test_stream_positions_come_with_the_elements():
    data = get_dataset("synthetic", "train", image_size=8)
    items = list(data.tf_dataset(start_example=5, seed=2, with_position=True).take(3)
                 .as_numpy_iterator())
    assert [int(p) for _, _, p in items] == [5, 6, 7]


def test_synthetic_classes_are_learnable_by_lenet():
    import tensorflow as tf

    from slim_models import nets_factory
    from slim_models.preprocessing.preprocessing_factory import get_preprocessing

    data = get_dataset("synthetic", "train", image_size=28, num_classes=4)
    preprocess = get_preprocessing("lenet", is_training=True)
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.set_random_seed(1)
        stream = data.tf_dataset(seed=1).map(lambda x, y: (preprocess(x, 28, 28), y)).batch(16)
        images, labels = tf.compat.v1.data.make_one_shot_iterator(stream).get_next()
        logits, _ = nets_factory.get_network_fn("lenet", 4, is_training=True)(images)
        loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels, logits)
        train = tf.compat.v1.train.AdamOptimizer(1e-3).minimize(loss)
        with tf.compat.v1.Session(config=tf.compat.v1.ConfigProto(
                intra_op_parallelism_threads=2, inter_op_parallelism_threads=1)) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            losses = [sess.run([loss, train])[0] for _ in range(100)]
    assert np.mean(losses[:10]) > 1.0  # about ln(4) at the start
    assert np.mean(losses[-10:]) < 0.5 * np.mean(losses[:10])


def test_unknown_dataset_and_split_are_named():
    with pytest.raises(ValueError, match="unknown dataset 'mnist'") as info:
        get_dataset("mnist", "train")
    assert all(name in str(info.value) for name in DATASET_NAMES)
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        get_dataset("synthetic", "dev")
    with pytest.raises(ValueError, match="unknown split 'validation'.*cifar10"):
        get_dataset("cifar10", "validation", "/nonexistent")
    with pytest.raises(ValueError, match="num_classes"):
        get_dataset("synthetic", "train", num_classes=0)
    with pytest.raises(ValueError, match="start_example"):
        get_dataset("synthetic", "train").tf_dataset(start_example=-1)


def test_missing_dataset_files_are_named(tmp_path):
    with pytest.raises(ValueError, match="dataset_dir.*flowers_train_"):
        get_dataset("flowers", "train")
    with pytest.raises(FileNotFoundError, match="not a directory"):
        get_dataset("flowers", "train", str(tmp_path / "absent"))
    with pytest.raises(FileNotFoundError, match=r"cifar10_train\.tfrecord.*" + tmp_path.name):
        get_dataset("cifar10", "train", str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"train-\*\.tfrecord"):
        get_dataset("folder", "train", str(tmp_path))
