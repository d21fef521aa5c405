"""The coordinator's in-memory view of the live cluster: nodes, GPUs, jobs.

``LiveJob`` is one job as the coordinator tracks it (what is persisted plus
volatile telemetry); ``Node`` is one agent's machine. ``Cluster`` holds both and
builds the policy's ``ClusterSnapshot`` and ``JobView``s cheaply: the snapshot
is rebuilt only when nodes change, each job's view is cached until the job changes
(``LiveJob.touch``), and the views live in a ``JobSet`` whose change log lets the
policy's memo follow only the jobs that changed. Every job refreshed or retired is
told to the forecast's ``WaitingWindow`` (``coordinator.window``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Sequence

from tfgshare.metrics import JobAccount
from tfgshare.policies.base import (GPU, Action, ClusterSnapshot, Fragment, JobState, JobView,
                                    SampleRecord)
from tfgshare.policies.jobset import JobSet
from tfgshare.policies.movecost import move_cost_s
from tfgshare.policies.placement import GpuUse, fits
from tfgshare.policies.prediction import ColocationForecast, predict_remaining_s
from tfgshare.policies.validate import (Checked, Occupancy, check_actions, fragments_problem,
                                       touched_gpus)
from tfgshare.coordinator.window import WaitingWindow
from tfgshare.schema import GpuInfo, JobSpec, plain

_VOLATILE = frozenset({   # LiveJob fields not saved to the database
    "unknown", "gpu_memory_mb", "over_memory", "solo_util", "solo_util_sum", "step_time_s",
    "training", "_view", "_spec_record", "_counted", "reserved", "reserved_as", "marks",
    "marks_attempt", "sampling_start", "sampled_beside", "sampled_on", "after_sampling",
    "viewed_at"})


@dataclass(eq=False)
class LiveJob(JobAccount):
    """One job as the coordinator tracks it: its own ``JobAccount`` (submit, waits, holds,
    moves, prediction), which transitions change only through its methods, as in the
    simulator."""

    id: str
    seq: int
    spec: JobSpec
    owner: str = ""                   # the submitter's key name (set from the key, "" if keys off)
    state: JobState = JobState.QUEUED
    attempt: int = 0                  # bumped at every start; stale reports are ignored
    node: str | None = None
    fragments: tuple[Fragment, ...] = ()
    sample_only: bool = False         # the current attempt only samples
    steps_done: int = 0
    sample: SampleRecord | None = None
    predicted_remaining_s: float | None = None
    # measurements behind the prediction (tfgshare.policies.prediction.predict_remaining_s)
    measured_step_s: float | None = None  # latest measured step time (co-location included)
    solo_step_s: float | None = None  # its step time alone: sampled, less a measured sharing
    sampling_start: float | None = None  # when its sampling run started
    # on virtual GPUs, the cluster's other processes per core beside its sampled steps,
    # co-tenants apart (spares importing TensorFlow), for its prior sharing; None on GPUs
    sampled_beside: float | None = None
    # its predicted slowdown once newcomers stop sampling (ColocationForecast.after_sampling)
    after_sampling: float = 1.0
    sampled_on: str | None = None     # the node it sampled on (its node's compute units)
    # (time, step) of its progress events in the current start (co-tenants' sharing factor)
    marks: list[tuple[float, int]] = field(default_factory=list)
    marks_attempt: int = 0
    restart_s: float | None = None    # what its last start cost before steps ran at speed
    start_cost_s: float | None = None  # its last start by the runner's phases (start_phases)
    graph_built_s: float = 0.0        # of that start, building its graph (0: imported)
    first_step_s: float = 0.0         # of that start, its first step
    save_s: float | None = None       # what its last checkpoint save took
    attempt_step0: int | None = None  # steps_done at this attempt's start, until its cost is known
    pinned: bool = False              # manually suspended: not scheduled until resumed
    cancel_requested: bool = False
    migrate_to: tuple[Fragment, ...] | None = None   # target of a migration in flight
    attained_service_s: float = 0.0   # GPU-seconds
    retries: int = 0                  # failures in a row without progress
    retry_steps: int = 0              # the furthest step seen at a counted failure
    reason: str = ""                  # why it failed or was last requeued
    memory_need_mb: float = 0.0       # per GPU, measured when it last ran out of memory
    out_of_memory: int = 0            # times it ran out of memory (re-sized each time)
    # volatile
    unknown: bool = False             # was running before a restart, not yet re-adopted
    gpu_memory_mb: dict[int, float] = field(default_factory=dict)
    over_memory: str = ""             # non-empty when its real memory passes its fragment
    solo_util: list[tuple[float, float]] = field(default_factory=list)   # (time, GPU util)
    solo_util_sum: float = 0.0   # of the heartbeats while it sampled alone (real GPUs)
    training: bool = False            # it has trained since its current start
    step_time_s: float | None = None  # its last reported step time in the current start
    # a start the policy planned onto fragments that a suspend or migration in
    # flight still holds: reserved for this waiting job until they free
    reserved: tuple[Fragment, ...] | None = None
    reserved_as: str = ""             # "sample", "migrated" or "" (a start or resume)
    _view: JobView | None = field(default=None, repr=False)
    viewed_at: float = float("-inf")  # when the policy's view last followed it (refresh)
    _spec_record: dict[str, Any] | None = field(default=None, repr=False)  # plain(spec)
    _counted: tuple[str, bool, bool] | None = field(default=None, repr=False)  # in the counts

    def last_start_s(self) -> float:
        """What its last start cost: the runner's phases (``start_phases``: process
        start, graph, restore, first step), else the time from its last start to
        its steps at speed (``restart_s``, which also holds any wait for a runner
        process), else 0."""
        restart = self.start_cost_s if self.start_cost_s is not None else self.restart_s
        return restart or 0.0

    def predict(self, restarts: int, restart_s: float | None = None) -> float | None:
        """Run time left, from what was measured (None before its step time is known):
        a restart still to come costs ``restart_s``, by default what its last start
        cost (``last_start_s``), and the final save what its last save took."""
        if self.measured_step_s is None:
            return None
        restart = self.last_start_s() if restart_s is None else restart_s
        left = max(0, self.spec.max_number_of_steps - self.steps_done)
        return predict_remaining_s(left, self.measured_step_s, restarts, restart) + (
            (self.save_s or 0.0) if left else 0.0)

    @property
    def prediction_error(self) -> float | None:
        """|predicted - actual| / actual run time after sampling, once finished."""
        actual = self.actual_after_prediction_s()
        if self.state is not JobState.FINISHED or actual is None:
            return None
        return abs(self.predicted_total_s - actual) / actual if actual > 0 else None

    def touch(self) -> None:
        """Forget the cached view after a change."""
        self._view = None

    @property
    def display_state(self) -> str:
        """The state as users see it ("unknown" until re-adopted after a restart)."""
        if self.unknown:
            return "unknown"
        if self.cancel_requested and self.state.holds_gpu:
            return "cancelling"
        if self.migrate_to is not None and self.state.holds_gpu:
            return "migrating"
        if self.pinned and self.state.waiting:
            return f"{self.state.value} (held)"
        return self.state.value

    def view(self) -> JobView:
        """The policy's view of this job (cached until ``touch``)."""
        if self._view is None:
            state = self.state
            fragments = self.fragments
            if state.holds_gpu and (self.cancel_requested or self.migrate_to is not None):
                state = JobState.SUSPENDING   # busy: the policy must not act on it
                # the migration target is held as well as the fragments it leaves
                fragments = fragments + (self.migrate_to or ())
            elif self.reserved is not None and state.waiting:
                # a start in flight: it holds its reserved fragments, and is busy
                state, fragments = JobState.SUSPENDING, self.reserved
            spec = self.spec
            self._view = JobView(
                id=self.id, submit_time=self.submit_time, num_gpus=spec.num_gpus,
                state=state, model=spec.model_name, total_steps=spec.max_number_of_steps,
                steps_done=self.steps_done, requested_fraction=spec.requested_fraction,
                sample=self.sample, predicted_remaining_s=self.predicted_remaining_s,
                fragments=fragments, attained_service_s=self.attained_service_s,
                # service is closed at each release: a running job's grows from last_start
                attained_at=self.last_start if state.holds_gpu else None,
                last_start=self.last_start, waited_s=self.waited_s,
                last_wait_start=self.last_wait_start, suspends=self.suspends,
                priority=spec.priority, min_memory_mb=self.memory_need_mb,
                move_cost_s=move_cost_s(self.start_cost_s, self.save_s))
        return self._view

    # ---- persistence --------------------------------------------------------

    def to_record(self) -> dict[str, Any]:
        """The persisted fields as JSON-ready data."""
        out = {name: getattr(self, name) for name in _persisted()}
        if self._spec_record is None:
            self._spec_record = plain(self.spec)   # a spec never changes after submit
        out["spec"] = self._spec_record
        out["state"] = self.state.value
        out["fragments"] = [[x.gpu, x.fraction] for x in self.fragments]
        if self.migrate_to is not None:
            out["migrate_to"] = [[x.gpu, x.fraction] for x in self.migrate_to]
        if self.sample is not None:
            out["sample"] = plain(self.sample)
        return out

    @classmethod
    def from_record(cls, rec: dict[str, Any]) -> "LiveJob":
        """Rebuild a job from ``to_record`` output."""
        rec = dict(rec)
        rec["spec"] = JobSpec(**rec["spec"])
        rec["state"] = JobState(rec["state"])
        rec["fragments"] = tuple(Fragment(g, f) for g, f in rec.get("fragments") or ())
        if rec.get("migrate_to") is not None:
            rec["migrate_to"] = tuple(Fragment(g, f) for g, f in rec["migrate_to"])
        if rec.get("sample") is not None:
            rec["sample"] = SampleRecord(**rec["sample"])
        known = {f.name for f in dataclasses.fields(cls)} - _VOLATILE
        return cls(**{k: v for k, v in rec.items() if k in known})


