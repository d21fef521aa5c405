"""What a policy believes about a job's remaining run time and its wait so far."""

from __future__ import annotations

from typing import Callable, Iterable

from .base import JobView
from .interference import DEFAULT_OVERHEAD, room_for
from .queueing import HOLDING, WAITING


def remaining_time_s(total_steps: float, steps_done: float, step_time_s: float) -> float:
    """The sampling analysis's prediction: remaining steps x step time (never negative).

    The one formula the coordinator, the simulator and the policies use.
    """
    left = total_steps - steps_done
    return left * step_time_s if left > 0 else 0.0


# How often a running job's view follows its progress: every VIEW_REFRESH_S, or every
# VIEW_REFRESH_SHARE of its predicted remaining time when that is longer. The simulator's
# running jobs report so (``SimConfig.refresh_s``, ``refresh_share``) and the coordinator
# refreshes the policy's view of a job reporting progress so: each new view costs the
# policy's memo work, and a remaining time a few minutes old ranks and reserves as a fresh
# one would (an estimate: a job's steps are at most that stale, and its end is an event).
VIEW_REFRESH_S = 300.0
VIEW_REFRESH_SHARE = 0.10


def view_refresh_s(left_s: float | None, every_s: float = VIEW_REFRESH_S,
                   share: float = VIEW_REFRESH_SHARE) -> float:
    """Seconds after which a running job's view next follows its progress."""
    return max(every_s, share * (left_s or 0.0))


def predict_remaining_s(steps_left: float, step_time_s: float, restarts: int = 0,
                        restart_s: float = 0.0) -> float:
    """Run time a job still needs: its steps at the current measured step time, plus
    the measured cost of each restart still expected.

    ``step_time_s`` is the latest measured step time, so it carries the present
    co-location slowdown; ``restart_s`` is what its last start cost before its
    steps ran at speed (process start, graph build, restore); ``restarts`` is
    1 for a job that waits (it must start again) and 0 for one that runs. The
    live coordinator and the simulator both predict with this function, from
    measurements (the simulator's carry its measurement noise).
    """
    return max(0.0, steps_left) * max(0.0, step_time_s) + restarts * max(0.0, restart_s)


def remaining_s(job: JobView) -> float | None:
    """Predicted seconds left: the caller's refreshed figure, else from the sample, else None."""
    if job.predicted_remaining_s is not None:
        return job.predicted_remaining_s
    if job.sample is not None:
        return remaining_time_s(job.total_steps, job.steps_done, job.sample.step_time_s)
    return None


def current_wait_s(job: JobView, now: float) -> float:
    """How long a waiting job has waited since it last stopped running (or since submit)."""
    if job.state not in WAITING:
        return 0.0
    since = job.last_wait_start if job.last_wait_start is not None else job.submit_time
    return max(0.0, now - since)


def total_wait_s(job: JobView, now: float) -> float:
    """All the time the job has not run since submit, up to ``now``.

    ``waited_s`` is read as the waiting already closed (before the current
    wait began at ``last_wait_start``); the current wait is added to it. A job
    that never ran and has no ``last_wait_start`` has waited since submit.
    """
    if job.state in WAITING and job.last_wait_start is None and job.last_start is None:
        return max(0.0, now - job.submit_time)
    return job.waited_s + current_wait_s(job, now)


def run_s(job: JobView) -> float:
    """Seconds the job has run so far: attained GPU-seconds over its GPU count."""
    return job.attained_service_s / max(1, job.num_gpus)


def attained_now(job: JobView, now: float) -> float:
    """GPU-seconds received up to ``now``: a job holding GPUs gains ``num_gpus`` per second
    since its view measured ``attained_service_s`` (at ``attained_at``)."""
    if job.attained_at is not None and job.state in HOLDING and now > job.attained_at:
        return job.attained_service_s + (now - job.attained_at) * job.num_gpus
    return job.attained_service_s


# ---- the co-location a job will see: measured sharing and the sampling still to come ----

SHARING_KEPT = 8       # the latest sharing measurements averaged
SAMPLING_KEPT = 8      # the latest sampling-run durations averaged
OUTSIDE_KEPT = 8       # the latest measured slowdowns from outside the cluster averaged
STARTS_KEPT = 8        # the latest measured resumes (per model) averaged
SPILL_KEPT = 8         # the latest measured runnable-seconds per start averaged
START_TIMES_KEPT = 64  # the latest start times kept per node


