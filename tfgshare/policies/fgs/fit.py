"""fgs phase 2, fit: a round's working state, and whether a job fits where.

``RoundState`` holds what one ``decide`` call plans on (a copy of the memo's
FreeMap, the tenants of each GPU, the actions so far) and answers the fit
questions every later phase asks: a job's size (``size``, ``need``), whether a
GPU has room and stays calm for one more tenant (``room``, ``calm``,
``util_room``), whether a tenant may be moved (``movable``, ``may_move``), and
takes or releases room as the round acts (``take``, ``release``). The phases
that act on it each receive it and share nothing else: placing jobs on the
best-fit fragments (``best_fit.BestFit``), making room
(``make_room.MakeRoom``) and consolidation (``consolidate.Consolidate``).

Imports: ``policies`` below fgs, ``fgs.records``, ``fgs.order`` and
``fgs.memo``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Collection, Sequence

from ..base import Action, ClusterSnapshot, JobView
from ..freemap import FreeMap
from ..interference import room_for
from ..placement import EPS, GpuUse, fraction_for
from .memo import FgsMemo
from .order import BANDS
from .records import MAY_LATER, MAY_NEVER, MAY_NOW, JobSize, MayMove, Movability

if TYPE_CHECKING:
    from .policy import Fgs

__all__ = ["SLACK", "RoundState", "room_band", "sampling_fraction", "util_of"]

SLACK = 1e-9   # margin over float rounding in the bounds the shortcuts check


def sampling_fraction(pol: "Fgs", gpu) -> float:
    """The sampling fragment on this GPU for a job that requests none (not idle)."""
    mb = pol.sample_memory_mb
    return pol.sample_fraction if mb is None else mb / gpu.memory_mb


def util_of(job: JobView) -> float:
    """A job's single-tenant GPU utilisation: sampled, else 1 (the safe guess)."""
    return job.sample.gpu_util if job.sample is not None else 1.0


def room_band(room: float) -> int:
    """A GPU's utilisation room (``room_for``) in steps of 1/BANDS (-1: no room): the band
    the FreeMap indexes it by."""
    return -1 if room < 0 else (BANDS if room >= 1.0 else int(room * BANDS))


