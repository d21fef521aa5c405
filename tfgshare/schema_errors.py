"""What goes wrong on the wire, for people and for programs.

For people: msgspec's validation errors in our words, the field's path and the
problem (``in_our_words``); ``schema`` raises ``SchemaError`` with these
messages, and nothing decides anything from them. For programs: the
``ErrorCode`` an ``error`` reply carries and the ``FrameProblem`` a
``SchemaError`` carries (the coordinator counts bad frames by it).
"""

from __future__ import annotations

import re
from enum import Enum

import msgspec


class ErrorCode(str, Enum):
    """Why a request was refused, for a program to act on (an ``error`` reply's ``code``).

    Like Kubernetes' ``Status.reason``: the receiver decides from the code, never
    from the reply's text. A reply without one (an older peer) decodes as UNKNOWN.
    """

    UNKNOWN = "unknown"                # not given (an older peer)
    BAD_FRAME = "bad_frame"            # not a message: malformed, its version, type or id
    UNKNOWN_KEY = "unknown_key"        # the sender's key is not registered
    FORBIDDEN = "forbidden"            # the sender's key may not send this or act on this job
    NOT_REGISTERED = "not_registered"  # an agent message from a peer not registered as that node
    UNSUPPORTED = "unsupported"        # a message type this receiver does not serve
    INVALID = "invalid"                # a field's value is refused, by the schema or the
    #                                    receiver's own rules (the text names it)
    NOT_FOUND = "not_found"            # no such job (or runner, on an agent)
    CONFLICT = "conflict"              # the job's state does not allow it
    UNAVAILABLE = "unavailable"        # not now: the same request may succeed later
    INTERNAL = "internal"              # the receiver failed handling it


class FrameProblem(str, Enum):
    """What is wrong with a frame that does not decode (a bounded label for metrics)."""

    TOO_LARGE = "too_large"
    MALFORMED_JSON = "malformed_json"
    NOT_AN_OBJECT = "not_an_object"
    TOO_DEEP = "too_deep"
    BAD_VERSION = "bad_version"
    BAD_TYPE = "bad_type"              # missing, not a string, or unknown
    BAD_ID = "bad_id"
    INVALID_FIELD = "invalid_field"    # a field fails its type, range or length


class SchemaError(ValueError):
    """A message that is not valid under this schema; the text says why, ``problem`` what."""

    def __init__(self, text: str, problem: FrameProblem = FrameProblem.INVALID_FIELD) -> None:
        super().__init__(text)
        self.problem = problem

    @property
    def code(self) -> ErrorCode:
        """The error reply's code: INVALID for a field's value, else BAD_FRAME."""
        if self.problem is FrameProblem.INVALID_FIELD:
            return ErrorCode.INVALID
        return ErrorCode.BAD_FRAME

# how a range or value error on these fields reads (the field's rule in words)
_RULES = {"memory_fraction": "must be in (0, 1] or 'auto'"}

_NAMES = {"array": "list", "object": "object", "null": "null"}
_EXPECTED = re.compile(r"Expected `([^`]+)`, got `([^`]+)`")
_RANGE = re.compile(r"Expected `[^`]+` (>=|>|<=|<) (\S+)")
_LENGTH = re.compile(r"Expected `([^`]+)` of length (>=|<=) (\d+)")
_MISSING = re.compile(r"Object missing required field `([^`]+)`")
_UNKNOWN = re.compile(r"Object contains unknown field `([^`]+)`")
_ENUM = re.compile(r"Invalid (?:enum )?value (.+)")


def _type_name(name: str) -> str:
    return " or ".join(_NAMES.get(part, part) for part in name.split(" | "))


def in_our_words(exc: msgspec.ValidationError, where: str, top: str | None = None) -> str:
    """Turn ``... - at `$.jobs[0].batch_size``` into ``submit.jobs[0].batch_size: ...``
    (``where``: the message or record; ``top``: what the whole must be, if it is not).

    With ``where`` empty the text names only the field (``batch_size must be >= 1``):
    for a caller that says where itself (``tfgshare submit: ...``).
    """
    text = _words(exc, where, top)
    if not where:   # no record named: no leading ": " or "."
        text = text[2:] if text.startswith(": ") else text.lstrip(".")
    return text


def _words(exc: msgspec.ValidationError, where: str, top: str | None) -> str:
    text, _, at = str(exc).partition(" - at `")
    is_key = at.startswith("key` in `")
    path = at.split("`")[-2] if is_key else at.rstrip("`")
    path = path[1:] if path.startswith("$") else path
    place = where + path
    parent, dot, name = place.rpartition(".")
    if not dot or name.endswith("]"):
        parent, name = place, ""
    if top is not None and not path:
        m = _EXPECTED.match(text)
        return f"{top}, got {_type_name(m.group(2)) if m else text}"
    if is_key:
        return f"{place}: a key is not an integer ({text})"
    if name in _RULES and not _EXPECTED.match(text):
        return f"{parent}: {name} {_RULES[name]} ({text})"
    m = _EXPECTED.match(text)
    if m:
        return (f"{place}: expected {_type_name(m.group(1))}, "
                f"got {_type_name(m.group(2))}")
    m = _LENGTH.match(text)
    if m and name and m.group(2) == ">=" and m.group(3) == "1":
        return f"{parent}: {name} must not be empty"
    if m and name:
        unit = "characters" if m.group(1) == "str" else "items"
        most = "at most" if m.group(2) == "<=" else "at least"
        return f"{parent}: {name} must have {most} {m.group(3)} {unit}"
    m = _RANGE.match(text)
    if m and name:
        return f"{parent}: {name} must be {m.group(1)} {m.group(2)}"
    m = _MISSING.match(text)
    if m:
        return f"{place}: missing field '{m.group(1)}'"
    m = _UNKNOWN.match(text)
    if m:
        return f"{place}: unknown field(s) {m.group(1)}"
    m = _ENUM.match(text)
    if m:
        return f"{place}: invalid value {m.group(1)}"
    return f"{place}: {text}"