def _latest(values: list[float], value: float, kept: int) -> list[float]:
    """``values`` with ``value`` added, the latest ``kept`` of them."""
    return (values + [value])[-kept:]


def _mean(values: list[float], default: float) -> float:
    """The mean of ``values``, or ``default`` when there are none."""
    return sum(values) / len(values) if values else default


def sharing_factor(shared_step_s: float, solo_step_s: float) -> float | None:
    """How much a running job was slowed beside a sampling run: its step time
    then over its step time alone (at least 1; None when either is unknown)."""
    if not (shared_step_s > 0 and solo_step_s > 0):
        return None
    return max(1.0, shared_step_s / solo_step_s)


def outside_slowdown(sampled_step_s: float, solo_step_s: float, cluster_runnable: float) -> float | None:
    """How much slower than alone a job on a virtual GPU runs with none of the
    cluster's processes beside it: the load from outside the cluster.

    Each process session gets a fair share of a core (Linux's scheduler), so a
    step sampled beside ``cluster_runnable`` of the cluster's own competitors
    per core (``runner.neighbours``: co-tenants, spare runners importing
    TensorFlow) and ``n`` from outside takes ``1 + cluster_runnable + n`` times
    its step alone; alone among the cluster's it takes ``1 + n``. At least 1;
    None when a step time is unknown.
    """
    if not (sampled_step_s > 0 and solo_step_s > 0):
        return None
    return max(1.0, sampled_step_s / solo_step_s - max(0.0, cluster_runnable))


def expected_sharing(own_util: float, newcomer_util: float, others: float = 0.0,
                     outside: float = 1.0, overhead: float = 0.0, tenants: float = 1.0) -> float:
    """The sharing factor a job running beside one sampling run on its GPU is
    expected to see before any was measured: its step time then over its step
    time alone, from the time-sharing of one compute unit (at least 1).

    Its compute unit (a GPU; on a virtual GPU the cores it is pinned to) is
    asked for the demands of the job (``own_util``, its single-tenant
    utilisation), of the sampling run beside it (``newcomer_util``), of the
    cluster's other processes on its cores (``others``: on virtual GPUs, the
    spare runners importing TensorFlow its own sample measured beside it; 0 on
    GPUs) and of the load from outside the cluster (``outside`` - 1); past one
    unit's worth it is time-shared, each process getting an equal turn
    (Linux's scheduler between process sessions: on one core two busy lenet or
    resnet runners each measured 2.0-2.1x slower, the CPU profile's pairs), and
    each tenant beyond the first costs ``overhead`` (the policy's interference
    model on GPUs; 0 on CPU cores). In the units of ``sharing_factor``, so a
    measured factor replaces it. ``tenants`` other jobs (1: the sampling run)
    ask ``newcomer_util`` each; 0 gives the job's factor with none beside it.
    """
    tenants = max(0.0, tenants)
    demand = (max(0.0, own_util) + tenants * max(0.0, newcomer_util) + max(0.0, others)
              + max(0.0, outside - 1.0))
    return max(1.0, demand) * (1.0 + max(0.0, overhead) * tenants)


def packed_tenants(own_util: float, newcomer_util: float, waiting: int, units: int,
                   policy: object) -> float:
    """How many jobs ``policy``'s packing is expected to put beside a job on its
    compute unit while it runs: newcomers of ``newcomer_util`` added while its
    rule admits one more (``max_cotenants`` in all, no tenant's predicted
    slowdown past ``slowdown_cap``: ``interference.room_for`` with its
    ``interference_overhead``), and no more than the ``waiting`` jobs spread
    over the ``units`` compute units. 0 for a policy without these settings
    (one job per GPU)."""
    most = getattr(policy, "max_cotenants", None)
    cap = getattr(policy, "slowdown_cap", None)
    if most is None or cap is None or waiting <= 0:
        return 0.0
    overhead = gpu_overhead(policy)
    n, total, need = 1, max(0.0, own_util), max(0.0, newcomer_util)
    while n < most and room_for(n, total, cap, overhead) >= need:
        n, total = n + 1, total + need
    return float(min(n - 1, waiting / max(1, units)))