class RoundState:
    """The state of one ``decide`` call (free room, tenants, actions so far) and the fit
    questions every phase asks of it; each phase (``BestFit``, ``MakeRoom``,
    ``Consolidate``) receives it and acts on it."""

    def __init__(self, pol: "Fgs", now: float, cluster: ClusterSnapshot,
                 jobs: Sequence[JobView], free: FreeMap | None = None,
                 memo: "FgsMemo | None" = None):
        self.pol = pol
        self.memo = memo if memo is not None else FgsMemo()
        self.now = now
        self.cluster = cluster
        self.reserve = cluster.reserve_mb
        self.jobs = jobs
        self._holders: dict[str, list[JobView]] | None = None
        self.free = free if free is not None else FreeMap(
            cluster, jobs, max_tenants=pol.max_cotenants, band=self.band, empty_band=BANDS,
            rank_used=True)
        self.up = len(self.free.gpus)
        self.moves_left = pol.max_moves
        # (gang size, sampling) -> sizes that found no room since the last
        # placement; only kept when all GPUs are one size
        self.failed: dict[tuple[int, bool], list[JobSize]] = {}
        self.rep = next(iter(self.free.gpus.values())) if len(self.free.sizes) == 1 else None
        self.actions: list[Action] = []
        self.acted: set[str] = set()
        # per round, actions apart: (job id, gang size) -> may move now / ever
        self._movable: dict[tuple[str, int], MayMove] = {}

    def movable(self, holder: JobView, size: int) -> bool:
        """Whether a running job may be moved now for a job of ``size`` GPUs."""
        return holder.id not in self.acted and self.may_move(holder, size).now

    def may_move(self, holder: JobView, size: int) -> MayMove:
        """Whether a job holding GPUs may be moved for a job of ``size`` GPUs now, and
        once past its minimum run, as if it were not acted on this round (kept per round).

        Never one that already waited past its own bound (it was promoted once):
        otherwise promoted jobs would take turns suspending each other.
        """
        key = (holder.id, size)
        got = self._movable.get(key)
        if got is None:
            # what the view alone decides is kept in the memo until the view changes
            moving = self.memo.movability
            seen = moving.get(holder.id)
            if seen is None or seen.view is not holder:
                pol = self.pol
                may = pol.may_be_moved(holder)
                seen = moving[holder.id] = Movability(holder, may,
                                                      pol.min_run(holder) if may else 0.0)
            if not (seen.may_be_moved and holder.num_gpus <= size):
                got = MAY_NEVER
            else:
                last = holder.last_start
                got = (MAY_NOW if last is None or self.now - last >= seen.min_run
                       else MAY_LATER)
            self._movable[key] = got
        return got

    def need(self, job: JobView, sample_only: bool = False):
        """The job's fraction as a function of the GPU."""
        reserve, headroom = self.reserve, self.pol.headroom
        if sample_only:
            return lambda g: fraction_for(job, g, headroom, reserve, self.sample_default(g))
        return lambda g: fraction_for(job, g, headroom, reserve)

    def sample_default(self, gpu) -> float:
        """The sampling fragment on this GPU for a job that requests none (not idle)."""
        return sampling_fraction(self.pol, gpu)

    @property
    def holders(self) -> dict[str, list[JobView]]:
        """GPU id -> the jobs holding it at the start of this round (built when first asked)."""
        if self._holders is None:   # the memo's, kept up to date from the changed jobs
            self._holders = self.memo.holdings.by_gpu()
        return self._holders

    def calm(self, gid: str, util: float, without: Collection[JobView] = ()) -> bool:
        """Whether one more tenant of this utilisation keeps every tenant under the cap.

        ``without``: tenants taken as gone.
        """
        use = self.free.use.get(gid)
        if use is None:
            return True
        n, total = use.tenants, use.util
        for h in without:
            n -= 1
            total -= util_of(h)
        if n <= 0:
            return True
        return util <= room_for(n, total, self.pol.slowdown_cap,
                                self.pol.interference_overhead) + EPS

    def room(self, gid: str, f: float, util: float) -> bool:
        """Whether ``gid`` could take one more tenant of fraction ``f`` and this utilisation."""
        return (self.free.free(gid) >= f - EPS and gid not in self.free.closed
                and self.free.tenants(gid) < self.pol.max_cotenants and self.calm(gid, util))

    def util_room(self, gid: str) -> float:
        """The largest utilisation one more tenant of ``gid`` may have (-1: none)."""
        use = self.free.use.get(gid)
        if use is None:
            return 1.0
        return room_for(use.tenants, use.util, self.pol.slowdown_cap,
                        self.pol.interference_overhead)

    def band(self, use: GpuUse) -> int:
        """A GPU's utilisation room in steps of 1/BANDS (-1: no room), from its tenants."""
        return room_band(room_for(use.tenants, use.util, self.pol.slowdown_cap,
                                  self.pol.interference_overhead))

    def take(self, job_id: str, util: float, placed: list[tuple[str, float]]) -> None:
        """Take the room ``placed`` for a job of this utilisation."""
        self.free.take(placed, util)

    def release(self, job: JobView) -> None:
        """Give back the room the job holds."""
        self.free.release(job.fragments, util_of(job))

    def size(self, job: JobView, sample_only: bool = False) -> JobSize:
        """The job's fraction on this cluster's GPU size (inf if sizes differ) and
        utilisation to check."""
        u = -1.0 if sample_only else util_of(job)
        if self.rep is None:
            return JobSize(math.inf, u)
        default = self.sample_default(self.rep) if sample_only else None
        return JobSize(fraction_for(job, self.rep, self.pol.headroom, self.reserve, default), u)
