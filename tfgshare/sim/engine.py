"""The discrete-event simulator: replays jobs on a cluster under one policy.

Time jumps from event to event (arrivals, runs reaching their target step, start-up
stalls ending, and a periodic tick while jobs wait; with no tick, ``tick_s=None``, the
policy's own timed events from ``wake_at`` instead, such as the moment a waiting fgs job
passes its bound and is promoted, or a running job passes its minimum run while others
wait). All events at one timestamp are handled together, then the policy is asked once
for actions, given only the live jobs. A job's training progresses at ``1 / step_time``
steps per second where ``step_time`` is its profile's step time x the co-location
slowdown on its most loaded GPU / that GPU's speed (x a penalty if its GPUs span nodes).
Each action list passes the check the live coordinator applies too
(``policies.validate``; ``decide``), then is carried out:

* ``Start`` on a QUEUED job pays the model's start-up time; on a SAMPLED or
  SUSPENDED job also a checkpoint restore. ``sample_only`` runs the sampling
  phase (real steps that count), saves a checkpoint and returns the job as
  SAMPLED with a noisy ``SampleRecord`` measured under its co-tenancy.
* ``Suspend`` keeps every step done, frees the fragments at once, and the
  checkpoint save keeps those GPUs busy for ``save`` seconds: whoever starts
  there next waits for it, and so does the job's own resume.
* ``Migrate`` is a suspend plus a start on the new fragments.
* A fragment smaller than the job's true memory fails the start (TF runs out of
  memory): the job stays waiting, now with its true peak memory in its sample.

Deterministic for a seed: the only randomness is the measurement noise.
"""

from __future__ import annotations

import gc
import heapq
import math
import random
import time
from array import array
from typing import Callable, Iterable, Sequence

from tfgshare.metrics import JobRecord, Timeline, compute_report, held_share, kernel_share
from tfgshare.policies.base import (ClusterSnapshot, Fragment, JobState, Migrate, Policy,
                                    SampleRecord, Start, Suspend, Tick)
from tfgshare.policies.jobset import JobSet
from tfgshare.policies.prediction import ColocationForecast, predict_remaining_s, solo_step_s
from tfgshare.policies.queueing import WAITING
from tfgshare.policies.stale import drop_stale

from .cluster import SimCluster
from .config import SimConfig
from .costs import AttemptCosts
from .decide import REPORTS_KEPT, decide
from .forecast import forecast_step_s, sharing_beside
from .job import SimJob, SimResult, SimulationError, admit
from .live_window import LiveWindow
from .profiles import Profiles

END, READY = 0, 1          # event kinds: a run reaches its target; a start-up stall ends
EPS = 1e-9
UNSAMPLED = (JobState.QUEUED, JobState.SAMPLING)   # jobs still to sample
OOM_OVERSHOOT = 0.02   # a job that runs out of memory is measured this far past its fragment


