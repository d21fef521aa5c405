"""Tables that fit the terminal: columns dropped by priority, as ``kubectl get`` does,
and a legend line saying what each abbreviation means.

Plain text only (no rich), so the simulator's report, the coordinator's report
and the client's tables share one rule: a table is at most ``width`` columns
wide (the terminal's width, 100 when the output is not a terminal), the
least useful columns go first, and the legend names what was left out.
"""

from __future__ import annotations

import shutil
import textwrap
from typing import Sequence

DEFAULT_WIDTH = 100   # when the output is a pipe or a file
SEP = "  "
NBSP = "\u00a0"


def terminal_width(default: int = DEFAULT_WIDTH) -> int:
    """The terminal's width in columns ($COLUMNS first); ``default`` when not a terminal."""
    return shutil.get_terminal_size((default, 24)).columns


def table_width(widths: Sequence[int], sep: str = SEP) -> int:
    """The width of a table whose columns are ``widths`` wide, separated by ``sep``."""
    return sum(widths) + len(sep) * max(0, len(widths) - 1)


def fit_columns(headers: Sequence[str], widths: Sequence[int], width: int | None,
                drop: Sequence[str], sep: str = SEP) -> list[str]:
    """The headers kept so that the table fits ``width`` (None: all): the columns in
    ``drop`` go first to last until it fits; the others always stay."""
    kept = list(headers)
    size = dict(zip(headers, widths))
    for name in drop:
        if width is None or table_width([size[h] for h in kept], sep) <= width:
            break
        if name in kept:
            kept.remove(name)
    return kept


def plain_table(headers: Sequence[str], rows: Sequence[Sequence[str]], width: int | None,
                drop: Sequence[str] = (), left: Sequence[str] = (), rule: bool = True
                ) -> tuple[list[str], list[str]]:
    """``rows`` under ``headers`` as aligned text lines (columns in ``left`` left-aligned,
    the others right-aligned), fit to ``width``; and the headers dropped to fit."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    kept = fit_columns(headers, widths, width, drop)
    idx = [headers.index(h) for h in kept]
    lines = []
    for row in [list(headers), *rows]:
        cells = [row[i].ljust(widths[i]) if headers[i] in left else row[i].rjust(widths[i])
                 for i in idx]
        lines.append(SEP.join(cells).rstrip())
    if rule:
        lines.insert(1, SEP.join("-" * widths[i] for i in idx))
    return lines, [h for h in drop if h in headers and h not in kept]   # in the order dropped


def legend(entries: Sequence[tuple[str, str]], shown: Sequence[str], width: int | None,
           hidden: Sequence[str] = (), wide_hint: str = "--wide shows them",
           lead: str = "") -> list[str]:
    """A legend wrapped to ``width``: ``NAME: meaning`` for each entry whose name is in
    ``shown`` (an entry named "" always shows), then which columns were hidden to fit."""
    parts = [f"{name.replace(' ', NBSP)}: {text}" if name else text
             for name, text in entries if not name or name in shown]
    text = lead + "; ".join(parts)
    if hidden:
        text += (f". Hidden to fit {width} columns: {', '.join(hidden)}"
                 + (f" ({wide_hint})" if wide_hint else ""))
    return [line.replace(NBSP, " ")   # a name with a space ("JCT /") is not broken
            for line in textwrap.wrap(text, width or DEFAULT_WIDTH, break_on_hyphens=False)]
