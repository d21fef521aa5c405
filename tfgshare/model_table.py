"""The model zoo's names and image sizes: which models a job may name, and how small
an input each builds at.

The coordinator and the CLI check a submitted model with ``check_model`` here;
``slim_models.nets_factory`` builds the nets from the same table (``MODELS``: where
each builder and arg scope live, as module paths it imports when building).
Imports only the standard library: no TensorFlow, nothing of ``slim_models``.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass


@dataclass(frozen=True)
class ModelSpec:
    """Where a net's builder and arg scope live, and the image sizes it accepts."""

    module: str             # module holding the builder and arg scope
    builder: str            # function(images, num_classes, is_training, ...) -> (logits, end_points)
    arg_scope: str          # function(weight_decay=...) -> arg scope
    default_image_size: int
    min_image_size: int
    squeeze_arg: bool = True  # builder takes spatial_squeeze=


_TF = "tf_slim.nets."
_HERE = "slim_models.nets."

# name -> spec. A minimum size is the smallest square input that builds (inception_v3
# with its auxiliary head), but never below the net's total stride: the nets that
# pool globally build at any size and get their stride (32, or 4 for cifarnet/lenet).
MODELS: dict[str, ModelSpec] = {
    "alexnet_v2": ModelSpec(_TF + "alexnet", "alexnet_v2", "alexnet_v2_arg_scope", 224, 195),
    "cifarnet": ModelSpec(_HERE + "cifarnet", "cifarnet", "cifarnet_arg_scope", 32, 4, False),
    "inception_v1": ModelSpec(_TF + "inception_v1", "inception_v1", "inception_v1_arg_scope", 224, 193),
    "inception_v2": ModelSpec(_TF + "inception_v2", "inception_v2", "inception_v2_arg_scope", 224, 32),
    "inception_v3": ModelSpec(_TF + "inception_v3", "inception_v3", "inception_v3_arg_scope", 299, 107),
    "lenet": ModelSpec(_HERE + "lenet", "lenet", "lenet_arg_scope", 28, 4, False),
    "mobilenet_v1": ModelSpec(_HERE + "mobilenet_v1", "mobilenet_v1", "mobilenet_v1_arg_scope", 224, 32, False),
    "overfeat": ModelSpec(_TF + "overfeat", "overfeat", "overfeat_arg_scope", 231, 231),
    "resnet_v1_50": ModelSpec(_TF + "resnet_v1", "resnet_v1_50", "resnet_arg_scope", 224, 32, False),
    "resnet_v1_101": ModelSpec(_TF + "resnet_v1", "resnet_v1_101", "resnet_arg_scope", 224, 32, False),
    "resnet_v1_152": ModelSpec(_TF + "resnet_v1", "resnet_v1_152", "resnet_arg_scope", 224, 32, False),
    "resnet_v2_50": ModelSpec(_TF + "resnet_v2", "resnet_v2_50", "resnet_arg_scope", 224, 32, False),
    "vgg_16": ModelSpec(_TF + "vgg", "vgg_16", "vgg_arg_scope", 224, 224),
    "vgg_19": ModelSpec(_TF + "vgg", "vgg_19", "vgg_arg_scope", 224, 224),
}

MODEL_NAMES: tuple[str, ...] = tuple(sorted(MODELS))

# The four models of the paper's TF-Slim benchmarks (see PAPER.md).
PAPER_MODELS: tuple[str, ...] = ("inception_v3", "resnet_v1_50", "vgg_16", "alexnet_v2")


def model_spec(name: str) -> ModelSpec:
    """The table's entry for model ``name``; ValueError naming the valid ones if unknown."""
    try:
        return MODELS[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown model {name!r}; valid names: {', '.join(MODEL_NAMES)}") from None


def default_image_size(name: str) -> int:
    """The square input size the model was designed for."""
    return model_spec(name).default_image_size


def min_image_size(name: str) -> int:
    """The smallest square input size for which the model builds."""
    return model_spec(name).min_image_size


def check_model(name: str, image_size: int | None = None) -> None:
    """Raise ValueError unless ``name`` is a known model and ``image_size`` fits it."""
    spec = model_spec(name)
    if image_size is None:
        return
    if isinstance(image_size, bool) or not isinstance(image_size, numbers.Integral):
        raise ValueError(f"image size must be an integer, got {image_size!r}")
    if image_size < spec.min_image_size:
        raise ValueError(
            f"image size {image_size} is too small for {name}: minimum "
            f"{spec.min_image_size} (default {spec.default_image_size})")
