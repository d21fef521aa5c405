"""Philly trace loading and mapping to tfgshare jobs.

Public entry points: :func:`load_trace` (any supported trace file into
:class:`TraceJob` lists), :func:`load_machine_list` (Philly's servers).
Filters live in :mod:`philly.filters`, model mapping in :mod:`philly.mapping`.
"""

from philly.jobs import TraceJob
from philly.report import LoadReport, TraceFormatError
from philly.trace import load_trace

__all__ = ["LoadReport", "TraceFormatError", "TraceJob", "load_trace"]
