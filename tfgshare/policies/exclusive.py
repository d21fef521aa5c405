"""Helpers for the policies that give every job whole GPUs (fifo, sjf, tiresias)."""

from __future__ import annotations

from .base import ClusterSnapshot, JobView, Start
from .placement import FreeMap, Need, exclusive_fraction, to_fragments


def whole_gpu(cluster: ClusterSnapshot) -> Need:
    """The need of an exclusive job on a GPU: all of it less the context reserve."""
    reserve = cluster.reserve_mb
    return lambda g: exclusive_fraction(g, reserve)


def start_exclusive(free: FreeMap, job: JobView, need: Need,
                    sample_only: bool = False) -> Start | None:
    """Place ``job`` on ``num_gpus`` empty GPUs (one node if possible) and record it."""
    placed = free.gang_place(job.num_gpus, need)
    if placed is None:
        return None
    free.take(placed)
    return Start(job.id, to_fragments(placed), sample_only)
