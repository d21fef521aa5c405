"""One fgs decision's working state: free room, tenants, and placing jobs in order.

``RoundBase`` holds what a round plans on (a copy of the memo's FreeMap, the
tenants of each GPU, the actions so far) and places jobs on best-fit
fragments in queue order, stopping a walk once none of the rest could fit.
Making room for promoted jobs (``fgs_room``) and consolidation
(``fgs_consolidate``) are mixed into the round in ``fgs``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable, Collection, Iterable, Sequence

from .base import Action, ClusterSnapshot, JobView, Start
from .fgs_queues import BANDS, FgsMemo, SmallestLeft, SizedWalk, bucket_floor
from .fgs_records import JobSize, MayMove, SizeBucket
from .freemap import FreeMap
from .interference import room_for
from .placement import EPS, GpuUse, exclusive_fraction, fraction_for, to_fragments

if TYPE_CHECKING:
    from .fgs import Fgs

__all__ = ["BANDS", "RoundBase", "sampling_fraction", "util_of"]


def sampling_fraction(pol: "Fgs", gpu) -> float:
    """The sampling fragment on this GPU for a job that requests none (not idle)."""
    mb = pol.sample_memory_mb
    return pol.sample_fraction if mb is None else mb / gpu.memory_mb


def util_of(job: JobView) -> float:
    """A job's single-tenant GPU utilisation: sampled, else 1 (the safe guess)."""
    return job.sample.gpu_util if job.sample is not None else 1.0