def start_spill_s(beside: float | None, window_s: float, starts: int) -> float | None:
    """Runnable-seconds per core that each start on a node brings: the cluster's
    unpinned processes runnable on a sampling runner's cores (``beside``, per
    core: on virtual GPUs the spare runner that every start hands over and
    replaces, importing TensorFlow on any core) over the node's starts per
    second in its window (Little's law: runnable = starts per second x seconds
    each keeps one runnable). None when unknown (no window, no start, or not
    measured: GPUs, the simulator)."""
    if beside is None or window_s <= 0 or starts <= 0:
        return None
    return max(0.0, beside) * window_s / starts


def gpu_overhead(policy: object) -> float:
    """The cost of each extra tenant on a GPU: ``policy``'s interference model's
    (what it packs by), else the model's default."""
    return float(getattr(policy, "interference_overhead", DEFAULT_OVERHEAD))


def run_time_s(steps: float, solo_step_s: float, sharing: float, start_in_s: float,
               sampling_left_s: float, after: float = 1.0) -> float:
    """Seconds to run ``steps`` starting ``start_in_s`` from now, when newcomers keep
    sampling beside running jobs for the next ``sampling_left_s`` (each step then
    ``sharing`` x slower) and the job runs ``after`` x slower than alone after
    that (the co-location it is placed in, ``ColocationForecast.after_sampling``)."""
    steps = max(0.0, steps)
    solo = max(0.0, solo_step_s)
    later = solo * max(1.0, after)
    shared = max(0.0, sampling_left_s - max(0.0, start_in_s)) if sharing > 1.0 else 0.0
    slow = solo * max(sharing, after)
    if slow <= 0 or steps * slow <= shared:
        return steps * slow if slow > 0 else 0.0
    return shared + (steps - shared / slow) * later


