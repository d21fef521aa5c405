"""Arguments shared by every dataset's endless, resumable example stream."""

from __future__ import annotations


def check_stream_args(start_example, seed) -> None:
    """Raise ValueError unless ``start_example`` and ``seed`` are non-negative integers."""
    for name, value in (("start_example", start_example), ("seed", seed)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
