"""What a request handler raises or returns to shape its reply; small event-field checks."""

from __future__ import annotations

from typing import Any

from tfgshare.schema import ErrorCode


class RequestError(Exception):
    """A request the coordinator refuses: the text is the reason sent back, ``code`` its code."""

    def __init__(self, reason: str, code: ErrorCode = ErrorCode.INVALID) -> None:
        super().__init__(reason)
        self.code = code



def number(event: dict[str, Any], key: str, kind: type) -> Any:
    """``event[key]`` as an int or float, None when absent; RequestError when not a number."""
    value = event.get(key)
    if value is None or type(value) is kind:
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RequestError(f"event {event.get('event')!r}: {key} must be a number, "
                           f"got {value!r}")
    return kind(value)


def short(v: Any) -> str:
    """A value as it reads in a log line (floats to 4 significant digits)."""
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)
