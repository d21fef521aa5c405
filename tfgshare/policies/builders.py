"""Short builders for hand-made clusters and jobs (tests, benchmarks, examples)."""

from __future__ import annotations

from .base import ClusterSnapshot, Fragment, GPU, JobState, JobView, SampleRecord
from .prediction import remaining_time_s


def make_cluster(nodes: int = 1, gpus_per_node: int = 4, memory_mb: int = 16000,
                 reserve_mb: float = 300.0, down: tuple[str, ...] = ()) -> ClusterSnapshot:
    """A cluster of identical nodes named n0, n1, ... with GPUs "n0:0", "n0:1", ..."""
    gpus = tuple(GPU(f"n{n}:{i}", f"n{n}", i, memory_mb)
                 for n in range(nodes) for i in range(gpus_per_node))
    return ClusterSnapshot(gpus, reserve_mb, frozenset(down))


def make_job(id: str, submit: float = 0.0, gpus: int = 1,
             state: JobState = JobState.QUEUED, *, on: dict[str, float] | None = None,
             memory_mb: float | None = None, step_time_s: float = 0.1,
             gpu_util: float = 1.0, total_steps: int = 1000, steps_done: int = 0,
             predicted_s: float | None = None, **fields) -> JobView:
    """A job; ``on`` maps GPU id -> fraction it holds, ``memory_mb`` gives it a sample."""
    sample = None
    if memory_mb is not None:
        sample = SampleRecord(step_time_s, memory_mb, gpu_util)
        if predicted_s is None:
            predicted_s = remaining_time_s(total_steps, steps_done, step_time_s)
    frags = tuple(Fragment(g, f) for g, f in (on or {}).items())
    if frags and state is JobState.QUEUED:
        state = JobState.RUNNING
    return JobView(id=id, submit_time=submit, num_gpus=gpus, state=state,
                   total_steps=total_steps, steps_done=steps_done, sample=sample,
                   predicted_remaining_s=predicted_s, fragments=frags, **fields)
