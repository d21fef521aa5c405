"""The policy interface: what a scheduling policy sees and what it returns.

A policy is a pure function of (now, cluster snapshot, jobs) returning actions.
It does no I/O and keeps no clock; the simulator and the live coordinator both
build these snapshots and carry out the actions. Everything here is plain,
immutable data so that a policy cannot change the caller's state by accident.

A policy object holds only its configuration. What it carries between calls
to be fast lives in a memo (``policies.memo.Memo``) that the caller makes once
with ``policy.new_memo()`` and passes to every ``decide``; the caller hands the
jobs as a ``policies.jobset.JobSet`` it keeps up to date (``put``/``drop``, then
``trim`` after each decide) so the memo follows only what changed. A memo is a
cache: a fresh memo (or ``memo=None``, or a plain list of views) gives the same
decisions as a reused one. The one other cache is a snapshot's GPU layout,
kept on the immutable snapshot itself (``placement``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, ClassVar, Sequence


class JobState(str, enum.Enum):
    """Life cycle of a job, shared by the simulator and the live cluster."""

    QUEUED = "queued"          # admitted, never run
    SAMPLING = "sampling"      # running its sampling phase on a fragment
    SAMPLED = "sampled"        # sampling done, waiting for a placement
    RUNNING = "running"        # training on its fragments
    SUSPENDING = "suspending"  # asked to checkpoint and exit (live cluster only)
    SUSPENDED = "suspended"    # checkpointed, holds no GPU, waiting to resume
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"

    # what a state is, as plain attributes of each member (set below): the callers' inner
    # loops read them millions of times, and a property of an enum costs ten times as much
    done: bool          # finished, failed or cancelled
    holds_gpu: bool     # sampling, running or suspending
    waiting: bool       # queued, sampled or suspended


for _state in JobState:
    _state.done = _state in (JobState.FINISHED, JobState.FAILED, JobState.CANCELLED)
    _state.holds_gpu = _state in (JobState.SAMPLING, JobState.RUNNING, JobState.SUSPENDING)
    _state.waiting = _state in (JobState.QUEUED, JobState.SAMPLED, JobState.SUSPENDED)
del _state


@dataclass(frozen=True)
class GPU:
    """One physical (or virtual) GPU."""

    id: str           # "<node>:<index>", unique in the cluster
    node: str
    index: int
    memory_mb: int
    kind: str = ""    # GPU type (e.g. "V100M32"), for jobs that ask for one; "" unknown


@dataclass(frozen=True)
class Fragment:
    """A slice of one GPU held by one job: ``per_process_gpu_memory_fraction``."""

    gpu: str          # GPU.id
    fraction: float   # in (0, 1]


@dataclass(frozen=True)
class SampleRecord:
    """What a job's sampling phase measured (see the runner's sampling record)."""

    step_time_s: float           # mean step time on the fragment it sampled on
    peak_memory_mb: float        # peak memory per GPU
    gpu_util: float = 1.0        # single-tenant GPU utilisation in [0, 1]
    co_tenants: int = 0          # other jobs on the GPU while it sampled


@dataclass(frozen=True)
class JobView:
    """A policy's read-only view of one job."""

    id: str
    submit_time: float
    num_gpus: int
    state: JobState
    model: str = ""
    total_steps: int = 0
    steps_done: int = 0
    requested_fraction: float | None = None   # user-fixed fraction, else derived
    sample: SampleRecord | None = None
    predicted_remaining_s: float | None = None  # refreshed online while it runs
    fragments: tuple[Fragment, ...] = ()        # where it runs now (holds_gpu)
    attained_service_s: float = 0.0             # GPU-seconds received so far (LAS)
    attained_at: float | None = None            # when attained_service_s was measured
    last_start: float | None = None             # time of the last start/resume
    waited_s: float = 0.0                       # time not running since submit
    last_wait_start: float | None = None        # when its current wait began
    suspends: int = 0
    priority: int = 0                           # larger = more urgent (user hint)
    min_memory_mb: float = 0.0                  # per GPU, measured when it ran out of memory
    # measured cost of one move (checkpoint save + restart), None until measured
    # (policies.movecost: a policy's minimum run between moves derives from it)
    move_cost_s: float | None = None
    gpu_types: tuple[str, ...] = ()             # GPU types it may run on (GPU.kind; empty: any)


