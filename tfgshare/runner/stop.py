"""Stop requests: the signals that suspend a runner after its current step, timed on arrival."""

from __future__ import annotations

import os
import signal
import threading
import time

from tfgshare.runner import protocol as rp


class StopRequest(threading.Event):
    """A threading.Event that remembers when it was first set (``set_at``, monotonic)."""

    set_at: float | None = None

    def set(self) -> None:
        if self.set_at is None:
            self.set_at = time.monotonic()
        super().set()


def install_stop_signals(stop_event: threading.Event) -> None:
    """Set ``stop_event`` on the agent's suspend signals (``protocol.SUSPEND_SIGNALS``)."""
    def handler(signum, _frame):
        stop_event.set()
        print(f"signal {signal.Signals(signum).name}: suspending after the current step",
              flush=True)

    for sig in rp.SUSPEND_SIGNALS:
        signal.signal(sig, handler)
    watch_stop_signals(stop_event)


def watch_stop_signals(stop_event: threading.Event) -> None:
    """Set ``stop_event`` as soon as a stop signal arrives, so its ``set_at`` (and the
    ``stop_wait_s`` reported) counts the step in flight.

    Python runs a signal's handler in the main thread only between bytecodes, so after
    ``session.run`` returns; its C handler writes the signal's number to the wakeup fd at
    once, which a thread reads here.
    """
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    stops = {int(sig) for sig in rp.SUSPEND_SIGNALS}

    def watch() -> None:
        while True:
            got = os.read(read_fd, 64)
            if not got:
                return
            if stops & set(got):
                stop_event.set()

    threading.Thread(target=watch, name="stop-signals", daemon=True).start()
