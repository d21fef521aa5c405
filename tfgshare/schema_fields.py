"""The constrained field types of the wire schema: names, paths, counts, fractions, ports.

Each is an ``Annotated`` type whose ``Meta`` msgspec checks while decoding, so a
bad value is refused with the field's name. Owns only these types and the page
sizes they cap. ``tfgshare.schema`` re-exports every name here.

May import: msgspec and the standard library only (it sits under every part).
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

Name = Annotated[str, Meta(max_length=256)]          # ids, node and job names
NonEmptyName = Annotated[str, Meta(min_length=1, max_length=256)]
PathText = Annotated[str, Meta(min_length=1, max_length=4096)]
Text = Annotated[str, Meta(max_length=65536)]
Positive = Annotated[int, Meta(ge=1)]
NonNegative = Annotated[int, Meta(ge=0)]
Fraction = Annotated[float, Meta(gt=0.0, le=1.0)]
MAX_PAGE = 500              # jobs per status reply (a reply stays well under 1 MiB)
MAX_LOG_PAGE = 10_000       # log lines per logs reply
PageSize = Annotated[int, Meta(ge=1, le=MAX_PAGE)]
Unit = Annotated[float, Meta(ge=0.0, le=1.0)]
Optimizer = Literal["sgd", "momentum", "rmsprop", "adam"]       # runner.config.OPTIMIZERS
DecayType = Literal["fixed", "exponential", "polynomial"]        # runner.config.DECAY_TYPES

Port = Annotated[int, Meta(ge=1, le=65535)]
HostPort = Annotated[str, Meta(min_length=3, max_length=261, pattern=r"^[^\s,]+:[0-9]{1,5}$")]
