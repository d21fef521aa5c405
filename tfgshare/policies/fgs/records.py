"""The records fgs keeps in its memo and passes between its phases, each a NamedTuple.

A NamedTuple is a tuple (as fast to build, compare, sort and hash), so a
record that is a sort key or a cache key orders and compares as the tuple of
its fields in order: the field order of those is part of the decision and is
kept as the plain tuples had it.

Imports: nothing of fgs (types of ``policies`` below fgs only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, NamedTuple

if TYPE_CHECKING:
    from ..base import GPU, JobView
    from ..freemap import FreeMap


# ---- settings and layouts a kept answer was made under (cache keys) -------------------

class PromotionSettings(NamedTuple):
    """The settings a waiting job's promotion bound is made from (``FgsMemo.changed``)."""
    max_wait_ratio: float
    max_wait_s: float
    promote_floor: Callable   # the policy's ``promote_floor(job)`` (per job: its move cost)
    promote_floor_s: float
    min_run_s: float
    move_share: float | None


class QueueConfig(NamedTuple):
    """What the memo's waiting queues are sorted and sized for: rebuilt when it changes."""
    promotion: PromotionSettings
    rep: GPU | None               # the one GPU size of the cluster (None: sizes differ)
    headroom: float
    reserve_mb: float
    sample_default: float | None  # the sampling fragment on ``rep`` of a job that asks none


class RoomSettings(NamedTuple):
    """The settings a tenant's readiness for a promoted job depends on (``Fgs.room_key``)."""
    reserve_horizon_s: float
    min_run_s: float
    move_share: float | None
    promote_floor_s: float
    max_wait_s: float
    max_wait_ratio: float


class FreeMapKey(NamedTuple):
    """What the memo's FreeMap is built for besides the GPUs themselves."""
    down_nodes: frozenset
    reserve_mb: float
    max_cotenants: int
    slowdown_cap: float
    interference_overhead: float


class ClearLayout(NamedTuple):
    """What a ``ClearIndex``'s costs are for besides the GPUs themselves."""
    room: RoomSettings
    max_cotenants: int
    slowdown_cap: float
    interference_overhead: float
    reserve_mb: float
    down_nodes: frozenset


class RoomLayout(NamedTuple):
    """What a ``RoomIndex`` is for."""
    room: RoomSettings
    gpus: tuple
    reserve_mb: float


class ClearJob(NamedTuple):
    """The promoted job a ``ClearIndex`` read prices GPUs for."""
    gpus: int            # gang size
    fractions: tuple     # (GPU memory size, the job's fraction of it), sorted
    util: float


class WalkInputs(NamedTuple):
    """What a walk of the shortest-first queue reads besides the clock (``IdleWalk``)."""
    version: int             # the memo's ``walk_version``: free map, queue and movable tenants
    closed: frozenset        # GPUs reserved this round
    promoted_first: tuple    # the promoted jobs the walk leaves out
    policy: object           # the policy, for the settings the memo's config leaves out


class MemoFreeMap(NamedTuple):
    """The memo's FreeMap as the holders hold it, and what it was built for."""
    key: FreeMapKey
    gpus: tuple        # the cluster's GPU tuple (compared by identity)
    free_map: FreeMap


class IdleWalk(NamedTuple):
    """The last walk of the shortest-first queue that did nothing (``Fgs.decide``): it
    does nothing again while ``key`` holds and the clock is before ``until``."""
    key: WalkInputs
    until: float


# ---- a waiting job ---------------------------------------------------------------------

class JobSize(NamedTuple):
    """A job's size as a round checks it for room."""
    fraction: float   # of the cluster's one GPU size (inf: sizes differ)
    util: float       # utilisation to check room for (-1: sampling, not checked)


class SizeBucket(NamedTuple):
    """A bucket of the shortest-first queue split by size (``order.size_bucket``)."""
    fraction_step: int   # the fraction is in [step, step + 1) / SIZE_STEPS
    band: int            # the utilisation band a round searches for the job
    gpus: int            # gang size


class ArrivalKey(NamedTuple):
    """A waiting job's place in an arrival-ordered queue (to sample, promoted)."""
    submit_time: float
    job_id: str


class ShortestKey(NamedTuple):
    """A waiting job's place in the shortest-remaining-first queue."""
    remaining_s: float   # predicted remaining time, inf if not predicted
    submit_time: float
    job_id: str


class WaitClock(NamedTuple):
    """A waiting job's wait: ``waited_s + max(0, now - since)`` (``total_wait_s``);
    it is promoted once that passes ``bound``."""
    waited_s: float
    since: float
    bound: float

    def passes_at(self) -> float:
        """When the wait reaches the bound (it is promoted just after)."""
        return self.since + (self.bound - self.waited_s)


class WaitingJob(NamedTuple):
    """The memo's entry for a waiting job."""
    view: JobView
    to_sample: bool     # in the queue to sample (no sample, no prediction), else shortest-first
    queue_key: ArrivalKey | ShortestKey
    size: JobSize
    wait: WaitClock


class PromotionDue(NamedTuple):
    """A heap entry: about when (never late) a waiting job's view is promoted."""
    at: float
    job_id: str
    view: JobView