@functools.cache
def _persisted() -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(LiveJob) if f.name not in _VOLATILE)


@dataclass(eq=False)
class Node:
    """One agent's machine and its GPUs."""

    name: str
    gpus: dict[int, GpuInfo]
    identity: bytes | None = None     # ZMQ routing id of its agent, None while away
    last_seen: float = 0.0
    lost: bool = False
    gpu_util: dict[int, float] = field(default_factory=dict)
    gpu_memory_used_mb: dict[int, float] = field(default_factory=dict)
    address: str = ""                 # where other nodes reach its gang members ("": none)
    ports: tuple[int, int] | None = None   # the ports its gang members may use
    data_roots: list[str] | None = None    # where its agent accepts dataset dirs (None: not told)

    def gpu_id(self, index: int) -> str:
        """The cluster-wide id of this node's GPU ``index``."""
        return f"{self.name}:{index}"


def info_node(gpu_id: str) -> str:
    """The node part of a GPU id."""
    return gpu_id.rpartition(":")[0]


def split_gpu_id(gpu_id: str) -> tuple[str, int]:
    """("node", index) from "node:index"; ValueError if malformed."""
    node, sep, index = gpu_id.rpartition(":")
    if not sep or not node or not index.isdigit():
        raise ValueError(f"GPU must be NODE:INDEX, got {gpu_id!r}")
    return node, int(index)


