"""The live coordinator's predictions made in the simulator: from the simulator's
noisy measurements of a job and of the jobs beside it, with the coordinator's own
functions (``tfgshare.policies.prediction``), never from the true step times.
"""

from __future__ import annotations

from itertools import islice
from typing import TYPE_CHECKING

from tfgshare.policies.base import JobState
from tfgshare.policies.prediction import (AHEAD_SCAN, gpu_overhead, promotion_in,
                                          sharing_factor, work_ahead_s)

from .decide import job_view
from .job import SimJob

if TYPE_CHECKING:
    from .engine import Simulator


def sharing_beside(sim: "Simulator", job: SimJob) -> float | None:
    """The running jobs beside ``job`` reported step time over their step time alone
    (the mean; None when none runs beside it)."""
    found = []
    for f in job.fragments:
        for other in sim.tenants.get(f.gpu, ()):
            if other is not job and other.state is JobState.RUNNING \
                    and other.solo_step_s is not None and sim.now >= other.stall_until:
                found.append(sharing_factor(sim.noisy(sim.step_s(other)), other.solo_step_s))
    found = [x for x in found if x is not None]
    return sum(found) / len(found) if found else None

def forecast_step_s(sim: "Simulator", job: SimJob, restart: float) -> float:
    """The step time a just-sampled job is expected to run at, sharing included,
    after a start costing ``restart`` (as the live coordinator's ``_forecast_step_s``)."""
    solo = job.solo_step_s if job.solo_step_s is not None else job.measured_step_s
    steps = job.total_steps - job.steps
    if steps <= 0:
        return solo
    mine = (job.submit_time, job.id)

    def ahead(enough: float) -> float:   # once promoted: running jobs, longer waiting ones
        return work_ahead_s(
            ((j.total_steps - j.steps) * j.measured_step_s
             for j in islice(sim.live.values(), AHEAD_SCAN)
             if j is not job and j.measured_step_s is not None
             and j.state is not JobState.SAMPLING
             and (j.state.holds_gpu or (j.submit_time, j.id) < mine)), enough)

    # before a sharing is measured: a GPU time-shared with a sampling run, by the
    # policy's interference model (as the live coordinator on GPUs)
    prior = sim.forecast.prior(job.sample.gpu_util, 0.0, gpu_overhead(sim.policy))
    after = after_sampling(sim, job, steps * solo + restart)
    total = sim.forecast.remaining_s(steps, solo, restart, sim.unsampled,
                                      sim.cluster.num_gpus,
                                      promotion_in(sim.policy, job_view(sim, job), sim.now),
                                      ahead, prior, after)
    return max(0.0, total - restart) / steps


def after_sampling(sim: "Simulator", job: SimJob, run_s: float) -> float:
    """How much slower than alone ``job`` is expected to run once newcomers stop
    sampling (as the live coordinator's ``_after_sampling``): the jobs waiting and
    their predicted run times, the policy's packing, the GPUs."""
    waiting, measured, runs_s = sim.window.read(AHEAD_SCAN, job.position)
    waiting += sim.unsampled
    node_units = 1
    if sim.forecast.spill and job.fragments:   # never measured here: no spare runners
        node = next(g.node for g in sim.cluster.gpus if g.id == job.fragments[0].gpu)
        node_units = sum(1 for g in sim.cluster.gpus if g.node == node)
    return sim.forecast.after_sampling(job.sample.gpu_util if job.sample else 1.0, run_s,
                                       waiting, sim.cluster.num_gpus, node_units,
                                       runs_s / measured if measured else None, sim.policy,
                                       gpu_overhead(sim.policy))
