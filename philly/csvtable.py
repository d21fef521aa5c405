"""Reading a CSV trace into a table of strings, one row per data line, fast.

Rows keep their file line number as the index so that every later complaint can
name the line. A line with the wrong number of fields is corrupt: it raises
(strict) or is skipped and counted in the report.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pandas as pd

from philly.report import LoadReport, TraceFormatError


def read_table(path: Path, compression: str | None, strict: bool, report: LoadReport) -> pd.DataFrame:
    """All fields of a headed CSV file as stripped strings, indexed by line number."""
    try:
        table = pd.read_csv(
            path, dtype=str, keep_default_na=False, skip_blank_lines=False,
            skipinitialspace=True, compression=compression,
        )
        table.index = table.index + 2  # line 1 is the header
    except pd.errors.ParserError:
        table = _read_table_by_line(path, compression, strict, report)
    except (UnicodeDecodeError, pd.errors.EmptyDataError) as err:
        raise TraceFormatError(f"{path}: not a readable CSV file ({err})") from None
    table.columns = [str(c).strip().lower() for c in table.columns]
    blank = (table == "").all(axis=1)
    return table[~blank]


def _read_table_by_line(path: Path, compression: str | None, strict: bool, report: LoadReport) -> pd.DataFrame:
    """The slow path for files with ragged lines: find and drop each bad line."""
    if compression == "gzip":
        import gzip
        text = gzip.open(path, "rt", encoding="utf-8", newline="").read()
    else:
        text = Path(path).read_text(encoding="utf-8")
    reader = csv.reader(io.StringIO(text), skipinitialspace=True)
    header = next(reader)
    rows, lines = [], []
    for row in reader:
        line = reader.line_num
        if not row or all(not f.strip() for f in row):
            continue
        if len(row) != len(header):
            problem = f"expected {len(header)} fields, found {len(row)}"
            if strict:
                raise TraceFormatError(f"{path}, line {line}: {problem}")
            report.add_problem(f"{path}, line {line}", problem)
            continue
        rows.append(row)
        lines.append(line)
    return pd.DataFrame(rows, columns=header, index=lines, dtype=str)