# ---- a job holding GPUs ----------------------------------------------------------------

class MoveKey(NamedTuple):
    """What consolidation reads of a running single-GPU tenant (``Fgs.tenant_keys``'s
    "tenant"): a change of it makes its GPUs stale in ``MovableIndex``."""
    fragments: tuple
    last_start: float | None
    util: float
    may_move: bool
    min_run: float | None   # None: it may not be moved


class HolderKey(NamedTuple):
    """What making room reads of a job holding GPUs (``Fgs.tenant_keys``'s "reach" and
    "clear"): a change of it makes its GPUs stale in ``RoomIndex`` / ``ClearIndex``."""
    fragments: tuple
    gpus: int
    running: bool
    util: float
    may_move: bool
    last_start: float | None
    min_run: float | None
    end: object   # "reach": whether it ends within the horizon; "clear": when (finish_in)


class KeyedView(NamedTuple):
    """A tenant's latest view and what each reader reads of it (``Fgs.tenant_keys``)."""
    view: JobView
    keys: dict


class KeysBeforeAfter(NamedTuple):
    """A tenant's keys before and after a change (None: no view on that side)."""
    before: dict | None
    after: dict | None


class MinRunEnd(NamedTuple):
    """A heap entry: about when (never late) a tenant that may be moved passes its
    minimum run (``FgsMemo.next_expiry``)."""
    at: float
    seq: int            # push order: no two entries compare further
    job_id: str
    view: JobView
    last_start: float
    min_run: float


class Movability(NamedTuple):
    """What a tenant's view alone says of moving it (kept until the view changes)."""
    view: JobView
    may_be_moved: bool   # running and not promoted (``Fgs.may_be_moved``)
    min_run: float       # its minimum run if it may be moved, else 0


class MayMove(NamedTuple):
    """Whether a tenant may be moved for a job of some gang size (kept per round); one of
    ``MAY_NOW``, ``MAY_LATER``, ``MAY_NEVER`` (asked often: not built each time)."""
    now: bool    # now (``movable``)
    ever: bool   # once past its minimum run (``evictable``)


MAY_NOW, MAY_LATER, MAY_NEVER = MayMove(True, True), MayMove(False, True), MayMove(False, False)


# ---- making room -----------------------------------------------------------------------

class ClearCost(NamedTuple):
    """What clearing a GPU for one more job costs (``clear_cost``)."""
    wait_s: float    # until every tenant to move may be moved
    moves: int       # tenants to move
    tenants: tuple | list   # those tenants, in the order they go


class CostRank(NamedTuple):
    """How a GPU's clear cost sorts: soonest, fewest moves, then cluster order."""
    wait_s: float
    moves: int
    order: int   # the GPU's place in the cluster
    gpu: str


class GpuCost(NamedTuple):
    """A GPU's clear cost as the picks read it."""
    wait_s: float
    moves: int
    order: int
    gpu: str
    tenants: tuple | list

    def rank(self) -> CostRank:
        """How it sorts (all but the tenants)."""
        return CostRank(self.wait_s, self.moves, self.order, self.gpu)


class NodeScore(NamedTuple):
    """How a node's cheapest GPUs for a gang compare (smaller first)."""
    wait_s: float   # the longest wait among them
    moves: int      # moves in all
    order: int      # the first one's place in the cluster


class ClearStep(NamedTuple):
    """A GPU after moving its first ``moved`` tenants (in ``clear_cost``'s order)."""
    free: float        # free room then
    tenants_left: int
    util_room: float   # utilisation room beside the tenants left (inf: none left)
    wait_s: float      # until all of those may be moved
    moved: int
    tenants: list      # every tenant, in the order they go


class ClearSteps(NamedTuple):
    """What ``clear_cost`` reads of a GPU, whatever the job's size (``clear_steps``)."""
    free: float
    tenants: int
    util_room: float | None   # beside the tenants (None: idle)
    moves: tuple              # ClearStep per tenant moved, in order


class MinRunTimer(NamedTuple):
    """A tenant inside its minimum run, whose wait falls with time."""
    place: int        # its place in the GPU's clear order
    last_start: float
    min_run: float


class ClearRead(NamedTuple):
    """A ``ClearIndex`` read begun for one job size (``ClearIndex.start``)."""
    steps: object        # GangClearSteps: the GPUs' steps for the gang size
    redo_steps: set      # GPUs whose steps to work out again
    redo: object         # GPUs whose costs to work out again (but for those timed now)
    new: bool            # the costs are new: every up GPU is priced


class ClearClock(NamedTuple):
    """What brings a GPU's ``clear_steps`` to a later time (``retimed``)."""
    waits: tuple     # each tenant's wait, in the steps' order
    timers: tuple    # MinRunTimer of those inside their minimum run


class Reach(NamedTuple):
    """A GPU's room once its tenants ready within the horizon are gone (``RoomIndex``)."""
    memory: float      # free fraction
    util_room: float   # utilisation room beside the tenants left


class ReachMoment(NamedTuple):
    """A heap entry: when a tenant of ``gpu`` becomes ready within the horizon,
    which changes its reach from ``reach`` (if it is still that)."""
    at: float
    gpu: str
    reach: Reach
