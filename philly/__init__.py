"""Philly trace loading and mapping to tfgshare jobs.

Public entry points: :func:`load_trace` (any supported trace file into
:class:`TraceJob` lists) and :func:`load_machine_list` (Philly's servers).
Filters and scaling live in :mod:`philly.filters`, model mapping in
:mod:`philly.mapping`.
"""

from philly.jobs import TraceJob
from philly.machines import Machine, load_machine_list, vc_sizes
from philly.report import LoadReport, TraceFormatError
from philly.trace import load_trace

__all__ = ["LoadReport", "Machine", "TraceFormatError", "TraceJob", "load_machine_list",
           "load_trace", "vc_sizes"]
