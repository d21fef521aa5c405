"""The live coordinator's predictions made in the simulator: the one forecast
(``tfgshare.policies.forecast``) fed the simulator's noisy measurements of a job and
of the jobs beside it, never the true step times.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tfgshare.policies import forecast as one
from tfgshare.policies.prediction import AHEAD_SCAN

from .decide import job_view
from .job import SimJob

if TYPE_CHECKING:
    from .engine import Simulator


def sharing_beside(sim: "Simulator", job: SimJob) -> float | None:
    """The running jobs beside ``job``: their reported step time (once past their
    start) over their step time alone, the mean (None when none runs beside it)."""
    return one.sharing_beside(job, lambda gpu: sim.tenants.get(gpu, ()), lambda other: (
        sim.noisy(sim.step_s(other)) if sim.now >= other.stall_until else None))


def run_left_s(job: SimJob) -> float | None:
    """Its steps left at its measured step time (None before one is measured)."""
    step = job.measured_step_s
    return None if step is None else (job.total_steps - job.steps) * step


def forecast_step_s(sim: "Simulator", job: SimJob, restart: float) -> float | None:
    """The step time a just-sampled job is expected to run at, sharing included, after
    a start costing ``restart`` (``policies.forecast.forecast_step_s``, the jobs
    waiting read from the live window; its measured step before it has a sample)."""
    waiting, measured, runs_s = sim.window.read(AHEAD_SCAN, job.position)
    node_units = 1
    if sim.forecast.spill and job.fragments:   # never measured here: no spare runners
        node = next(g.node for g in sim.cluster.gpus if g.id == job.fragments[0].gpu)
        node_units = sum(1 for g in sim.cluster.gpus if g.node == node)
    found = one.forecast_step_s(sim.forecast, sim.policy, job, job_view(sim, job),
                                job.total_steps - job.steps, restart, sim.now,
                                jobs=sim.live.values(), left_s=run_left_s,
                                unsampled=sim.unsampled, gpus=sim.cluster.num_gpus,
                                waiting=waiting + sim.unsampled,
                                mean_run_s=runs_s / measured if measured else None,
                                node_units=node_units)
    return job.measured_step_s if found is None else found.step_s