@dataclass(frozen=True)
class ClusterSnapshot:
    """The cluster as the policy sees it: GPUs and the fragments in use."""

    gpus: tuple[GPU, ...]
    reserve_mb: float = 300.0    # per-process CUDA context reserve on each GPU
    down_nodes: frozenset[str] = field(default_factory=frozenset)
    # nodes that may hold a member of a job spanning nodes (None: every node); a
    # live node whose agent offers no gang address and ports runs one-node jobs only
    gang_nodes: frozenset[str] | None = None

    def spans_onto(self, node: str) -> bool:
        """Whether a job spanning nodes may have a member on ``node``."""
        return self.gang_nodes is None or node in self.gang_nodes

    def gpu(self, gpu_id: str) -> GPU:
        for g in self.gpus:
            if g.id == gpu_id:
                return g
        raise KeyError(gpu_id)


# ---- actions -------------------------------------------------------------


@dataclass(frozen=True)
class Start:
    """Start (or resume) a waiting job on these fragments, one per GPU.

    ``sample_only`` runs just the sampling phase, after which the job returns
    to the queue as SAMPLED with its record.
    """

    job: str
    fragments: tuple[Fragment, ...]
    sample_only: bool = False


@dataclass(frozen=True)
class Suspend:
    """Checkpoint a running job and free its fragments."""

    job: str


@dataclass(frozen=True)
class Migrate:
    """Suspend a running job and resume it on other fragments."""

    job: str
    fragments: tuple[Fragment, ...]


Action = Start | Suspend | Migrate


class Tick(enum.Enum):
    """``Policy.tick_s``'s default: call the policy at the caller's own tick."""

    CALLER = "caller"   # the simulator's ``SimConfig.tick_s`` (``tfgshare simulate --tick``)


class Policy:
    """A scheduling policy: subclass it and write ``decide``; the rest has defaults.

    ``decide`` is deterministic and changes nothing but its memo. The callers
    (the simulator and the coordinator) read the attributes and methods below
    directly, never through ``getattr``.
    """

    name: ClassVar[str] = "policy"
    # how often to call it while jobs wait: seconds, None (only on events and at
    # ``wake_at``) or Tick.CALLER (the caller's tick); the simulator reads it, the
    # coordinator decides after every event and at least every second anyway
    tick_s: ClassVar[float | None | Tick] = Tick.CALLER
    acts_when_idle: ClassVar[bool] = False   # call it even when no job waits
    # whether decide reads a running job's progress (steps_done, predicted_remaining_s);
    # False: a caller need not refresh a running job's view as it trains, only when it
    # starts, moves, is slowed or sped up by co-tenants, or stops (attained service
    # grows linearly while a job holds GPUs: ``prediction.attained_now`` reads it at any
    # time from such a view)
    reads_progress: ClassVar[bool] = True
    sample_steps: int | None = None          # steps a sampling run measures (None: the caller's)

    def new_memo(self) -> Any:
        """An empty memo for this policy, owned by the caller (None: it keeps none,
        and is called with a plain list of views and no memo)."""
        return None

    def wake_at(self, now: float, memo: Any) -> float | None:
        """The next time it wants to be called though nothing happens (None: never);
        read when ``tick_s`` is None."""
        return None

    def decide(self, now: float, cluster: ClusterSnapshot, jobs: Sequence[JobView],
               memo: Any = None) -> list[Action]:
        """Return the actions to take now, given the cluster and every live job.

        ``memo``: this policy's memo from earlier calls (None: a fresh one).
        """
        raise NotImplementedError