KEEP_DONE = 256                    # done jobs kept in memory besides the database
PREDICTION_ERRORS_KEPT = 10_000    # finished jobs' prediction errors kept for status


class Cluster:
    """Nodes and jobs, and the policy snapshot built from them."""

    def __init__(self, reserve_mb: float = 300.0, keep_done: int = KEEP_DONE) -> None:
        self.reserve_mb = reserve_mb
        self.keep_done = keep_done
        self.nodes: dict[str, Node] = {}
        # the jobs in memory: every active job and the ``keep_done`` latest done ones
        # (the others are in the coordinator's database only)
        self.jobs: dict[str, LiveJob] = {}
        self._done: OrderedDict[str, None] = OrderedDict()   # done jobs in memory, oldest first
        self.active: dict[str, LiveJob] = {}      # jobs not done
        self.tenants: dict[str, dict[str, LiveJob]] = {}   # GPU id -> jobs holding it
        self.migrating: dict[str, LiveJob] = {}   # jobs with a migration target reserved
        self.reserved: dict[str, LiveJob] = {}    # waiting jobs with a start in flight
        self._views = JobSet()                     # what the policy sees, kept up to date
        self._given: JobSet | None = None         # the policy's copy of it (``views``)
        self.counts: dict[str, int] = {}          # jobs by state ("unknown" apart), kept up to date
        self.over_count = 0                       # jobs over their fragment's memory
        # of the latest finished jobs (the report covers them all, from the database)
        self.prediction_errors: deque[float] = deque(maxlen=PREDICTION_ERRORS_KEPT)
        # measured sharing factors and sampling runs, for sampled jobs' predictions
        self.forecast = ColocationForecast()
        self._snapshot: ClusterSnapshot | None = None
        self.window = WaitingWindow(self.active)    # the forecast's oldest jobs, kept

    # ---- nodes -------------------------------------------------------------

    def nodes_changed(self) -> None:
        """Rebuild the snapshot at the next call."""
        self._snapshot = None

    def up_nodes(self) -> Iterator[Node]:
        """Nodes whose agent is connected."""
        return (n for n in self.nodes.values() if not n.lost and n.identity is not None)

    def snapshot(self) -> ClusterSnapshot:
        """The GPUs of every up node, as the policy sees them."""
        if self._snapshot is None:   # one object while nodes stay: its layout is kept on it
            up = list(self.up_nodes())
            gpus = tuple(GPU(id=n.gpu_id(i), node=n.name, index=i, memory_mb=g.memory_mb)
                         for n in up for i, g in sorted(n.gpus.items()))
            # a node whose agent offers no gang address and ports takes one-node jobs only
            open_ = frozenset(n.name for n in up if n.address and n.ports)
            self._snapshot = ClusterSnapshot(
                gpus=gpus, reserve_mb=self.reserve_mb,
                gang_nodes=None if len(open_) == len(up) else open_)
        return self._snapshot

    def gpu(self, gpu_id: str) -> GpuInfo | None:
        """The GPU with this id on an up node, else None."""
        try:
            name, index = split_gpu_id(gpu_id)
        except ValueError:
            return None
        node = self.nodes.get(name)
        if node is None or node.lost or node.identity is None:
            return None
        return node.gpus.get(index)

    # ---- jobs --------------------------------------------------------------

    def add(self, job: LiveJob) -> None:
        """Track a job (and the fragments it holds)."""
        self.jobs[job.id] = job
        if job.state.done:
            self._done[job.id] = None
        else:
            self.active[job.id] = job
            if job.state.holds_gpu:
                target = job.migrate_to
                self.place(job, job.fragments)
                self.set_migration(job, target)
        self.refresh(job)

    def retire(self, job: LiveJob) -> None:
        """Drop a finished, failed or cancelled job from the active set; beyond the
        ``keep_done`` latest done jobs, the oldest leaves memory."""
        self.unplace(job)
        self.active.pop(job.id, None)
        self._views.drop(job.id)
        self._done[job.id] = None
        while len(self._done) > self.keep_done:
            self.jobs.pop(self._done.popitem(last=False)[0], None)
        self.window.note(job)

    def place(self, job: LiveJob, fragments: tuple[Fragment, ...]) -> None:
        """Record that ``job`` holds these fragments."""
        self.unplace(job)
        job.fragments = tuple(fragments)
        for f in job.fragments:
            self.tenants.setdefault(f.gpu, {})[job.id] = job

    def unplace(self, job: LiveJob) -> None:
        """Record that ``job`` holds no fragment (and no migration target)."""
        for f in job.fragments:
            here = self.tenants.get(f.gpu)
            if here is not None:
                here.pop(job.id, None)
                if not here:
                    del self.tenants[f.gpu]
        job.fragments = ()
        self.set_migration(job, None)
        self.set_reservation(job, None)

    def set_migration(self, job: LiveJob, target: tuple[Fragment, ...] | None) -> None:
        """Reserve (or drop) the fragments a job migrates to."""
        job.migrate_to = target
        if target is None:
            self.migrating.pop(job.id, None)
        else:
            self.migrating[job.id] = job

    def set_reservation(self, job: LiveJob, fragments: tuple[Fragment, ...] | None,
                        kind: str = "") -> None:
        """Reserve (or drop) fragments for a waiting job's start in flight.

        ``kind``: "sample" (a sampling start), "migrated" (the end of a
        migration) or "" (a start or resume).
        """
        job.reserved, job.reserved_as = fragments, kind
        if fragments is None:
            self.reserved.pop(job.id, None)
        else:
            self.reserved[job.id] = job

    def co_tenants(self, job: LiveJob) -> int:
        """How many other jobs hold a fragment on any of this job's GPUs."""
        others: set[str] = set()
        for f in job.fragments:
            others.update(self.tenants.get(f.gpu, ()))
        others.discard(job.id)
        return len(others)

    def refresh(self, job: LiveJob) -> None:
        """Update the policy's view and the counts after a job changed."""
        job.touch()
        counted = ("unknown" if job.unknown else job.state.value, bool(job.over_memory),
                   job.state is JobState.FINISHED)
        if counted != job._counted:
            if job._counted is not None:
                self.counts[job._counted[0]] -= 1
                self.over_count -= job._counted[1]
            self.counts[counted[0]] = self.counts.get(counted[0], 0) + 1
            self.over_count += counted[1]
            if counted[2] and not (job._counted and job._counted[2]):
                err = job.prediction_error
                if err is not None:
                    self.prediction_errors.append(err)
            job._counted = counted
        if job.state.done or job.unknown or (job.pinned and job.state.waiting):
            self._views.drop(job.id)
        else:
            self._views.put(job.view())
        self.window.note(job)

    def views(self) -> JobSet:
        """Views of the jobs the policy decides on (not done, held or unknown).

        A frozen copy carrying the changes since the last call, for the policy's
        memo; later changes go to the next call's copy. The next call brings
        this same copy up to date from the changes (not a copy of every view),
        so it must be out of the policy's hands by then: a round ends before
        the next one starts.
        """
        out = self._views.frozen(reuse=self._given)
        self._views.trim()
        self._given = out
        return out

    def check_actions(self, actions: Sequence[Action]) -> Checked:
        """Which actions can be carried out now, which must wait, and why the others cannot.

        The policies' one check (``policies.validate.check_actions``) on the
        cluster as the coordinator holds it now (``occupancy``). A start onto
        room that a suspend or migration in this list (or in flight) will free is
        deferred: its fragments are reserved and it starts once they are free.
        """
        jobs = {}
        for a in actions:   # their views from their fields now, never a stale cached one
            if (j := self.active.get(a.job)) is not None:
                j.touch()
                jobs[a.job] = j.view()
        return check_actions(actions, self.snapshot(), jobs,
                             self.occupancy(touched_gpus(actions), jobs))

    def occupancy(self, gpus: Iterable[str], jobs: Iterable[str] = ()) -> Occupancy:
        """What these GPUs hold now (a stopping runner keeps its memory until it exits;
        a migration target and a start in flight are reserved) and which of these jobs
        the policy may not act on though their views allow it: the check's data."""
        held, exiting = {}, {}
        for gid in gpus:
            held[gid] = self._gpu_use(gid)
            for j in self.tenants.get(gid, {}).values():
                if j.state is JobState.SUSPENDING:   # in flight: its runner is exiting
                    for f in j.fragments:
                        if f.gpu == gid:
                            u = exiting.setdefault(gid, GpuUse())
                            u.used += f.fraction
                            u.tenants += 1
        live = [self.active[jid] for jid in jobs if jid in self.active]
        return Occupancy(held, exiting,
                         unadopted=frozenset(j.id for j in live if j.unknown),
                         pinned=frozenset(j.id for j in live if j.pinned),
                         shown={j.id: j.display_state for j in live})

    def placement_problem(self, job: LiveJob, frags: Sequence[Fragment],
                          migrate: bool) -> tuple[str, str]:
        """Why ``job`` cannot start on (or, ``migrate``: move to) these fragments now,
        by the rule ``check_actions`` applies to the policy's actions: ("", "") if
        it can, ("later", why) once moves in flight free the room, else (reason
        key, why not)."""
        frags = tuple(frags)
        job.touch()
        return fragments_problem(job.view(), frags, migrate, self.snapshot(),
                                 self.occupancy({f.gpu for f in frags}))

    def _gpu_use(self, gpu_id: str, skip: str | None = None) -> GpuUse:
        """What the tenants, migration targets and starts in flight hold on one GPU now."""
        u = GpuUse()
        for j in self.tenants.get(gpu_id, {}).values():
            for f in j.fragments:
                if f.gpu == gpu_id:
                    u.used += f.fraction
                    u.tenants += 1
        for group in (self.migrating, self.reserved):
            for j in group.values():
                if j.id == skip:
                    continue
                for f in (j.migrate_to if group is self.migrating else j.reserved) or ():
                    if f.gpu == gpu_id:
                        u.used += f.fraction
                        u.tenants += 1
        return u

    def holders(self) -> Iterator[LiveJob]:
        """Jobs that hold GPU fragments now."""
        seen: set[str] = set()
        for here in self.tenants.values():
            for job in here.values():
                if job.id not in seen:
                    seen.add(job.id)
                    yield job

    def fits(self, gpu_id: str, fraction: float, skip: str | None = None) -> bool:
        """Whether one more fragment of ``fraction`` fits on this up GPU now.

        Fragments reserved by migrations and starts in flight count as held
        (but not those of job ``skip``).
        """
        info = self.gpu(gpu_id)
        if info is None:
            return False
        gpu = GPU(gpu_id, info_node(gpu_id), 0, info.memory_mb)
        return fits(gpu, self._gpu_use(gpu_id, skip), fraction, self.reserve_mb)
