"""When the runner saves, and how a failed save is ridden out (no TensorFlow).

A periodic save is due every ``--save_interval_steps`` steps or ``--save_interval_secs``
seconds; a failed one (a full disk) is a warning and the next one tries again. The
final save holds steps that exist nowhere else, so it is tried again for a while.
"""

from __future__ import annotations

import time
from typing import Callable

from tfgshare.runner import protocol as rp
from tfgshare.runner.config import TrainConfig

FINAL_SAVE_PATIENCE_S = 120.0   # how long a failed final save is tried again
FINAL_SAVE_PAUSE_S = 2.0        # between those tries


def save_patiently(save_once: Callable, step: int, final: bool, errors: tuple,
                   warn: Callable[[str], None], patience_s: float = FINAL_SAVE_PATIENCE_S,
                   pause_s: float = FINAL_SAVE_PAUSE_S):
    """Run ``save_once``; its result, or None after a failed periodic save (warned).

    A failed final save (its steps exist nowhere else) is tried again every ``pause_s``
    for ``patience_s``, so a disk that fills for a while does not cost the job its
    steps; then it raises ``RunnerError`` (exit 1).
    """
    deadline = time.monotonic() + patience_s
    while True:
        try:
            return save_once()
        except errors as exc:
            text = str(getattr(exc, "message", exc)).strip().splitlines()
            message = f"checkpoint at step {step} failed: {type(exc).__name__}: " \
                      f"{text[0] if text else ''}"
            if not final:
                warn(f"{message}; training on, the next save tries again")
                return None
            if time.monotonic() + pause_s > deadline:
                raise rp.RunnerError(f"{message} (tried for {patience_s:.0f} s)") from None
            warn(f"{message}; trying again in {pause_s:.0f} s")
            time.sleep(pause_s)


def periodic_save_due(config: TrainConfig, step: int, last_save_time: float) -> bool:
    """Whether a periodic save is due after ``step`` (``last_save_time``: monotonic)."""
    if config.save_interval_steps and step % config.save_interval_steps == 0:
        return True
    return bool(config.save_interval_secs) and \
        time.monotonic() - last_save_time >= config.save_interval_secs
