"""slim_models.nets_factory: model metadata without TensorFlow, and every net's logits."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from slim_models import nets_factory as nf

REPO = Path(__file__).resolve().parents[1]
LIGHT = ("lenet", "cifarnet", "mobilenet_v1", "inception_v2", "resnet_v1_50", "resnet_v2_50")


def _run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, timeout=300)


def test_metadata_and_errors_do_not_import_tensorflow():
    code = (
        "import sys\n"
        "from slim_models import nets_factory as nf\n"
        "from slim_models.preprocessing import preprocessing_factory\n"
        "from slim_models.datasets import dataset_factory\n"
        "import slim_models.datasets.convert\n"
        "nf.check_model('inception_v3', 299)\n"
        "for bad in (('nope', None), ('vgg_16', 32)):\n"
        "    try:\n"
        "        nf.check_model(*bad)\n"
        "    except ValueError:\n"
        "        pass\n"
        "    else:\n"
        "        raise SystemExit('no error for %r' % (bad,))\n"
        "dataset_factory.get_dataset('synthetic', 'train')\n"
        "print(nf.default_image_size('inception_v3'), 'tensorflow' in sys.modules)\n")
    done = _run_python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["299", "False"]


def test_model_names_cover_the_paper_and_tf_slim_nets():
    assert list(nf.MODEL_NAMES) == sorted(nf.MODEL_NAMES)
    assert set(nf.PAPER_MODELS) <= set(nf.MODEL_NAMES)
    assert {"inception_v1", "inception_v2", "resnet_v1_101", "resnet_v1_152", "resnet_v2_50",
            "vgg_19", "overfeat", "mobilenet_v1", "lenet", "cifarnet"} <= set(nf.MODEL_NAMES)


@pytest.mark.parametrize("name,size", [("inception_v3", 299), ("vgg_16", 224),
                                       ("overfeat", 231), ("lenet", 28), ("cifarnet", 32)])
def test_default_image_sizes_follow_slim(name, size):
    assert nf.default_image_size(name) == size
    assert nf.min_image_size(name) <= size


def test_unknown_model_lists_valid_names():
    with pytest.raises(ValueError, match="unknown model 'resnet_50'") as info:
        nf.check_model("resnet_50")
    assert "resnet_v1_50" in str(info.value) and "lenet" in str(info.value)
    with pytest.raises(ValueError, match="unknown model"):
        nf.default_image_size("resnet_50")


def test_too_small_image_names_the_minimum():
    minimum = nf.min_image_size("inception_v3")
    nf.check_model("inception_v3", minimum)
    with pytest.raises(ValueError, match=f"minimum {minimum}"):
        nf.check_model("inception_v3", minimum - 1)
    with pytest.raises(ValueError, match="integer"):
        nf.check_model("lenet", "28")


def test_bad_num_classes_is_refused():
    with pytest.raises(ValueError, match="num_classes"):
        nf.get_network_fn("lenet", 0)


def _logits_shape(name: str, size: int, batch: int = 2, classes: int = 7, run: bool = False):
    import numpy as np
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        fn = nf.get_network_fn(name, classes, weight_decay=1e-4, is_training=True)
        images = tf.compat.v1.placeholder(tf.float32, [batch, size, size, 3])
        logits, end_points = fn(images)
        assert fn.default_image_size == nf.default_image_size(name)
        if "AuxLogits" in end_points:
            assert end_points["AuxLogits"].shape.as_list() == [batch, classes]
        if not run:
            return logits.shape.as_list()
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            values = sess.run(logits, {images: np.random.rand(batch, size, size, 3)})
        assert np.isfinite(values).all()
        return list(values.shape)


@pytest.mark.parametrize("name,size", [("lenet", 28), ("cifarnet", 32), ("mobilenet_v1", 32)])
def test_small_nets_run_forward(name, size):
    assert _logits_shape(name, size, run=True) == [2, 7]


@pytest.mark.parametrize("name", LIGHT)
def test_nets_build_at_their_minimum_size(name):
    assert _logits_shape(name, nf.min_image_size(name)) == [2, 7]


def test_larger_than_default_images_still_give_2d_logits():
    # fixed-size heads run fully convolutionally and average their logits
    assert _logits_shape("alexnet_v2", 256, batch=1) == [1, 7]
    assert _logits_shape("lenet", 40, batch=1) == [1, 7]


def test_size_below_minimum_is_refused_when_building():
    import tensorflow as tf

    with tf.Graph().as_default():
        fn = nf.get_network_fn("vgg_16", 5)
        with pytest.raises(ValueError, match="minimum 224"):
            fn(tf.zeros([1, 64, 64, 3]))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(nf.MODEL_NAMES) - set(LIGHT)))
def test_heavy_nets_build_at_their_minimum_size(name):
    assert _logits_shape(name, nf.min_image_size(name), batch=1) == [1, 7]
