"""The runner's TensorFlow process set-up: a quiet import, op determinism, peak memory.

Kept apart from ``runner.main`` so that module imports no TensorFlow at load; each
function here imports it when called.
"""

from __future__ import annotations

import contextlib
import os
import resource
import sys
import warnings


@contextlib.contextmanager
def stderr_muted():
    """Send file descriptor 2 (C++ chatter too) to /dev/null for the block."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def import_tensorflow_quietly() -> None:
    """Import TensorFlow and find its devices with the C++ start-up chatter muted.

    TensorFlow writes some lines (CUDA probing, CPU features) before its log level
    applies; they are noise on a CPU node. Later messages obey TF_CPP_MIN_LOG_LEVEL.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    for message in ("`layer.apply` is deprecated", "`tf.layers.flatten` is deprecated"):
        warnings.filterwarnings("ignore", message=message)
    if "tensorflow" in sys.modules:
        return
    with stderr_muted():
        import tensorflow as tf

        tf.config.list_physical_devices("GPU")
    tf.get_logger().setLevel("ERROR")


def peak_memory(devices: list[str]) -> tuple[float, str]:
    """Peak memory in MB: the GPU allocator's peak with GPUs, else the process's peak RSS."""
    import tensorflow as tf

    gpus = sorted({d for d in devices if d.startswith("/gpu")})
    if gpus:
        try:
            peaks = [tf.config.experimental.get_memory_info(d.replace("/gpu", "GPU"))["peak"]
                     for d in gpus]
            return max(peaks) / 2**20, "gpu_allocator_peak"
        except (ValueError, RuntimeError):
            pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "process_rss_peak"


@contextlib.contextmanager
def op_determinism(enabled: bool):
    """TensorFlow op determinism on (when ``enabled``) for the block, then as it was.

    Restoring matters to in-process callers: determinism makes unseeded random
    ops raise, which would break their later TensorFlow work.
    """
    if not enabled:
        yield
        return
    import tensorflow as tf

    try:
        from tensorflow.python.util import _pywrap_determinism as switch
    except ImportError:  # a TensorFlow without the switch: enable and leave it on
        switch = None
    was_on = switch.is_enabled() if switch else True
    env_before = os.environ.get("TF_DETERMINISTIC_OPS")
    os.environ["TF_DETERMINISTIC_OPS"] = "1"
    tf.config.experimental.enable_op_determinism()
    try:
        yield
    finally:
        if switch and not was_on:
            switch.enable(False)
            if env_before is None:
                os.environ.pop("TF_DETERMINISTIC_OPS", None)
            else:
                os.environ["TF_DETERMINISTIC_OPS"] = env_before


def gpu_peak_mb() -> float:
    """The peak MiB TensorFlow's allocator reached on the visible GPUs (else peak RSS)."""
    import tensorflow as tf

    peak = 0.0
    for i, _ in enumerate(tf.config.list_logical_devices("GPU")):
        try:
            info = tf.config.experimental.get_memory_info(f"GPU:{i}")
        except (ValueError, RuntimeError):
            continue
        peak = max(peak, info["peak"] / 2**20)
    if peak == 0.0:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return peak
