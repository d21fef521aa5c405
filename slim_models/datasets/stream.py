"""Arguments shared by every dataset's endless, resumable example stream."""

from __future__ import annotations


def check_stream_args(start_example, seed) -> None:
    """Raise ValueError unless ``start_example`` and ``seed`` are non-negative integers.

    ``start_example`` may also be a scalar int64 tensor (fed when the stream starts).
    """
    if getattr(start_example, "dtype", None) is not None:
        if start_example.shape.rank != 0 or start_example.dtype.name != "int64":
            raise ValueError(f"start_example must be a scalar int64 tensor, got {start_example}")
        start_example = 0
    for name, value in (("start_example", start_example), ("seed", seed)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
