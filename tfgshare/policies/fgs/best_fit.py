"""fgs phase 3, best fit: place jobs, in queue order, on the tightest fragments that fit.

``BestFit`` walks a queue (``order``) and starts each job on the best-fit
fragments (the smallest free room that fits it, ``FreeMap.gang_place``; gangs
on one node if they can) whose GPUs stay calm beside it, or for a sampling
phase on a sampling fragment (``place_sample``). A job that does not fit is
handed to the walk's ``on_fail`` (making room for a promoted job,
consolidation for the first shortest-first job); the walk stops once none of
the jobs left could fit anywhere.

Imports: ``policies`` below fgs, ``fgs.records``, ``fgs.order`` and ``fgs.fit``.
"""

from __future__ import annotations

import math
from typing import Callable, Iterable

from ..base import JobView, Start
from ..placement import EPS, exclusive_fraction, to_fragments
from .fit import RoundState
from .order import BANDS, SizedWalk, SmallestLeft, bucket_floor, search_band
from .records import JobSize, SizeBucket

__all__ = ["BestFit"]


class BestFit:
    """Placing jobs in queue order on best-fit fragments, on one round's state."""

    def __init__(self, state: RoundState) -> None:
        self.round = state
        # the last fits_somewhere question ((map version, fraction, utilisation)) and answer
        self._fits_query: tuple | None = None
        self._fits_found = False

    def place_sample(self, job: JobView) -> list[tuple[str, float]] | None:
        """Fragments for a sampling phase: alone on idle GPUs, else on the least loaded."""
        k = job.num_gpus
        if self.round.pol.sample_on_idle:
            reserve = self.round.reserve
            need = self.round.need(job, True)
            # only an idle GPU has the whole GPU less one reserve free
            got = self.round.free.gang_place(k, lambda g: exclusive_fraction(g, reserve))
            if got is not None:
                return [(gid, need(self.round.free.gpus[gid])) for gid, _ in got]
            f = need(self.round.rep) if self.round.rep is not None else 0.0
            for band in range(BANDS, -1, -1):   # most utilisation room first
                if self.round.free.max_free(band) + EPS < f:
                    continue
                got = self.round.free.gang_place(k, need, min_band=band)
                if got is not None:
                    return got
            return self.round.free.gang_place(k, need)
        return self.round.free.gang_place(k, self.round.need(job, True))

    def fits_somewhere(self, f: float, u: float) -> bool:
        """Whether some open GPU has room ``f`` for a tenant of utilisation ``u``."""
        if f == math.inf or f > self.round.free.max_free() + EPS:
            return False
        query = (self.round.free.version, f, u)
        if self._fits_query != query:
            self._fits_found = self._search(1, f, None if u < 0 else u) is not None
            self._fits_query = query
        return self._fits_found

    def _search(self, k: int, need, u: float | None):
        """Best-fit fragments for ``k`` GPUs of this need and utilisation (None: any)."""
        if u is None:
            return self.round.free.gang_place(k, need)
        u = max(0.0, u)
        return self.round.free.gang_place(k, need, lambda gid: u <= self.round.util_room(gid) + EPS,
                                    min_band=search_band(u))

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
        if self.round.rep is None:   # GPU sizes differ: no cheap checks
            for job, _ in jobs:
                if not self.place(job, sample_only) and on_fail is not None:
                    on_fail(job)
            return
        free = self.round.free
        fail_hook_done = on_fail is None   # on_fail said False once: it does nothing more
        last = None   # (version, f, u) of the last break check that found room
        passed = rest.passed
        walk = jobs if isinstance(jobs, SizedWalk) else None
        gangs = self.round.pol.shortcuts and not sample_only

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

    def place(self, job: JobView, sample_only: bool = False,
              size: JobSize | None = None) -> bool:
        """Start the job on best-fit fragments if it fits now (``size``: from ``size()``)."""
        f, u = size if size is not None else self.round.size(job, sample_only)
        if f != math.inf:   # one GPU size: cheap checks before a search
            band = None if sample_only else search_band(u)
            if f > self.round.free.max_free(band) + EPS:
                return False
            # a job at least as big and as busy as one that just failed fails too
            for f0, u0 in self.round.failed.get((job.num_gpus, sample_only), ()):
                if f >= f0 and u >= u0:
                    return False
        if sample_only:
            placed = self.place_sample(job)
        else:
            placed = self._search(job.num_gpus, self.round.need(job), u)
        if placed is None:
            if f != math.inf:
                fails = self.round.failed.setdefault((job.num_gpus, sample_only), [])
                if len(fails) < 8:
                    fails.append(JobSize(f, u))
            return False
        self.round.failed.clear()
        self.round.take(job.id, 1.0 if sample_only else u, placed)
        self.round.actions.append(Start(job.id, to_fragments(placed), sample_only))
        self.round.acted.add(job.id)
        return True
