"""Reading a CSV trace into a table of strings, one row per data line, fast.

Rows keep their file line number as the index so that every later complaint can
name the line. A line with the wrong number of fields is corrupt: it raises
(strict) or is skipped and counted in the report.
"""

from __future__ import annotations

import csv
import gzip
from pathlib import Path

import pandas as pd

from philly.report import LoadReport, TraceFormatError


def read_table(path: Path, compression: str | None, strict: bool, report: LoadReport) -> pd.DataFrame:
    """All fields of a headed CSV file as strings, indexed by line number."""
    try:
        skip = _leading_blank_lines(path, compression)
        table = pd.read_csv(
            path, dtype=str, keep_default_na=False, skip_blank_lines=False,
            skipinitialspace=True, compression=compression, skiprows=skip,
        )
        table.index = table.index + skip + 2  # the header is line skip + 1
    except pd.errors.ParserError:
        table = _read_table_by_line(path, compression, strict, report)
    except (UnicodeDecodeError, pd.errors.EmptyDataError) as err:
        raise TraceFormatError(f"{path}: not a readable CSV file ({err})") from None
    table.columns = [str(c).strip().lower() for c in table.columns]
    empty = (table == "").all(axis=1)
    return table[~empty]


def _open(path: Path, compression: str | None):
    if compression == "gzip":
        return gzip.open(path, "rt", encoding="utf-8-sig", newline="")
    return open(path, encoding="utf-8-sig", newline="")


def _leading_blank_lines(path: Path, compression: str | None) -> int:
    with _open(path, compression) as f:
        for count, line in enumerate(f):
            if line.strip():
                return count
    return 0


def _read_table_by_line(path: Path, compression: str | None, strict: bool, report: LoadReport) -> pd.DataFrame:
    """The slow path for files with ragged lines: find and drop each bad line."""
    with _open(path, compression) as f:
        reader = csv.reader(f, skipinitialspace=True)
        rows, lines, header = [], [], None
        for row in reader:
            if not row or all(not field.strip() for field in row):
                continue
            if header is None:
                header = row
                continue
            line = reader.line_num
            if len(row) != len(header):
                problem = f"expected {len(header)} fields, found {len(row)}"
                if strict:
                    raise TraceFormatError(f"{path}, line {line}: {problem}")
                report.add_problem(f"{path}, line {line}", problem)
                continue
            rows.append(row)
            lines.append(line)
    return pd.DataFrame(rows, columns=header, index=lines, dtype=str)
