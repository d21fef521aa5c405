"""What a trace load read, skipped and kept; and the error for a bad trace file."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

MAX_PROBLEMS = 20  # problem messages kept verbatim; the counts cover the rest


class TraceFormatError(ValueError):
    """A trace file that cannot be read: unknown format or a corrupt entry."""


@dataclass
class LoadReport:
    """Counts from one :func:`philly.trace.load_trace` call.

    ``corrupt`` entries are malformed (a wrong field count, a number or time that
    does not parse); with ``strict=False`` they are skipped and listed in
    ``problems``. ``skipped`` counts well-formed jobs that cannot be replayed
    (no attempts, still running, no GPUs), by reason. ``origin`` is the wall-clock
    time of ``submit_time == 0`` when the trace has dates, else None. ``notes``
    say which columns of the file were not used and why.
    """

    path: str = ""
    format: str = ""
    rows: int = 0
    corrupt: int = 0
    problems: list[str] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)
    filtered_out: int = 0
    loaded: int = 0
    origin: datetime | None = None
    notes: list[str] = field(default_factory=list)   # columns read but not used, and why

    def add_problem(self, where: str, problem: str) -> None:
        """Count one corrupt entry and keep its message if there is room."""
        self.corrupt += 1
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(f"{where}: {problem}")

    def summary(self) -> str:
        """One line for logs: how many jobs were read, skipped and kept."""
        skipped = ", ".join(f"{n} {why}" for why, n in sorted(self.skipped.items()))
        return (
            f"{self.path} ({self.format}): {self.rows} entries, {self.loaded} jobs loaded, "
            f"{self.corrupt} corrupt, skipped: {skipped or 'none'}, "
            f"{self.filtered_out} removed by filters"
        )
