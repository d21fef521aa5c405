"""Make tf_slim work on TensorFlow 2.16+ with tf-keras.

tf_slim's ``batch_norm`` goes through ``tensorflow.python.layers.normalization``,
which lazily imports ``tf_keras.legacy_tf_layers.normalization``. tf-keras 2.21
ships that package as ``tf_keras.src.legacy_tf_layers`` only, so the lazy import
fails with ``ModuleNotFoundError: No module named 'tf_keras.legacy_tf_layers'``.
``ensure_tf_compat`` registers the missing module names as aliases of the real
ones. It is cheap and idempotent; call it before building any tf_slim net.
"""

from __future__ import annotations

import importlib
import sys

_PUBLIC = "tf_keras.legacy_tf_layers"
_PRIVATE = "tf_keras.src.legacy_tf_layers"
_SUBMODULES = ("base", "convolutional", "core", "normalization", "pooling", "variable_scope_shim")

_done = False


def _importable(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError:
        return False
    return True


def ensure_tf_compat() -> None:
    """Alias tf-keras's legacy layer modules where TensorFlow expects them (once)."""
    global _done
    if _done:
        return
    if not _importable(f"{_PUBLIC}.normalization"):
        try:
            package = importlib.import_module(_PRIVATE)
        except ModuleNotFoundError as exc:
            raise ImportError(
                "tf_slim needs the tf-keras package matching TensorFlow's version "
                "(pip install 'tf-keras~=<tensorflow major.minor>')") from exc
        sys.modules[_PUBLIC] = package
        for sub in _SUBMODULES:
            name = f"{_PRIVATE}.{sub}"
            if _importable(name):
                sys.modules[f"{_PUBLIC}.{sub}"] = sys.modules[name]
    _done = True
