"""Model names, their image sizes, and network builders (TF-Slim's nets factory).

The names and sizes are ``tfgshare.model_table``'s (re-exported here), which the
coordinator and the CLI check without importing the zoo. Importing this module
does not import TensorFlow; ``get_network_fn`` imports TensorFlow and tf_slim
when called.
"""

from __future__ import annotations

import functools
import importlib
import numbers

from tfgshare.model_table import (  # noqa: F401  (re-exported: the zoo's names and sizes)
    MODEL_NAMES, MODELS, PAPER_MODELS, ModelSpec, check_model, default_image_size, min_image_size,
    model_spec)


# The batch norm the nets are built with: "fused" (``slim_models.batch_norm``, same
# variables and updates as TF-Slim's, builds faster) or "slim" (``tf_slim.batch_norm``).
BATCH_NORM = "fused"
BATCH_NORMS = ("fused", "slim")


def get_network_fn(name: str, num_classes: int, weight_decay: float = 0.0,
                   is_training: bool = False, batch_norm: str | None = None):
    """A function ``fn(images) -> (logits [batch, num_classes], end_points)`` for model ``name``.

    ``fn.default_image_size`` holds the model's default input size. The net is built
    under its TF-Slim arg scope, with ``batch_norm`` (default ``BATCH_NORM``). Inputs larger than the net's fixed-size head are
    classified fully convolutionally and the logits averaged over space.
    """
    spec = model_spec(name)
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
