"""One job of a cluster trace, as the simulator and replay tools consume it."""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class TraceJob:
    """A trace job: when it arrived, how many GPUs it asked for, how long it ran.

    ``submit_time`` is in seconds since the trace's first submission (after any
    filters, re-based so that the first job is at 0). ``duration`` is the job's
    run time in seconds on the original cluster. ``model``, ``batch_size`` and
    ``total_steps`` are empty until a trace gives them or
    :func:`philly.mapping.assign_models` fills them in.
    """

    id: str
    submit_time: float
    num_gpus: int
    duration: float
    vc: str = ""
    model: str = ""
    batch_size: int = 0
    total_steps: int = 0
    # a GPU-sharing trace's request (Alibaba's gpu_milli): the share of one GPU a
    # single-GPU job asks for, in (0, 1]; None: whole GPUs
    gpu_fraction: float | None = None
    gpu_types: tuple[str, ...] = ()     # GPU types it may run on (empty: any)
    gpu_util: float | None = None       # its single-tenant utilisation, from the workload model
    memory_mb: float | None = None      # its peak memory per GPU, from the workload model

    def copy_with(self, **changes) -> "TraceJob":
        """This job with these fields changed (as ``dataclasses.replace``, at a fraction of
        its cost: a million-job trace is copied several times as it is loaded)."""
        unknown = changes.keys() - _FIELDS
        if unknown:
            raise TypeError(f"TraceJob has no field {', '.join(sorted(unknown))}")
        job = object.__new__(type(self))
        job.__dict__.update(self.__dict__, **changes)
        return job

    @property
    def gpu_time(self) -> float:
        """GPU-seconds the job used on the original cluster."""
        return self.duration * self.num_gpus


_FIELDS = frozenset(f.name for f in fields(TraceJob))
