"""slim_models.preprocessing: per-model train/eval preprocessing, shapes and determinism."""

from __future__ import annotations

import numpy as np
import pytest

from slim_models.nets_factory import MODEL_NAMES
from slim_models.preprocessing.preprocessing_factory import PREPROCESSING, get_preprocessing

FAMILIES = {"lenet": "lenet", "cifarnet": "cifarnet", "inception_v3": "inception",
            "vgg_16": "vgg"}


def _image(height=37, width=53, seed=0):
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    return tf.constant(rng.integers(0, 256, [height, width, 3], dtype=np.uint8))


def test_every_model_has_a_preprocessing_as_in_slim():
    assert set(PREPROCESSING) == set(MODEL_NAMES)
    assert PREPROCESSING["inception_v3"] == "inception_preprocessing"
    assert PREPROCESSING["mobilenet_v1"] == "inception_preprocessing"
    assert PREPROCESSING["resnet_v1_50"] == PREPROCESSING["alexnet_v2"] == "vgg_preprocessing"


@pytest.mark.parametrize("name", sorted(FAMILIES))
@pytest.mark.parametrize("is_training", [True, False])
def test_output_shape_and_type(name, is_training):
    import tensorflow as tf

    fn = get_preprocessing(name, is_training=is_training)
    for height, width in ((37, 53), (80, 24)):
        out = fn(_image(height, width), 28, 30)
        assert out.dtype == tf.float32 and out.shape == (28, 30, 3)
        assert np.isfinite(out.numpy()).all()


def test_value_ranges_follow_each_family():
    image = _image(64, 64)
    inception = get_preprocessing("inception_v3", is_training=True)(image, 32, 32).numpy()
    assert inception.min() >= -1.0 and inception.max() <= 1.0
    lenet = get_preprocessing("lenet")(image, 28, 28).numpy()
    assert lenet.min() >= -1.0 and lenet.max() < 1.0
    vgg = get_preprocessing("vgg_16")(image, 32, 32).numpy()
    assert vgg.min() < -50 and vgg.max() > 50  # channel means subtracted from 0..255
    cifar = get_preprocessing("cifarnet", is_training=True)(image, 24, 24).numpy()
    assert abs(cifar.mean()) < 1e-3 and abs(cifar.std() - 1.0) < 0.05  # standardized


@pytest.mark.parametrize("name", ["cifarnet", "inception_v3", "vgg_16"])
def test_training_distortions_are_set_by_the_seed(name):
    fn = get_preprocessing(name, is_training=True)
    image = _image()
    a = fn(image, 32, 32, seed=[7, 1]).numpy()
    assert np.array_equal(a, fn(image, 32, 32, seed=[7, 1]).numpy())
    assert not np.array_equal(a, fn(image, 32, 32, seed=[7, 2]).numpy())


def test_training_draws_from_the_graph_seed_when_no_seed_is_given():
    import tensorflow as tf

    def run_once():
        graph = tf.Graph()
        with graph.as_default():
            tf.compat.v1.set_random_seed(11)
            fn = get_preprocessing("inception_v3", is_training=True)
            out = [fn(_image(), 24, 24) for _ in range(2)]
            with tf.compat.v1.Session(graph=graph) as sess:
                return sess.run(out)

    first, second = run_once(), run_once()
    assert all(np.array_equal(a, b) for a, b in zip(first, second))
    assert not np.array_equal(first[0], first[1])


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_eval_preprocessing_is_deterministic(name):
    fn = get_preprocessing(name, is_training=False)
    image = _image()
    assert np.array_equal(fn(image, 24, 24).numpy(), fn(image, 24, 24).numpy())


def test_bad_names_and_sizes_are_refused():
    with pytest.raises(ValueError, match="no preprocessing for model 'resnet'.*resnet_v1_50"):
        get_preprocessing("resnet")
    with pytest.raises(ValueError, match="output size"):
        get_preprocessing("lenet")(_image(), 0, 28)
    with pytest.raises(ValueError, match="shape \\[2\\]"):
        get_preprocessing("vgg_16", is_training=True)(_image(), 32, 32, seed=[1, 2, 3])
