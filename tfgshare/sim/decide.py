"""The policy's round in the simulator: the job views it reads, its call, and the
one check of what it returns (``policies.validate.check_actions``, as the live
coordinator applies it) before the engine carries the actions out.
"""

from __future__ import annotations

import heapq
import math
import time
from typing import TYPE_CHECKING, Sequence

from tfgshare.policies.base import Action, JobView
from tfgshare.policies.movecost import move_cost_s
from tfgshare.policies.placement import GpuUse
from tfgshare.policies.prediction import predict_remaining_s, view_refresh_s
from tfgshare.policies.stale import drop_stale
from tfgshare.policies.validate import Occupancy, check_actions, touched_gpus

from .invariants import check_invariants
from .job import SimJob, SimulationError

if TYPE_CHECKING:
    from .engine import Simulator

EPS = 1e-9

# Policies that read no running job's progress (``Policy.reads_progress`` False) but
# whose figures, as published, depend on its reports all the same: sjf's sampled step
# times draw noise from the stream the reports draw from, and gandiva's shared GPUs
# change a job's rate mid-run, so when its steps are summed shows in the last digits.
# Their running jobs keep reporting (settled, measured, the next report queued); only
# the view is not rebuilt. fifo and tiresias need no reports at all.
REPORTS_KEPT = frozenset({"sjf", "gandiva"})


def report_progress(sim: "Simulator", job: SimJob) -> float | None:
    """A running job's progress report: its steps brought up to now, its step time
    measured (with noise) and, once it is past its start, the cost of that start; the
    next report queued when the run keeps reports (``Simulator.refreshes``). Its
    predicted time left."""
    job.view_version += 1
    cfg = sim.config
    sim.settle(job)
    # what the job reports: its current step time, measured (with noise), and
    # the measured cost of its start once it is past it; never the true values
    if sim.now >= job.stall_until:
        sim.measure_start(job)
        job.measured_step_s = sim.noisy(sim.step_s(job))
        restarts = 0
    else:
        restarts = 1   # still starting: as if waiting to start
    left = None if job.measured_step_s is None else predict_remaining_s(
        job.total_steps - job.steps, job.measured_step_s, restarts,
        job.restart_s or 0.0)
    if sim.refreshes:
        due = sim.now + view_refresh_s(left, cfg.refresh_s, cfg.refresh_share)
        sim.seq += 1
        heapq.heappush(sim.refresh, (due, sim.seq, job, job.view_version))
        drop_stale(sim.refresh, len(sim.live), lambda e: e[3] == e[2].view_version
                   and not e[2].state.done)
    return left


def job_view(sim: "Simulator", job: SimJob) -> JobView:
    """The policy's view of a job, its progress brought up to now."""
    holds = job.state.holds_gpu
    if holds:
        # running jobs report progress: their view is rebuilt when it is due, if the
        # policy reads it
        left = report_progress(sim, job)
        attained = job.run_until(sim.now) * job.num_gpus
    else:
        step = job.measured_step_s
        left = None if step is None else predict_remaining_s(
            job.total_steps - job.steps, step, 1, job.restart_s or 0.0)
        attained = job.run_time_s * job.num_gpus
    return JobView(
        id=job.id, submit_time=job.submit_time, num_gpus=job.num_gpus, state=job.state,
        model=job.model, total_steps=job.total_steps, steps_done=int(job.steps + EPS),
        sample=job.sample, predicted_remaining_s=left, fragments=job.fragments,
        attained_service_s=attained, attained_at=sim.now if holds else None,
        last_start=job.last_start, waited_s=job.waited_s,
        last_wait_start=job.last_wait_start, suspends=job.suspends,
        min_memory_mb=job.min_memory_mb, move_cost_s=move_cost_s(job.restart_s, job.save_s),
        requested_fraction=job.requested_fraction, gpu_types=job.gpu_types)

def decide(sim: "Simulator") -> bool:
    """Ask the policy once, with the views brought up to date; check and carry out what
    it returns. Whether it returned any action."""
    now = sim.now
    refresh = sim.refresh
    rebuild = sim.policy.reads_progress
    due = []
    while refresh and refresh[0][0] <= now:
        _, _, job, version = heapq.heappop(refresh)
        if version == job.view_version and job.state.holds_gpu:
            if rebuild:
                sim.dirty[job] = None
            else:
                due.append(job)
    views = sim.views
    if sim.dirty:
        for job in sim.dirty:
            views.put(job_view(sim, job))
    for job in due:   # measured as the views were, after them; no view rebuilt
        if job not in sim.dirty:
            report_progress(sim, job)
    sim.dirty.clear()
    t0 = time.perf_counter()
    if sim.memo is not None:
        actions = sim.policy.decide(now, sim.snapshot, views, sim.memo)
    else:
        actions = sim.policy.decide(now, sim.snapshot, list(views))
    sim.decide_s.append(time.perf_counter() - t0)
    views.trim()   # the memo has read the changes
    if sim.memo is not None and not sim.tick_s:
        w = sim.policy.wake_at(now, sim.memo)
        sim.wake = math.inf if w is None else max(w, now + 1e-6)
    if not actions:
        return False
    # the one check the coordinator also applies; room a suspend or migration in
    # the list frees counts as free, as it frees at once here
    checked = check_actions(actions, sim.snapshot, views, occupancy(sim, actions))
    if checked.refused:
        raise SimulationError(f"policy {sim.policy.name!r} at t={now:.1f}: "
                              + "; ".join(text for _, _, text in checked.refused))
    sim.apply(actions)
    if sim.config.check:
        check_invariants(sim)
    return True

def occupancy(sim: "Simulator", actions: Sequence[Action]) -> Occupancy:
    """What the GPUs these actions place on hold now (the check's data)."""
    held = {}
    for g in touched_gpus(actions):
        u = held[g] = GpuUse()
        for j in sim.tenants.get(g, ()):
            for f in j.fragments:
                if f.gpu == g:
                    u.used += f.fraction
                    u.tenants += 1
    return Occupancy(held)
