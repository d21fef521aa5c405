"""Coordinator logging: lines written as they come, flushed once per loop turn."""

from __future__ import annotations

import logging

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
