"""Model names, their image sizes, and network builders (TF-Slim's nets factory).

Importing this module does not import TensorFlow: the coordinator and the CLI
validate model names with ``check_model``. ``get_network_fn`` imports
TensorFlow and tf_slim when called.
"""

from __future__ import annotations

import functools
import importlib
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

# The batch norm the nets are built with: "fused" (``slim_models.batch_norm``, same
# variables and updates as TF-Slim's, builds faster) or "slim" (``tf_slim.batch_norm``).
BATCH_NORM = "fused"
BATCH_NORMS = ("fused", "slim")

# The four models of the paper's TF-Slim benchmarks (see PAPER.md).
PAPER_MODELS: tuple[str, ...] = ("inception_v3", "resnet_v1_50", "vgg_16", "alexnet_v2")


def _spec(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown model {name!r}; valid names: {', '.join(MODEL_NAMES)}") from None


def default_image_size(name: str) -> int:
    """The square input size the model was designed for."""
    return _spec(name).default_image_size


def min_image_size(name: str) -> int:
    """The smallest square input size for which the model builds."""
    return _spec(name).min_image_size


def check_model(name: str, image_size: int | None = None) -> None:
    """Raise ValueError unless ``name`` is a known model and ``image_size`` fits it."""
    spec = _spec(name)
    if image_size is None:
        return
    if isinstance(image_size, bool) or not isinstance(image_size, numbers.Integral):
        raise ValueError(f"image size must be an integer, got {image_size!r}")
    if image_size < spec.min_image_size:
        raise ValueError(
            f"image size {image_size} is too small for {name}: minimum "
            f"{spec.min_image_size} (default {spec.default_image_size})")


def get_network_fn(name: str, num_classes: int, weight_decay: float = 0.0,
                   is_training: bool = False, batch_norm: str | None = None):
    """A function ``fn(images) -> (logits [batch, num_classes], end_points)`` for model ``name``.

    ``fn.default_image_size`` holds the model's default input size. The net is built
    under its TF-Slim arg scope, with ``batch_norm`` (default ``BATCH_NORM``). Inputs larger than the net's fixed-size head are
    classified fully convolutionally and the logits averaged over space.
    """
    spec = _spec(name)
    if isinstance(num_classes, bool) or not isinstance(num_classes, numbers.Integral) \
            or num_classes < 1:
        raise ValueError(f"num_classes must be a positive integer, got {num_classes!r}")
    if weight_decay < 0:
        raise ValueError(f"weight_decay must be >= 0, got {weight_decay!r}")
    batch_norm = batch_norm or BATCH_NORM
    if batch_norm not in BATCH_NORMS:
        raise ValueError(f"unknown batch norm {batch_norm!r}; valid: {', '.join(BATCH_NORMS)}")

    from slim_models.compat import ensure_tf_compat
    ensure_tf_compat()
    import tensorflow as tf
    import tf_slim as slim

    module = importlib.import_module(spec.module)
    builder = getattr(module, spec.builder)
    arg_scope = getattr(module, spec.arg_scope)

    @functools.wraps(builder)
    def network_fn(images, **kwargs):
        height, width = images.shape[1], images.shape[2]
        for size in (height, width):
            if size is not None and size < spec.min_image_size:
                raise ValueError(
                    f"image size {height}x{width} is too small for {name}: "
                    f"minimum {spec.min_image_size}")
        if spec.squeeze_arg:
            kwargs.setdefault("spatial_squeeze", False)
        scope = arg_scope(weight_decay=weight_decay)
        if batch_norm == "fused":
            from slim_models.batch_norm import use_fused
            scope = use_fused(scope)
        with slim.arg_scope(scope):
            logits, end_points = builder(images, num_classes=num_classes,
                                         is_training=is_training, **kwargs)
        logits = _to_2d(tf, logits, "logits")
        end_points = dict(end_points)
        if "AuxLogits" in end_points:
            end_points["AuxLogits"] = _to_2d(tf, end_points["AuxLogits"], "aux_logits")
        return logits, end_points

    network_fn.default_image_size = spec.default_image_size
    return network_fn


def _to_2d(tf, logits, name):
    """Average [batch, h, w, classes] logits over space into [batch, classes]."""
    if logits.shape.rank == 2:
        return logits
    if logits.shape[1] == 1 and logits.shape[2] == 1:
        return tf.squeeze(logits, [1, 2], name=f"{name}_squeeze")
    return tf.reduce_mean(logits, [1, 2], name=f"{name}_spatial_mean")
