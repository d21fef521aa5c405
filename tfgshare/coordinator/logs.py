"""Coordinator logging: lines written as they come, flushed once per loop turn."""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

from tfgshare import schema as s

log = logging.getLogger("tfgshare.coordinator")


class TurnHandler(logging.StreamHandler):
    """A log handler that writes lines as they come but flushes once per loop turn.

    A flush per line (a system call each) cost more than a start decision itself.
    """

    def flush(self) -> None:
        """Flushing is left to the coordinator's loop (``flush_logs``)."""

    def flush_now(self) -> None:
        """Flush the stream."""
        with self.lock:
            if self.stream and hasattr(self.stream, "flush"):
                self.stream.flush()


def flush_logs() -> None:
    """Flush every TurnHandler of the coordinator's logger tree."""
    for handler in logging.getLogger().handlers + log.handlers:
        if isinstance(handler, TurnHandler):
            handler.flush_now()


class Throttled:
    """Warnings at a bounded rate: one line per key per ``every_s`` seconds.

    The lines held back meanwhile are counted and told by the key's next line, or
    by ``flush`` once the interval has passed; so a flood of junk frames writes a
    few lines per reason, not one per frame. The keys must be a bounded set.
    """

    def __init__(self, every_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.every_s = every_s
        self.clock = clock
        self._keys: dict[str, list] = {}   # key -> [when its last line went out, held since]

    def warning(self, key: str, fmt: str, *args: Any) -> None:
        """Log ``fmt % args`` unless a line for ``key`` went out less than ``every_s`` ago."""
        now = self.clock()
        state = self._keys.get(key)
        if state is None:
            self._keys[key] = [now, 0]
        elif now - state[0] < self.every_s:
            state[1] += 1
            return
        elif state[1]:
            fmt += " (and %d more %s lines held back over %.0f s)"
            args = (*args, state[1], key, now - state[0])
            state[0], state[1] = now, 0
        else:
            state[0] = now
        log.warning(fmt, *args)

    def flush(self) -> None:
        """Tell the lines held back for each key whose interval has passed."""
        now = self.clock()
        for key, state in self._keys.items():
            if state[1] and now - state[0] >= self.every_s:
                log.warning("%d more %s lines held back over %.0f s", state[1], key,
                            now - state[0])
                state[0], state[1] = now, 0


class BadFrames:
    """Frames refused before handling: each counted by reason, logged at a bounded rate."""

    def __init__(self, counter: Any, every_s: float = 10.0) -> None:
        self.counter = counter               # a Prometheus counter labelled by reason
        self.log = Throttled(every_s)

    def note(self, peer: bytes, reason: str, why: object) -> None:
        """Count one refused frame from ``peer``; log it unless its reason was just logged."""
        self.counter.labels(reason).inc()
        self.log.warning(reason, "bad frame from peer %s: %s", peer.hex(), why)

    def refuse(self, peer: bytes, data: bytes, reason: str, text: str,
               code: s.ErrorCode) -> s.Error:
        """``note`` the frame; the error reply to it (``text`` and ``code``)."""
        self.note(peer, reason, text)
        return s.reply_error(s.request_id(data), text, code=code)