class ColocationForecast:
    """What a just-sampled job will pay for sharing, from what was measured.

    Under fgs newcomers sample first: while some are left to sample, a sampled
    job waits, unless it waits past its promotion bound; a promoted job then
    runs beside the sampling runs, slower by the sharing factor, until no
    newcomer is left, and at its own speed after. This keeps the latest
    measured sharing factors (a running job's step time beside a sampling run
    over its step time alone) and sampling-run durations, and predicts a
    sampled job's remaining run time from its step time alone, the sampling
    still to come (jobs not yet sampled x the mean sampling run, one per GPU
    at a time) and when it would be promoted. Before the first sharing is
    measured the caller's prior stands for it (``prior``, ``expected_sharing``:
    the time-sharing of the job's compute unit by it, the sampling run beside
    it and the other processes measured there; with none assumed, the first
    jobs of a burst ran 45-70 % longer than predicted, docs/benchmarks.md). It
    keeps the latest measured resumes, for the restart a sampled job still pays.
    On virtual GPUs it also keeps the latest measured slowdowns from outside the cluster
    (``outside_slowdown``: other users' processes on the same cores), which
    slow every step of the run; none is measured on GPUs or in the simulator.
    Once newcomers stop sampling a job runs in the co-location it is placed in
    (``after_sampling``): the co-tenants the policy's packing puts on its
    compute unit, and on virtual GPUs the spare runners that the node's next
    starts set importing (``start_spill_s``, measured beside sampling runs and
    scaled to the starts expected while it runs). The live coordinator and the
    simulator each keep one and feed it their measurements.
    """

    def __init__(self) -> None:
        self.sharing: list[float] = []
        self.sampling_s: list[float] = []
        self.outside: list[float] = []
        self.utils: list[float] = []
        self.resumes: dict[str, list[float]] = {}
        self.spill: list[float] = []
        self.beside: list[float] = []
        self.started: dict[str, list[float]] = {}

    def note_start(self, node: str, at: float) -> None:
        """A job (or a sampling run) started on ``node`` at ``at``."""
        self.started[node] = _latest(self.started.get(node, []), at, START_TIMES_KEPT)

    def starts_between(self, node: str, since: float, until: float) -> int:
        """How many starts on ``node`` were noted from ``since`` to ``until``."""
        return sum(1 for t in self.started.get(node, ()) if since <= t <= until)

    def note_spill(self, seconds: float | None, beside: float | None = None) -> None:
        """A measured ``start_spill_s``, from ``beside`` runnable per core (the most
        a spill is taken to reach); None is ignored."""
        if seconds is not None:
            self.spill = _latest(self.spill, seconds, SPILL_KEPT)
            self.beside = _latest(self.beside, max(0.0, beside or 0.0), SPILL_KEPT)

    def spill_now(self) -> float:
        """The mean of the latest ``start_spill_s`` measured (0 before any)."""
        return _mean(self.spill, 0.0)

    def after_sampling(self, own_util: float, run_s: float, waiting: int, units: int,
                       node_units: int, mean_run_s: float | None, policy: object,
                       overhead: float = 0.0) -> float:
        """How much slower than alone (the load from outside apart) a job runs
        once newcomers stop sampling: its compute unit time-shared
        (``expected_sharing``) with the co-tenants ``policy``'s packing puts
        beside it (``packed_tenants``, at the newcomers' mean utilisation) and
        the spill of the starts its node makes meanwhile (``spill_now`` x starts
        per second: each of the node's ``node_units`` and of its co-tenants
        starts the next job as its own ends, one every ``mean_run_s``, its own
        start included (the spare it took is replaced); over its ``run_s`` no
        more than its own and the ``waiting`` jobs' starts, and no more than the
        mean runnable measured beside the sampling runs). At least 1;
        ``overhead`` is each co-tenant's cost (the policy's interference model
        on GPUs)."""
        others = max(0, waiting)
        tenants = packed_tenants(own_util, self.newcomer_util(), others, units, policy)
        spill = 0.0
        if self.spill and run_s > 0:
            every = mean_run_s if mean_run_s and mean_run_s > 0 else run_s
            rate = min((max(1, node_units) + tenants) / every, (1 + others) / run_s)
            spill = min(self.spill_now() * rate, _mean(self.beside, 0.0))
        outside = self.outside_now()
        return max(1.0, expected_sharing(own_util, self.newcomer_util(), spill, outside,
                                         overhead, tenants) / outside)

    def note_resume(self, model: str, seconds: float | None) -> None:
        """A start from a checkpoint cost ``seconds`` by its runner's phases (graph
        imported, checkpoint restored, first step)."""
        if seconds is not None and seconds >= 0:
            self.resumes[model] = _latest(self.resumes.get(model, []), seconds, STARTS_KEPT)

    def restart_s(self, model: str, last_start_s: float) -> float:
        """What a sampled job's next start (a resume) is expected to cost: the mean
        of the latest measured resumes of its model (its own last start, which
        built its graph, before any)."""
        return _mean(self.resumes.get(model, []), max(0.0, last_start_s))

    def note_util(self, util: float | None) -> None:
        """A sampled job's single-tenant utilisation (what a newcomer is expected to ask)."""
        if util is not None and util >= 0:
            self.utils = _latest(self.utils, util, SAMPLING_KEPT)

    def newcomer_util(self) -> float:
        """The mean of the latest sampled utilisations (1, the safe guess, before any)."""
        return _mean(self.utils, 1.0)

    def prior(self, own_util: float, others: float = 0.0, overhead: float = 0.0) -> float:
        """``expected_sharing`` beside a newcomer's sampling run, with the newcomers'
        mean utilisation and the load from outside measured so far."""
        return expected_sharing(own_util, self.newcomer_util(), others, self.outside_now(),
                                overhead)

    def note_sharing(self, factor: float | None) -> None:
        """A measured sharing factor (``sharing_factor``); None is ignored."""
        if factor is not None:
            self.sharing = _latest(self.sharing, factor, SHARING_KEPT)

    def note_sampling(self, seconds: float) -> None:
        """A sampling run took ``seconds`` from its start to its exit."""
        if seconds > 0:
            self.sampling_s = _latest(self.sampling_s, seconds, SAMPLING_KEPT)

    def note_outside(self, factor: float | None) -> None:
        """A measured slowdown from outside the cluster (``outside_slowdown``); None is ignored."""
        if factor is not None:
            self.outside = _latest(self.outside, factor, OUTSIDE_KEPT)

    def outside_now(self) -> float:
        """The mean of the latest measured slowdowns from outside the cluster (1 before any)."""
        return _mean(self.outside, 1.0)

    def sharing_now(self, prior: float = 1.0) -> float:
        """The mean of the latest measured sharing factors (``prior`` before any)."""
        return _mean(self.sharing, prior)

    def sampling_left_s(self, unsampled: int, gpus: int) -> float:
        """How long newcomers will keep sampling: one sampling run per GPU at a time."""
        if unsampled <= 0 or not self.sampling_s:
            return 0.0
        rounds = -(-unsampled // max(1, gpus))
        return rounds * sum(self.sampling_s) / len(self.sampling_s)

    def remaining_s(self, steps_left: float, solo_step_s: float, restart_s: float,
                    unsampled: int, gpus: int,
                    promoted_in: Callable[[float], float] | None,
                    ahead: Callable[[float], float] | None = None,
                    prior: float = 1.0, after: float = 1.0) -> float:
        """A sampled job's predicted run time: a start, then its steps, beside
        sampling runs if it is promoted while newcomers still sample.

        ``promoted_in(left)`` is the seconds until the policy would promote it
        were its prediction ``left`` (None: never while newcomers sample);
        ``ahead(enough)`` the run time of the jobs before it once promoted
        (running, and waiting since longer; ``work_ahead_s``), spread over the
        GPUs it cannot start before; asked only when it may share. The
        promotion bound grows with the prediction and the prediction shrinks as
        the promotion comes later, so the prediction is the one consistent with
        its own bound (found by bisection). ``predict_remaining_s`` from the
        step time alone when no sampling is left to come. ``prior`` is the
        sharing factor assumed until one is measured (``ColocationForecast.prior``);
        ``after`` how much slower than alone it runs once no newcomer samples
        (``after_sampling``; 1: alone).
        No wait for a runner process is added: the resumes measured found a
        spare ready but for a few early in a burst, and the mean of the latest
        waits put 4-12 s on later jobs that did not wait (docs/benchmarks.md).
        """
        restart = max(0.0, restart_s)
        # the load from outside the cluster slows every step; the sharing measured
        # (against the step alone) holds it too
        outside = self.outside_now()
        solo_step_s = max(0.0, solo_step_s) * outside
        after = max(1.0, after)
        alone = predict_remaining_s(steps_left, solo_step_s * after, 1, restart)
        left_s = self.sampling_left_s(unsampled, gpus)
        sharing = max(1.0, self.sharing_now(prior) / outside)
        if promoted_in is None or left_s <= 0 or sharing <= after \
                or promoted_in(alone) + restart >= left_s:   # promoted after the sampling
            return alone
        turn = 0.0 if ahead is None else max(0.0, ahead(left_s * gpus)) / max(1, gpus)

        def given(left: float) -> float:
            start = max(0.0, promoted_in(left), turn) + restart
            return restart + run_time_s(steps_left, solo_step_s, sharing, start, left_s, after)

        lo, hi = alone, given(alone)   # given() never passes given(alone), nor falls below alone
        if given(hi) >= hi:
            return hi
        for _ in range(60):
            if hi - lo < 1e-6 * hi:
                break
            mid = (lo + hi) / 2
            if given(mid) > mid:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2


def solo_step_s(sampled_step_s: float, sharing: float | None,
                waited_per_step_s: float | None = None, ran_per_step_s: float = 0.0) -> float:
    """A job's step time alone, from its sampled step.

    On a virtual GPU (CPU cores) every cause of a slower step shows as time
    its threads waited runnable for a core: co-tenants, other runners'
    start-ups, any other process. The step alone is then the sampled step
    less ``waited_per_step_s`` (what its busiest thread, the steps' critical
    path, waited), whatever was beside it, and no shorter than its CPU time
    per step over its cores or that thread's (``ran_per_step_s``). Elsewhere (no
    wait measured, None) a step sampled beside a running job that was
    measured ``sharing`` x slower meanwhile is divided by that factor (the
    sampled step when None).
    """
    if waited_per_step_s is not None:
        alone = max(ran_per_step_s, sampled_step_s - max(0.0, waited_per_step_s))
        return min(sampled_step_s, alone) if alone > 0 else sampled_step_s
    return sampled_step_s / max(1.0, sharing) if sharing is not None else sampled_step_s


def promotion_in(policy: object, job: JobView, now: float) -> Callable[[float], float] | None:
    """Seconds from ``now`` until ``policy`` would promote the waiting ``job``, as a
    function of its predicted remaining time (None: the policy promotes no job)."""
    bound = getattr(policy, "promotion_wait_s", None)
    if bound is None:
        return None
    waited = total_wait_s(job, now)
    return lambda left: bound(job, left) - waited


AHEAD_SCAN = 1000   # most jobs a caller examines for the work ahead of one (bounds its cost)


def work_ahead_s(lefts: Iterable[float | None], enough: float) -> float:
    """The summed predicted remaining times ``lefts`` of the jobs ahead of one
    (None: not predicted), summing no further once past ``enough``."""
    total = 0.0
    for left in lefts:
        if left is not None:
            total += left
            if total > enough:
                break
    return total