class RoundBase:
    """The state of one ``decide`` call: free room, tenants, and actions so far."""

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
        # the last fits_somewhere question ((map version, fraction, utilisation)) and answer
        self._fits_query: tuple | None = None
        self._fits_found = False
        self.free = free if free is not None else FreeMap(
            cluster, jobs, max_tenants=pol.max_cotenants, band=self.band, empty_band=BANDS)
        self.up = len(self.free.gpus)
        self.moves_left = pol.max_moves
        # (gang size, sampling) -> sizes that found no room since the last
        # placement; only kept when all GPUs are one size
        self.failed: dict[tuple[int, bool], list[JobSize]] = {}
        self.rep = next(iter(self.free.gpus.values())) if len(self.free.sizes) == 1 else None
        self.actions: list[Action] = []
        self.acted: set[str] = set()
        # per round, actions apart: (job id, gang size) -> may move now / ever;
        # gang size -> ready_in of every holder (holders and now are fixed in a round)
        self._movable: dict[tuple[str, int], MayMove] = {}
        self._ready: dict[int, dict[str, float]] = {}

    # ---- fitting ---------------------------------------------------------

    def need(self, job: JobView, sample_only: bool = False):
        """The job's fraction as a function of the GPU."""
        reserve, headroom = self.reserve, self.pol.headroom
        if sample_only:
            return lambda g: fraction_for(job, g, headroom, reserve, self.sample_default(g))
        return lambda g: fraction_for(job, g, headroom, reserve)

    def sample_default(self, gpu) -> float:
        """The sampling fragment on this GPU for a job that requests none (not idle)."""
        return sampling_fraction(self.pol, gpu)

    def place_sample(self, job: JobView) -> list[tuple[str, float]] | None:
        """Fragments for a sampling phase: alone on idle GPUs, else on the least loaded."""
        k = job.num_gpus
        if self.pol.sample_on_idle:
            reserve = self.reserve
            need = self.need(job, True)
            # only an idle GPU has the whole GPU less one reserve free
            got = self.free.gang_place(k, lambda g: exclusive_fraction(g, reserve))
            if got is not None:
                return [(gid, need(self.free.gpus[gid])) for gid, _ in got]
            f = need(self.rep) if self.rep is not None else 0.0
            for band in range(BANDS, -1, -1):   # most utilisation room first
                if self.free.max_free(band) + EPS < f:
                    continue
                got = self.free.gang_place(k, need, min_band=band)
                if got is not None:
                    return got
            return self.free.gang_place(k, need)
        return self.free.gang_place(k, self.need(job, True))

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
        room = room_for(use.tenants, use.util, self.pol.slowdown_cap,
                        self.pol.interference_overhead)
        return -1 if room < 0 else (BANDS if room >= 1.0 else int(room * BANDS))

    def _take(self, job_id: str, util: float, placed: list[tuple[str, float]]) -> None:
        self.free.take(placed, util)

    def _release(self, job: JobView) -> None:
        self.free.release(job.fragments, util_of(job))

    def fits_somewhere(self, f: float, u: float) -> bool:
        """Whether some open GPU has room ``f`` for a tenant of utilisation ``u``."""
        if f == math.inf or f > self.free.max_free() + EPS:
            return False
        query = (self.free.version, f, u)
        if self._fits_query != query:
            self._fits_found = self._search(1, f, None if u < 0 else u) is not None
            self._fits_query = query
        return self._fits_found

    def _search(self, k: int, need, u: float | None):
        """Best-fit fragments for ``k`` GPUs of this need and utilisation (None: any)."""
        if u is None:
            return self.free.gang_place(k, need)
        u = max(0.0, u)
        return self.free.gang_place(k, need, lambda gid: u <= self.util_room(gid) + EPS,
                                    min_band=min(BANDS, int(u * BANDS)))

    def fill(self, jobs: Iterable[tuple[JobView, JobSize]], rest: SmallestLeft,
             sample_only: bool = False,
             on_fail: Callable[[JobView], bool] | None = None) -> None:
        """Place (job, size) pairs in this order; stop once none of the rest could fit anywhere.

        ``rest`` knows the smallest size among the jobs not yet passed.
        ``on_fail(job)`` runs for a job that did not fit and says whether it
        may still change the cluster for later jobs (then the scan goes on).
        Once ``on_fail`` is done, a job bigger than any room its band could
        search is passed over, and so (``shortcuts``) is a ``k``-GPU gang for
        which fewer than ``k`` GPUs have the room (``FreeMap.kth_free``: the
        first check of its search). ``jobs`` may be a ``SizedWalk``: then a
        bucket whose every job would be passed over so is passed over whole,
        and from the first such bucket on, every bucket already so is left
        out (the room only shrinks in the walk; the stop checks this leaves
        out only stop a walk that could place nothing more).
        """
        if self.rep is None:   # GPU sizes differ: no cheap checks
            for job, _ in jobs:
                if not self.place(job, sample_only) and on_fail is not None:
                    on_fail(job)
            return
        free = self.free
        fail_hook_done = on_fail is None   # on_fail said False once: it does nothing more
        last = None   # (version, f, u) of the last break check that found room
        passed = rest.passed
        walk = jobs if isinstance(jobs, SizedWalk) else None
        gangs = self.pol.shortcuts and not sample_only

        def passed_over(f: float, band: int | None, k: int) -> bool:
            """Whether a ``k``-GPU job of fraction ``f`` fails ``place()``'s first checks now."""
            return f > free.max_free(band) + EPS or (
                gangs and k > 1 and free.kth_free(k, band) < f - EPS)

        def hopeless(name: SizeBucket) -> bool:
            """Whether every job of this size bucket is passed over (``SizedWalk``)."""
            return passed_over(bucket_floor(name), name.band, name.gpus)
        for job, size in jobs:
            passed(job.id)
            f, u = size
            if fail_hook_done:   # the cheap first checks of place(), inline
                band = None if sample_only else (BANDS if u >= 1.0 else int(max(0.0, u)
                                                                            * BANDS))
                k = job.num_gpus
                if passed_over(f, band, k):
                    smallest = rest.smallest()
                    q = (free.version, *smallest)
                    if q != last:
                        if not self.fits_somewhere(*smallest):
                            break
                        last = q
                    if walk is not None and passed_over(walk.floor, band, k):
                        walk.drop(hopeless)   # every job of its bucket is passed over too
                    continue
            if self.place(job, sample_only, size):
                continue
            busy = on_fail(job) if not fail_hook_done else False
            if not busy:
                fail_hook_done = True
                if not self.fits_somewhere(*rest.smallest()):
                    break

    def size(self, job: JobView, sample_only: bool = False) -> JobSize:
        """The job's fraction on this cluster's GPU size (inf if sizes differ) and
        utilisation to check."""
        u = -1.0 if sample_only else (job.sample.gpu_util if job.sample is not None else 1.0)
        if self.rep is None:
            return JobSize(math.inf, u)
        default = self.sample_default(self.rep) if sample_only else None
        return JobSize(fraction_for(job, self.rep, self.pol.headroom, self.reserve, default), u)

    def place(self, job: JobView, sample_only: bool = False,
              size: JobSize | None = None) -> bool:
        """Start the job on best-fit fragments if it fits now (``size``: from ``size()``)."""
        f, u = size if size is not None else self.size(job, sample_only)
        if f != math.inf:   # one GPU size: cheap checks before a search
            band = None if sample_only else min(BANDS, int(max(0.0, u) * BANDS))
            if f > self.free.max_free(band) + EPS:
                return False
            # a job at least as big and as busy as one that just failed fails too
            for f0, u0 in self.failed.get((job.num_gpus, sample_only), ()):
                if f >= f0 and u >= u0:
                    return False
        if sample_only:
            placed = self.place_sample(job)
        else:
            placed = self._search(job.num_gpus, self.need(job), u)
        if placed is None:
            if f != math.inf:
                fails = self.failed.setdefault((job.num_gpus, sample_only), [])
                if len(fails) < 8:
                    fails.append(JobSize(f, u))
            return False
        self.failed.clear()
        self._take(job.id, 1.0 if sample_only else u, placed)
        self.actions.append(Start(job.id, to_fragments(placed), sample_only))
        self.acted.add(job.id)
        return True
