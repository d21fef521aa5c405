"""Where a runner's events go: a JSON-lines file and/or a Python callback."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Callable

from tfgshare.runner.protocol import EVENTS


class EventSink:
    """Sends runner events (see ``runner_protocol.EVENTS``) to a file and a callback."""

    def __init__(self, events_file: str | Path | None = None,
                 on_event: Callable[[dict], None] | None = None,
                 job_id: str | None = None):
        self.path = Path(events_file) if events_file else None
        self.on_event = on_event
        self.job_id = job_id
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def emit(self, name: str, **fields) -> dict:
        """Record event ``name``; its fields must be exactly those EVENTS lists."""
        expected = EVENTS[name]
        missing = [f for f in expected if f not in fields]
        if missing:
            raise ValueError(f"event {name!r} lacks fields {missing}")
        extra = [f for f in fields if f not in expected]
        if extra:
            raise ValueError(f"event {name!r} has fields {extra} the protocol does not list")
        event = {"event": name, "time": time.time(), **fields}
        if self.job_id is not None:
            event["job_id"] = self.job_id
        if self.path is not None:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(event) + "\n")
        if self.on_event is not None:
            self.on_event(event)
        return event


def warn(sink: EventSink, message: str) -> None:
    """Print ``message`` as a warning on stderr and send it as a ``warning`` event."""
    print(f"warning: {message}", file=sys.stderr, flush=True)
    sink.emit("warning", message=message)
