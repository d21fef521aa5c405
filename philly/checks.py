"""Vectorised checks of a string table's columns, collecting corrupt lines.

Each check converts one column (numbers, date-times) and marks the lines whose
value does not parse or is out of range. :meth:`Checks.good_rows` then raises on
the first bad line (strict) or counts every bad line in the report and returns
the rows to keep.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from philly.report import MAX_PROBLEMS, LoadReport, TraceFormatError

MAX_CORRUPT_SHARE = 0.10  # above this (and above MAX_CORRUPT_FEW lines) the file is rejected
MAX_CORRUPT_FEW = 5


def reject_if_mostly_corrupt(path: Path, report: LoadReport, total: int, unit: str) -> None:
    """Raise unless the corrupt entries are a few in an otherwise good file."""
    if not report.corrupt:
        return
    if report.corrupt == total or (
            report.corrupt > MAX_CORRUPT_FEW and report.corrupt > MAX_CORRUPT_SHARE * total):
        raise TraceFormatError(
            f"{path}: {report.corrupt} of {total} {unit} are corrupt, too many to skip; "
            f"first: {report.problems[0]}")


class Checks:
    """Column conversions over one table, remembering which lines were bad."""

    def __init__(self, path: Path, table: pd.DataFrame):
        self.path = path
        self.table = table
        self._flags: list[tuple[pd.Series, str, str]] = []  # (bad mask, column, what was expected)

    def text(self, column: str, default: str = "", required: bool = False) -> pd.Series:
        """A string column (``default`` where the file lacks it); if required, empty values are bad."""
        if column not in self.table:
            return pd.Series(default, index=self.table.index, dtype=object)
        values = self.table[column].str.strip()
        if required:
            self._flags.append((values == "", column, "a non-empty name"))
        return values

    def number(self, column: str, *, integer: bool = False, minimum: float = 0.0) -> pd.Series:
        """A numeric column; empty, non-finite, fractional (if integer) or small values are bad."""
        values = pd.to_numeric(self.table[column], errors="coerce").astype(float)
        bad = ~np.isfinite(values) | (values < minimum)
        if integer:
            bad |= values != np.floor(values)
        expected = f"{'an integer' if integer else 'a number'} >= {minimum:g}"
        self._flags.append((bad.fillna(True), column, expected))
        return values

    def datetime(self, column: str) -> pd.Series:
        """A ``YYYY-MM-DD HH:MM:SS`` column as naive datetime64; unparseable values are bad."""
        values = pd.to_datetime(self.table[column], errors="coerce", format="ISO8601")
        if getattr(values.dt, "tz", None) is not None:
            values = values.dt.tz_localize(None)
        self._flags.append((values.isna(), column, "a date-time like 2017-10-09 07:01:55"))
        return values

    def seconds_or_datetime(self, column: str) -> pd.Series:
        """Seconds when most values are numbers, else date-times (see :meth:`datetime`)."""
        numeric = pd.to_numeric(self.table[column], errors="coerce")
        if len(numeric) and numeric.notna().mean() > 0.5:
            return self.number(column, minimum=-np.inf)
        return self.datetime(column)

    def good_rows(self, strict: bool, report: LoadReport) -> pd.Series:
        """Mask of lines that passed every check; raise or report the others."""
        index = self.table.index
        bad = pd.Series(False, index=index)
        for mask, _, _ in self._flags:
            bad |= mask
        count = int(bad.sum())
        bad_lines = index[bad.to_numpy()]
        if count and strict:
            where, problem = self._problem(bad_lines[0])
            raise TraceFormatError(f"{where}: {problem}")
        for line in bad_lines[:MAX_PROBLEMS]:
            report.add_problem(*self._problem(line))
        report.corrupt += count - min(count, MAX_PROBLEMS)
        # report.corrupt also holds the ragged lines dropped while reading the table
        reject_if_mostly_corrupt(self.path, report, len(index) + report.corrupt - count, "lines")
        return ~bad

    def _problem(self, line: int) -> tuple[str, str]:
        for mask, column, expected in self._flags:
            if mask.loc[line]:
                value = self.table.at[line, column]
                return f"{self.path}, line {line}", f"{column} {value!r} is not {expected}"
        raise AssertionError("line was not flagged")
