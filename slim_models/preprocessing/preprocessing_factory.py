"""Choose the preprocessing function for a model name, as TF-Slim's factory does.

Importing this module does not import TensorFlow; ``get_preprocessing`` does.
"""

from __future__ import annotations

import functools
import importlib

# model name -> preprocessing module (in slim_models.preprocessing)
PREPROCESSING: dict[str, str] = {
    "alexnet_v2": "vgg_preprocessing",
    "cifarnet": "cifarnet_preprocessing",
    "inception_v1": "inception_preprocessing",
    "inception_v2": "inception_preprocessing",
    "inception_v3": "inception_preprocessing",
    "lenet": "lenet_preprocessing",
    "mobilenet_v1": "inception_preprocessing",
    "overfeat": "vgg_preprocessing",
    "resnet_v1_50": "vgg_preprocessing",
    "resnet_v1_101": "vgg_preprocessing",
    "resnet_v1_152": "vgg_preprocessing",
    "resnet_v2_50": "vgg_preprocessing",
    "vgg_16": "vgg_preprocessing",
    "vgg_19": "vgg_preprocessing",
}


def get_preprocessing(name: str, is_training: bool = False):
    """``fn(image, output_height, output_width, seed=None) -> float32 image`` for model ``name``.

    ``image`` is a uint8 HxWx3 tensor. Training-time functions draw their random
    distortions from ``seed`` (a shape-[2] integer tensor) when given, else from
    the graph's random state.
    """
    if name not in PREPROCESSING:
        raise ValueError(
            f"no preprocessing for model {name!r}; valid names: {', '.join(sorted(PREPROCESSING))}")
    module = importlib.import_module(f"slim_models.preprocessing.{PREPROCESSING[name]}")

    @functools.wraps(module.preprocess_image)
    def preprocessing_fn(image, output_height, output_width, seed=None):
        for size in (output_height, output_width):
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ValueError(f"output size must be a positive integer, got {size!r}")
        image = module.preprocess_image(image, output_height, output_width,
                                        is_training=is_training, seed=seed)
        image.set_shape([output_height, output_width, 3])
        return image

    return preprocessing_fn