class Simulator:
    """One run of a policy over jobs on a cluster (see the module doc)."""

    def __init__(self, cluster: SimCluster, jobs: Iterable, profiles: Profiles, policy: Policy,
                 config: SimConfig | None = None,
                 progress: Callable[[int, int], None] | None = None):
        self.cluster = cluster
        self.policy = policy
        self.config = config or SimConfig()
        self.progress = progress
        self.colo = self.config.colocation
        self.snapshot = ClusterSnapshot(cluster.gpus, cluster.reserve_mb)
        self.gpu_mem = {g.id: g.memory_mb for g in cluster.gpus}
        self.gpu_node = {g.id: g.node for g in cluster.gpus}
        self.reserve_frac = {g.id: cluster.reserve_mb / g.memory_mb for g in cluster.gpus}
        self.speed = {g.id: cluster.speed.get(g.id, 1.0) for g in cluster.gpus}
        self.tenants: dict[str, list[SimJob]] = {}
        self.util_sum: dict[str, float] = {}
        self.eff: dict[str, float] = {}
        self.busy_until: dict[str, float] = {}
        self.jobs = admit(jobs, profiles, cluster)
        self.rng = random.Random(self.config.seed)
        self.tick_s = self.config.tick_s if policy.tick_s is Tick.CALLER else policy.tick_s
        self.acts_when_idle = policy.acts_when_idle
        self.refreshes = policy.reads_progress or policy.name in REPORTS_KEPT
        self.sample_steps = int(policy.sample_steps or self.config.sample_steps)
        self.costs = AttemptCosts(self.config, self.sample_steps)
        # measured sharing factors and sampling runs, for sampled jobs' predictions
        self.forecast = ColocationForecast()
        self.unsampled = 0            # arrived jobs queued or sampling

    # ---- the loop ----------------------------------------------------------

    def run(self) -> SimResult:
        """Replay every job to its end; returns the report and raw data.

        The run's long-lived objects are frozen out of the cyclic garbage
        collector and collections made rarer while it runs (they otherwise
        rescan every job at each full collection); both are restored after.
        """
        thresholds = gc.get_threshold()
        gc.freeze()
        gc.set_threshold(50_000, 20, 100)
        try:
            return self._run()
        finally:
            gc.set_threshold(*thresholds)
            gc.unfreeze()

    def _run(self) -> SimResult:
        wall0 = time.perf_counter()
        jobs, n = self.jobs, len(self.jobs)
        self.live: dict[str, SimJob] = {}
        self.window = LiveWindow(n)             # what the forecast reads of the oldest live jobs
        self.views = JobSet()                   # the policy's view of each live job
        self.memo = self.policy.new_memo()      # the policy's (None: it keeps none), ours to keep
        self.dirty: dict[SimJob, None] = {}     # live jobs whose view is out of date (ordered)
        self.heap: list = []                    # events (a heap)
        self.refresh: list = []                 # running jobs' next progress reports (a heap)
        self.seq = 0
        self.n_waiting = 0
        self.n_holding = 0
        self.alloc = 0.0
        self.eff_total = 0.0
        self.records: list[JobRecord] = []
        self.timeline = Timeline()
        self.decide_s = array("d")
        self.oom_starts = 0
        self.now = 0.0
        rounds = 0
        i = 0
        next_tick = math.inf
        self.wake = math.inf   # when the policy asked to decide again (its timed events)
        heap = self.heap
        while True:
            t_arr = jobs[i].submit_time if i < n else math.inf
            t_ev = heap[0][0] if heap else math.inf
            t_tick = next_tick if self.n_waiting else math.inf
            t = min(t_arr, t_ev, t_tick, self.wake)
            if t == math.inf:
                break
            self.now = t
            changed = t >= t_tick
            woke = t >= self.wake   # the policy asked for this time: ask it even if none waits
            if woke:
                self.wake = math.inf
                changed = True
            while i < n and jobs[i].submit_time <= t:
                i += 1
                self._arrive(jobs[i - 1], i)
                changed = True
            while heap and heap[0][0] <= t:
                _, _, kind, job, tag = heapq.heappop(heap)
                if kind == END:
                    if tag == job.version:
                        self._run_ended(job)
                        changed = True
                elif job.fragments and tag == job.stall_until:
                    job.end_move(t)          # it trains again: a resume or migration ends
                    self._set_contrib([job])
            if changed and (self.n_waiting or self.acts_when_idle or woke):
                rounds += 1
                acted = decide(self)
                if self.tick_s:
                    next_tick = t + self.tick_s
                if not acted and self.n_holding == 0 and i == n and self.n_waiting:
                    stuck = [j.id for j in self.live.values() if j.state.waiting][:5]
                    raise SimulationError(
                        f"policy {self.policy.name!r} starts none of {self.n_waiting} waiting "
                        f"job(s) (e.g. {', '.join(stuck)}) on an idle cluster with no arrivals "
                        "left; the run cannot finish")
            # the simulator's device utilisation is its kernel share: the effective figure
            self.timeline.add(t, self.alloc, self.eff_total, self.n_waiting, self.eff_total,
                              len(self.tenants))
        report = compute_report(self.records, self.timeline, self.cluster.num_gpus)
        return SimResult(self.policy.name, report, self.records, self.timeline, self.decide_s,
                         time.perf_counter() - wall0, rounds, self.oom_starts, self.tick_s)

    def _push(self, t: float, kind: int, job: SimJob) -> None:
        # END is current while the job's version is unchanged; every READY is kept (few)
        self.seq += 1
        tag = job.version if kind == END else job.stall_until
        heapq.heappush(self.heap, (t, self.seq, kind, job, tag))
        drop_stale(self.heap, 2 * len(self.live), lambda e: e[2] != END or e[4] == e[3].version)

    # ---- events ------------------------------------------------------------

    def _arrive(self, job: SimJob, position: int) -> None:
        job.begin_wait(job.submit_time)
        self.unsampled += 1   # it is QUEUED
        self.live[job.id] = job
        job.position = position
        self.window.join(position)
        self.dirty[job] = None
        self.n_waiting += 1

    def _run_ended(self, job: SimJob) -> None:
        now = self.now
        job.steps = job.target
        job.t_prog = now
        if job.steps >= job.total_steps:
            self._release(job)
            self._set_state(job, JobState.FINISHED)
            del self.live[job.id]
            self.window.leave(job.position)
            job.end(now)
            self.records.append(JobRecord.of(job.id, job.num_gpus, job, now))
            self.views.drop(job.id)
            self.dirty.pop(job, None)
            if self.progress is not None:
                self.progress(len(self.records), len(self.jobs))
            return
        # sampling over: measure, predict (at its last sampled step, before its checkpoint), wait
        cfg = self.config
        measured = self.noisy(self.step_s(job))
        peak = job.prof.memory_mb * (1.0 + abs(self.rng.gauss(0.0, cfg.memory_noise)))
        self.measure_start(job)
        # how much the running jobs beside it were slowed meanwhile, as they report
        sharing = sharing_beside(self, job)
        self.forecast.note_sharing(sharing)
        self.forecast.note_sampling(now - job.last_start if job.last_start is not None else 0.0)
        job.solo_step_s = solo_step_s(measured, sharing)
        self._release(job)
        co = max(len(self.tenants.get(f.gpu, ())) for f in job.fragments) if job.fragments else 0
        job.sample = SampleRecord(measured, peak, job.prof.gpu_util, co)
        self.forecast.note_util(job.sample.gpu_util)
        job.measured_step_s = measured
        if job.target < job.total_steps:   # its sampling run ended with a checkpoint (tail_s)
            job.save_s = self.costs.checkpoint_s(job.prof)   # as timed by the runner: exact
        job.has_checkpoint = True
        job.ready_at = now
        job.fragments = ()
        self._to_waiting(job, JobState.SAMPLED)
        # the live coordinator's prediction once the sampling run has exited (checkpoint saved):
        # the start it still needs, then its steps alone at the co-location it is expected to see
        restart = self.forecast.restart_s(job.model, job.restart_s or 0.0)   # a resume next
        job.measured_step_s = forecast_step_s(self, job, restart)
        self._note_window(job)
        job.note_prediction(predict_remaining_s(job.total_steps - job.steps,
                                                job.measured_step_s, 1, restart), now)

    def _set_state(self, job: SimJob, state: JobState) -> None:
        """Change its state, counting the jobs not yet sampled (queued or sampling)."""
        self.unsampled += (state in UNSAMPLED) - (job.state in UNSAMPLED)
        job.state = state
        self._note_window(job)

    def _note_window(self, job: SimJob) -> None:
        """Tell the live window what ``job`` contributes now (as ``forecast`` reads it)."""
        if job.position:
            waiting = job.sample is not None and job.state in WAITING
            step = job.measured_step_s
            self.window.note(job.position, waiting, None if step is None else
                             max(0.0, job.total_steps - job.steps) * step)

    def _to_waiting(self, job: SimJob, state: JobState) -> None:
        self._set_state(job, state)
        if job.last_wait_start is None:   # a start that failed keeps its wait going
            job.begin_wait(self.now)
        self.dirty[job] = None
        self.n_waiting += 1

    # ---- GPU occupancy -----------------------------------------------------

    def noisy(self, value: float) -> float:
        """A measurement of ``value`` with the configured relative noise."""
        return value * max(0.5, 1.0 + self.rng.gauss(0.0, self.config.step_noise))

    def measure_start(self, job: SimJob) -> None:
        """Measure what the job's current start cost, once (as the live coordinator does)."""
        if not job.start_measured:
            job.restart_s = self.noisy(job.start_cost_s)
            job.start_measured = True
            if job.restoring:   # the cost of a resume, for sampled jobs' predictions
                self.forecast.note_resume(job.model, job.restart_s)

    def step_s(self, job: SimJob) -> float:
        """The job's true step time now: its profile's, slowed by its co-tenants, on its
        slowest GPU, and by a span over nodes."""
        if len(job.fragments) == 1:   # most jobs: the one GPU's speed, no span
            return job.prof.step_time_s * job.slow / self.speed[job.fragments[0].gpu]
        speed = min(self.speed[f.gpu] for f in job.fragments) if job.fragments else 1.0
        return job.prof.step_time_s * job.slow / speed * self._span_factor(job)

    def _span_factor(self, job: SimJob) -> float:
        if len(job.fragments) > 1 and len({self.gpu_node[f.gpu] for f in job.fragments}) > 1:
            return 1.0 + self.config.cross_node_slowdown
        return 1.0

    def settle(self, job: SimJob) -> None:
        """Bring ``job.steps`` up to now at its current rate."""
        now = self.now
        start = job.t_prog if job.t_prog > job.stall_until else job.stall_until
        if now > start and job.rate > 0:
            job.steps = min(job.target, job.steps + (now - start) * job.rate)
        job.t_prog = now

    def _place(self, job: SimJob, fragments: tuple[Fragment, ...]) -> None:
        job.fragments = fragments
        util = job.prof.gpu_util
        for f in fragments:
            g = f.gpu
            self.tenants.setdefault(g, []).append(job)
            self.util_sum[g] = self.util_sum.get(g, 0.0) + util
            self.alloc += held_share(f.fraction, self.cluster.reserve_mb, self.gpu_mem[g])
        self.n_holding += 1
        self._rerate_gpus([f.gpu for f in fragments])

    def _release(self, job: SimJob) -> None:
        gpus = [f.gpu for f in job.fragments]
        util = job.prof.gpu_util
        for f in job.fragments:
            g = f.gpu
            ts = self.tenants[g]
            ts.remove(job)
            self.alloc -= held_share(f.fraction, self.cluster.reserve_mb, self.gpu_mem[g])
            if ts:
                self.util_sum[g] -= util
            else:
                del self.tenants[g]
                del self.util_sum[g]
        job.end_hold(self.now)
        job.version += 1
        job.rate = 0.0
        job.speed = 0.0
        self.n_holding -= 1
        if not self.tenants:
            self.alloc = 0.0   # no drift from float sums when the cluster empties
        self._rerate_gpus(gpus)

    def _rerate_gpus(self, gpus: Sequence[str]) -> None:
        """Recompute the speed of every job on these GPUs and reschedule its end."""
        affected: dict[str, SimJob] = {}
        for g in gpus:
            for j in self.tenants.get(g, ()):
                affected[j.id] = j
        for j in affected.values():
            self._rerate(j)
        self._set_contrib(affected.values(), extra_gpus=gpus)

    def _rerate(self, job: SimJob) -> None:
        self.settle(job)
        worst = 1.0
        for f in job.fragments:
            g = f.gpu
            s = self.colo.slowdown(len(self.tenants[g]), self.util_sum[g]) / self.speed[g]
            if s > worst:
                worst = s
        if self.config.startup_on_device and job.stall_work > 0:
            self._slow_startup(job, worst)
        job.slow = worst
        job.rate = 1.0 / (job.prof.step_time_s * worst * self._span_factor(job))
        job.version += 1
        self.dirty[job] = None
        if job.steps >= job.target and job.end_at > self.now:
            end = job.end_at   # only the closing checkpoint is left: its time is unchanged
        else:
            begin = self.now if self.now > job.stall_until else job.stall_until
            end = begin + (job.target - job.steps) / job.rate + job.tail_s
        job.end_at = end
        self._push(end, END, job)

    def _slow_startup(self, job: SimJob, slow: float) -> None:
        """A start-up that computes on its device (``startup_on_device``) runs at the
        co-location speed its steps would: count what it did at its old slowdown, and
        move its end to finish the rest at ``slow``."""
        now = self.now
        if now >= job.stall_until:
            job.stall_work = 0.0
            return
        if now > job.stall_from:
            job.stall_work = max(0.0, job.stall_work - (now - job.stall_from) / job.slow)
            job.stall_from = now
        until = job.stall_from + job.stall_work * slow
        if until != job.stall_until:
            job.start_cost_s += until - job.stall_until
            job.stall_until = until
            self._push(until, READY, job)

    def _set_contrib(self, jobs: Iterable[SimJob], extra_gpus: Sequence[str] = ()) -> None:
        """Update the useful utilisation of these jobs and of the GPUs they touch."""
        touched = dict.fromkeys(extra_gpus)   # in order: eff_total sums alike in every run
        for j in jobs:
            if j.fragments and self.now >= j.stall_until:
                j.speed = 1.0 / (j.slow * self._span_factor(j))
            else:
                j.speed = 0.0
            touched.update(dict.fromkeys(f.gpu for f in j.fragments))
        for g in touched:
            new = kernel_share([(j.prof.gpu_util, j.speed) for j in self.tenants.get(g, ())])
            self.eff_total += new - self.eff.get(g, 0.0)
            if new:
                self.eff[g] = new
            else:
                self.eff.pop(g, None)
        if not self.eff:
            self.eff_total = 0.0

    # ---- the policy's actions (its round: ``decide.decide``) -----------------

    def apply(self, actions) -> None:
        """Carry out checked actions; suspends and migrations free their GPUs first."""
        live = self.live
        for a in actions:
            if isinstance(a, (Suspend, Migrate)):
                job = live[a.job]
                self._checkpoint_out(job, suspend=isinstance(a, Suspend))
                if isinstance(a, Suspend):
                    job.suspends += 1
                    job.fragments = ()
                    self._to_waiting(job, JobState.SUSPENDED)
        for a in actions:
            if isinstance(a, Start):
                self._start(live[a.job], a.fragments, a.sample_only)
            elif isinstance(a, Migrate):
                job = live[a.job]
                job.migrations += 1
                job.fragments = ()
                self._start(job, a.fragments, False, migrating=True)

    def _checkpoint_out(self, job: SimJob, suspend: bool) -> None:
        """Save a running job's checkpoint and free its GPUs (they stay busy while saving).

        The move starts now: a suspend's ends when the save is done; a
        migration's when the job trains again on its new fragments.
        """
        self.settle(job)
        save = self.costs.checkpoint_s(job.prof)
        job.save_s = save
        done = self.now + save
        for f in job.fragments:
            if self.busy_until.get(f.gpu, 0.0) < done:
                self.busy_until[f.gpu] = done
        self._release(job)
        job.ready_at = done
        job.has_checkpoint = True
        job.begin_move(self.now)
        if suspend:
            job.end_move(done)
        self.dirty[job] = None

    def _start(self, job: SimJob, fragments: tuple[Fragment, ...], sample_only: bool,
               migrating: bool = False) -> None:
        now = self.now
        prof = job.prof
        startup, restore = self.costs.start_s(job)
        resuming = False
        if not migrating:
            if job.state is JobState.SUSPENDED:
                job.resumes += 1
                resuming = True
            self.n_waiting -= 1
        if any(f.fraction * self.gpu_mem[f.gpu] < prof.memory_mb - EPS for f in fragments):
            # out of memory at start-up. As on the live cluster, the job learns only
            # the peak it reached, its fragment (a little past it, as the agent reads
            # resident memory), and its next fragment is sized from that plus headroom
            self.oom_starts += 1
            job.oom_starts += 1
            reached = min(f.fraction * self.gpu_mem[f.gpu] for f in fragments)
            job.min_memory_mb = max(job.min_memory_mb, reached * (1.0 + OOM_OVERSHOOT))
            state = job.state if not migrating else JobState.SUSPENDED
            job.end_move(now)
            self._to_waiting(job, state if state.waiting else JobState.SUSPENDED)
            return
        wait_save = max([job.ready_at - now] + [self.busy_until.get(f.gpu, 0.0) - now
                                                for f in fragments])
        job.stall_until = now + max(0.0, wait_save) + startup + restore
        if self.config.startup_on_device:   # slowed by its co-tenants from its placement
            job.stall_work = startup + restore
            job.stall_from = job.stall_until - job.stall_work
        job.start_cost_s = job.stall_until - now
        job.start_measured = False
        job.restoring = job.has_checkpoint
        job.t_prog = now
        if sample_only:
            length = self.costs.sample_length(job)
            job.target = min(float(job.total_steps), job.steps + length)
            job.tail_s = (self.costs.checkpoint_s(prof) if job.target < job.total_steps
                          or self.config.runner_checkpoints else 0.0)
            self._set_state(job, JobState.SAMPLING)
        else:
            job.target = float(job.total_steps)
            job.tail_s = self.costs.runner_saves_s(job, prof)
            self._set_state(job, JobState.RUNNING)
        job.begin_hold(now)
        if resuming:
            job.begin_move(now)
        if job.stall_until <= now:
            job.end_move(now)
        self.dirty[job] = None
        self._place(job, fragments)
        if job.stall_until > now:
            self._push(job.stall_until, READY, job)

def simulate(cluster: SimCluster, jobs: Iterable, profiles: Profiles, policy: Policy,
             config: SimConfig | None = None,
             progress: Callable[[int, int], None] | None = None) -> SimResult:
    """Run ``policy`` over ``jobs`` on ``cluster`` and return the result."""
    return Simulator(cluster, jobs, profiles, policy, config, progress).run()
