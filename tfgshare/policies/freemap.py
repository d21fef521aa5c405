"""``FreeMap``: the free room of every up GPU, kept sorted so that placement is a bisection.

Policies plan a round's placements on a FreeMap (``best_fit``, ``gang_place``,
``take``, ``release``) under the rule in ``placement``; fgs and gandiva keep one in
their memo (fgs copies it each round to plan on, gandiva plans on it directly).
Imports ``base``, ``gang``, ``layer``, ``placement`` and sortedcontainers.
"""

from __future__ import annotations

import heapq
import itertools
import math
from bisect import bisect_left, insort
from typing import Callable, Iterable

from sortedcontainers import SortedList

from .base import ClusterSnapshot, Fragment, JobView
from .gang import place_gang
from .layer import layer as _layer
from .placement import (EPS, MIN_FRACTION, GpuUse, Need, as_need,
                        free_fraction, layout, to_fragments, usage)

_ONE = 1 << 1100           # floats times this are integers (exact sums, see FreeMap.total_free)


class FreeMap:
    """Free capacity of every up GPU, kept sorted so placement is a bisection.

    Built once per ``decide`` call; ``take`` and ``release`` update it as a
    policy plans. GPUs at ``max_tenants``, with no room, or reserved with
    ``close`` are left out of the search. GPUs are grouped by memory size and
    by ``band(use)``, an optional second capacity (fgs: how much utilisation
    one more tenant may add, in steps) with ``empty_band`` for an idle GPU; within
    a group they are ordered by (free fraction, cluster order). Searches with
    ``min_band`` skip lower bands, consult ``ok`` only in band ``min_band``
    and take higher bands as they are.
    """

    def __init__(self, cluster: ClusterSnapshot, jobs: Iterable[JobView] = (),
                 max_tenants: int | None = None,
                 use: dict[str, GpuUse] | None = None,
                 band: Callable[[GpuUse], int] | None = None, empty_band: int = 0,
                 rank_used: bool = False):
        self.cluster = cluster
        self.reserve_mb = cluster.reserve_mb
        self.max_tenants = max_tenants
        if use is None:
            use = usage(cluster, jobs)
        else:
            use = {k: GpuUse(v.used, v.tenants, v.util) for k, v in use.items()}
        self.use = use
        lay = layout(cluster)
        self.gpus = lay.gpus
        self.sizes = lay.sizes          # memory sizes of the up GPUs (read only)
        self.order = lay.order
        self._rep = lay.rep
        self._whole = lay.whole
        self.closed: set[str] = set()   # GPUs reserved for the rest of this plan
        self._shared = False            # tables shared with the map this one was copied from
        self._owned: set[tuple[int, int]] | None = None   # groups copied since (None: all own)
        self.version = 0                # bumped on every change, for callers' caches
        self._max_free: tuple[int, dict] = (-1, {})   # (version, min_band -> max free)
        self._kth: tuple[int, dict] = (-1, {})   # (version, (k, min_band) -> k-th most free)
        self._total: tuple[int, float] = (-1, 0.0)    # (version, total_free())
        self._exact: int | None = None   # total_free() times _ONE, exact (kept once asked)
        self._touched: dict[str, int] = {}   # GPUs changed since: their part of _exact
        self._bandf = band
        self._empty_band = empty_band
        self._band: dict[str, int] = {}  # band of each GPU that has tenants
        self._free: dict[str, float] = {}
        reserve = self.reserve_mb
        gpus = self.gpus
        self._groups: dict[tuple[int, int], list[tuple[float, int, str]]] = {}
        for mem, empty in lay.empty.items():
            keys = [k for k in empty if k[2] not in use] if use else list(empty)
            self._groups[(mem, empty_band if band is not None else 0)] = keys
        full = max_tenants if max_tenants is not None else 1 << 30
        groups, bands, frees, order = self._groups, self._band, self._free, lay.order
        lowest = MIN_FRACTION - EPS
        for gid, u in use.items():
            g = gpus.get(gid)
            if g is None or u.tenants >= full:
                continue   # not searchable; its free room is worked out when asked
            mem = g.memory_mb
            free = frees[gid] = 1.0 - u.used - (u.tenants + 1) * reserve / mem  # free_fraction
            if free >= lowest:
                b = bands[gid] = band(u) if band is not None else 0
                keys = groups.get((mem, b))
                if keys is None:
                    keys = groups[(mem, b)] = []
                keys.append((free, order[gid], gid))
        if use:
            for keys in self._groups.values():
                keys.sort()
        self._bands: dict[int, list[int]] = {}   # memory size -> its bands, sorted
        for mem, b in sorted(self._groups):
            self._bands.setdefault(mem, []).append(b)
        self._mems = sorted(self._bands)
        # ``rank_used``: the used up GPUs kept sorted by (-free, order, GPU) (``most_free_used``)
        # by the map that built them (``_rank_owner``), brought up to date when read from
        # the GPUs changed since (their keys as last sorted); a copy reads its owner's and
        # keeps apart the GPUs it changed itself
        self._rank_owner: FreeMap | None = None
        self._changed: set[str] = set()
        if rank_used:
            self._rank_owner = self
            self._ranked = SortedList((-self.free(gid), lay.order[gid], gid)
                                      for gid in use if gid in gpus)
            self._unsorted: dict[str, tuple | None] = {}   # GPU -> its key in _ranked

    def copy(self) -> "FreeMap":
        """A copy to plan on; this map must not change while the copy is in use (the
        copy shares its tables until the copy's first change, and each search group
        until that group changes)."""
        c = object.__new__(FreeMap)
        c.__dict__.update(self.__dict__)
        c._shared = True
        c._changed = set(self._changed)
        return c

    def most_free_used(self) -> Iterable[tuple[float, int, str]] | None:
        """The used up GPUs as (free, cluster order, GPU), most free room first, then
        cluster order, as they are now (later changes to this map are not read); None if
        this map does not rank them (``rank_used``)."""
        owner = self._rank_owner
        if owner is None:
            return None
        ranked = owner._sorted()
        changed, use = set(self._changed), self.use   # as now, while the caller changes it
        mine = sorted((-self.free(gid), self.order[gid], gid) for gid in changed
                      if gid in use and gid in self.gpus)
        kept = (k for k in ranked if k[2] not in changed)
        return ((-neg, order, gid) for neg, order, gid in heapq.merge(kept, mine))

    def _sorted(self) -> SortedList:
        """This (owner) map's ranked used GPUs, brought up to date."""
        ranked, use, order = self._ranked, self.use, self.order
        for gid, old in self._unsorted.items():
            if old is not None:
                ranked.remove(old)
            if gid in use:
                ranked.add((-self.free(gid), order[gid], gid))
        self._unsorted = {}
        return ranked

    def _own(self) -> None:
        """Make the tables shared with the map copied from this map's own (before a change)."""
        if not self._shared:
            return
        self._shared = False
        self.use = _layer(self.use)
        self.closed = set(self.closed)
        self._band = _layer(self._band)
        self._free = _layer(self._free)
        self._touched = dict(self._touched)
        self._groups = dict(self._groups)   # each group's list copied when it changes
        self._owned: set[tuple[int, int]] = set()
        self._bands = {k: list(v) for k, v in self._bands.items()}
        self._mems = list(self._mems)

    def _group_keys(self, group: tuple[int, int]) -> list | None:
        """The sorted keys of this group, this map's own to change (None: no such group)."""
        keys = self._groups.get(group)
        if keys is not None and self._owned is not None and group not in self._owned:
            keys = self._groups[group] = list(keys)
            self._owned.add(group)
        return keys

    def _open(self, u: GpuUse | None, free: float) -> bool:
        if free < MIN_FRACTION - EPS:
            return False
        return not (self.max_tenants is not None and u is not None
                    and u.tenants >= self.max_tenants)

    def free(self, gpu_id: str) -> float:
        """The fraction one more tenant could get on this GPU now."""
        free = self._free.get(gpu_id)
        if free is None:
            free = self._free[gpu_id] = free_fraction(self.gpus[gpu_id], self.use.get(gpu_id),
                                                      self.reserve_mb)
        return free

    def tenants(self, gpu_id: str) -> int:
        """How many jobs hold a fragment of this GPU now."""
        u = self.use.get(gpu_id)
        return u.tenants if u else 0

    def total_free(self) -> float:
        """Free room summed over all up GPUs (each as it could take one more tenant).

        The exact sum, rounded once (as ``math.fsum``), so it does not depend on
        the order GPUs were used in; after the first call it is brought up to
        date from the GPUs changed since, O(changed GPUs).
        """
        if self._total[0] == self.version:
            return self._total[1]
        if self._exact is None:
            total = _exact(self._whole)
            for gid in self.use:
                total += self._gain(gid)
        else:
            total = self._exact
            for gid, old in self._touched.items():
                total += self._gain(gid) - old
        self._exact, self._touched = total, {}
        value = total / _ONE
        self._total = (self.version, value)
        return value

    def _gain(self, gid: str) -> int:
        """What ``gid`` adds to the exact total now, over its whole-GPU room (x ``_ONE``)."""
        g = self.gpus.get(gid)
        if g is None or gid not in self.use:
            return 0
        empty = _EMPTY.get((g.memory_mb, self.reserve_mb))
        if empty is None:
            empty = _EMPTY[(g.memory_mb, self.reserve_mb)] = _exact(
                free_fraction(g, None, self.reserve_mb))
        return _exact(max(0.0, self.free(gid))) - empty

    def _searched(self, min_band: int | None) -> list[tuple[int, int, list]]:
        """(memory size, band, sorted keys) of the non-empty groups searched, in fixed order."""
        groups = self._groups
        out = []
        for mem in self._mems:
            bands = self._bands[mem]
            start = 0 if min_band is None else bisect_left(bands, min_band)
            for b in bands[start:]:
                keys = groups[(mem, b)]
                if keys:
                    out.append((mem, b, keys))
        return out

    def max_free(self, min_band: int | None = None) -> float:
        """The largest fraction any open GPU could give one more tenant (0 if none)."""
        if self._max_free[0] != self.version:
            self._max_free = (self.version, {})
        memo = self._max_free[1]
        best = memo.get(min_band)
        if best is None:
            best = 0.0
            for _, _, keys in self._searched(min_band):
                if keys[-1][0] > best:
                    best = keys[-1][0]
            memo[min_band] = best
        return best

    def count_fitting(self, need: float | Need, min_band: int | None = None) -> int:
        """How many open GPUs could take one more tenant of this size (``ok`` aside)."""
        need = as_need(need)
        n = 0
        for mem, _, keys in self._searched(min_band):
            n += len(keys) - bisect_left(keys, (need(self._rep[mem]) - EPS,))
        return n

    def kth_free(self, k: int, min_band: int | None = None) -> float:
        """The ``k``-th largest free room among the open GPUs searched (-inf: fewer than ``k``).

        For one GPU size: ``count_fitting(f, min_band) >= k`` exactly when this
        is at least ``f - EPS``.
        """
        if self._kth[0] != self.version:
            self._kth = (self.version, {})
        memo = self._kth[1]
        got = memo.get((k, min_band))
        if got is None:
            tops = heapq.nlargest(k, itertools.chain.from_iterable(
                keys[-k:] for _, _, keys in self._searched(min_band)))
            got = memo[(k, min_band)] = tops[-1][0] if len(tops) == k else -math.inf
        return got

    def best_fit(self, need: float | Need, exclude: Iterable[str] = (),
                 ok: Callable[[str], bool] | None = None,
                 min_band: int | None = None,
                 skip_below: int | None = None) -> tuple[str, float] | None:
        """The GPU with the smallest free room that still fits, and the fraction.

        Skips GPUs in ``exclude`` and those for which ``ok(gpu_id)`` is false.
        Between GPU sizes the smaller free room in MB wins. None if nothing fits.
        ``skip_below``: bands below it are not searched (the caller knows ``ok`` is
        false there); ``ok`` is asked in every other band.
        """
        need = as_need(need)
        exclude = exclude if isinstance(exclude, (set, frozenset, dict)) else set(exclude)
        best = None
        for mem, band, keys in self._searched(min_band if skip_below is None else skip_below):
            f = need(self._rep[mem])
            check = ok if (min_band is None or band == min_band) else None
            i = bisect_left(keys, (f - EPS,))
            while i < len(keys) and (keys[i][2] in exclude
                                     or (check is not None and not check(keys[i][2]))):
                i += 1
            if i == len(keys):
                continue
            free, order, gid = keys[i]
            cand = (free * mem, order, gid, f)
            if best is None or cand < best:
                best = cand
        return None if best is None else (best[2], best[3])

    def worst_fit(self, need: float | Need) -> tuple[str, float] | None:
        """The GPU with the most free room (MB) if it fits ``need``, and the fraction.

        None if nothing fits.
        """
        need = as_need(need)
        best = None
        for mem, _, keys in self._searched(None):
            f = need(self._rep[mem])
            top = keys[-1][0]
            if top < f - EPS:
                continue
            free, order, gid = keys[bisect_left(keys, (top - EPS,))]
            cand = (-free * mem, order, gid, f)
            if best is None or cand < best:
                best = cand
        return None if best is None else (best[2], best[3])

    chooser = None   # picks between the places that fit (``frag_choice``); None: tightest

    def gang_place(self, k: int, need: float | Need,
                   ok: Callable[[str], bool] | None = None,
                   min_band: int | None = None) -> list[tuple[str, float]] | None:
        """``k`` distinct GPUs that each fit ``need``: one node if possible, else fewest nodes.

        The node with the fewest fitting GPUs wins (best fit at node level: whole
        nodes stay whole for bigger gangs), its tightest first. With one search
        group, the scan of fitting GPUs (tightest first) stops once a node has
        collected ``k`` and GPUs with the same free room are done (at most
        ``GANG_LOOKAHEAD`` further); with several, every node counts
        (``gang.place_gang``). If no node can hold the gang it spans the fewest
        nodes. Returns (gpu id, fraction) pairs, or None. With a ``chooser``, it
        picks the node (and GPUs) among every place that fits on one node.
        """
        if self.chooser is not None and self.chooser.active:
            need = as_need(need)
            got = self.chooser.choose(self, max(1, k), self.fitting(need, ok, min_band))
            if got is not None or k <= 1:
                return got    # a gang no one node holds spans nodes as below
        if k <= 1:
            one = self.best_fit(need, ok=ok, min_band=min_band)
            return None if one is None else [one]
        need = as_need(need)
        if self.count_fitting(need, min_band) < k:
            return None
        return place_gang(self, k, need, ok, min_band)

    def fitting(self, need: Need, ok: Callable[[str], bool] | None = None,
                min_band: int | None = None) -> dict[str, list[tuple[str, float]]]:
        """Every open GPU that fits ``need`` (``ok`` and ``min_band`` as in ``best_fit``),
        by node, tightest first: (GPU id, fraction) pairs."""
        by_node: dict[str, list[tuple[float, int, str, float]]] = {}
        gpus = self.gpus
        for mem, band, keys in self._searched(min_band):
            f = need(self._rep[mem])
            check = ok if (min_band is None or band == min_band) else None
            for free, order, gid in keys[bisect_left(keys, (f - EPS,)):]:
                if check is None or check(gid):
                    by_node.setdefault(gpus[gid].node, []).append((free * mem, order, gid, f))
        return {n: [(c[2], c[3]) for c in sorted(cs)] for n, cs in by_node.items()}

    # ---- updates ---------------------------------------------------------

    def _group(self, gid: str) -> tuple[int, int]:
        band = self._band.get(gid)
        if band is None:
            band = self._empty_band if self._bandf is not None else 0
        return (self.gpus[gid].memory_mb, band)

    def _drop(self, gid: str) -> None:
        keys = self._group_keys(self._group(gid))
        if not keys:
            return
        key = (self.free(gid), self.order[gid], gid)
        i = bisect_left(keys, key)
        if i < len(keys) and keys[i] == key:
            del keys[i]

    def close(self, gpu_ids: Iterable[str]) -> None:
        """Take these GPUs out of the search for the rest of this plan (a reservation)."""
        for gid in gpu_ids:
            if gid in self.gpus and gid not in self.closed:
                self._own()
                self._drop(gid)
                self.closed.add(gid)
                self.version += 1

    def _move(self, gid: str, d_used: float, d_tenants: int, d_util: float = 0.0) -> None:
        u = self.use.get(gid)
        # a new GpuUse, never changed in place: copies of this map share them
        if u is None:
            u = GpuUse(0.0 + d_used, d_tenants, 0.0 + d_util)
        else:
            u = GpuUse(u.used + d_used, u.tenants + d_tenants, u.util + d_util)
        self.set_use(gid, u)

    def set_use(self, gid: str, u: GpuUse | None) -> None:
        """Replace what the tenants of ``gid`` hold (None or no tenants: idle)."""
        g = self.gpus[gid]
        self._own()
        self.version += 1
        self._drop(gid)
        owner = self._rank_owner
        if owner is self:
            if gid not in self._unsorted:
                self._unsorted[gid] = ((-self.free(gid), self.order[gid], gid)
                                       if gid in self.use else None)
        elif owner is not None:
            self._changed.add(gid)
        if self._exact is not None and gid not in self._touched:
            self._touched[gid] = self._gain(gid)   # its part of the total as last summed
        if u is None or u.tenants <= 0:
            self.use.pop(gid, None)
            u = None
            self._band.pop(gid, None)
        else:
            self.use[gid] = u
            self._band[gid] = self._bandf(u) if self._bandf is not None else 0
        free = self._free[gid] = free_fraction(g, u, self.reserve_mb)
        if gid not in self.closed and self._open(u, free):
            group = self._group(gid)
            keys = self._group_keys(group)
            if keys is None:
                keys = self._groups[group] = []
                if self._owned is not None:
                    self._owned.add(group)
                if group[0] not in self._bands:
                    insort(self._mems, group[0])
                insort(self._bands.setdefault(group[0], []), group[1])
            insort(keys, (free, self.order[gid], gid))

    def follow(self, gpu_ids: Iterable[str], use: dict[str, GpuUse]) -> None:
        """Bring these GPUs (their tenants changed) up to date with ``use``: a map kept
        between rounds costs the GPUs that changed, not a rebuild of every GPU."""
        for gid in gpu_ids:
            if gid in self.gpus:
                self.set_use(gid, use.get(gid))
            elif gid in use:   # on a down node: not planned on
                self.use[gid] = use[gid]
            else:
                self.use.pop(gid, None)

    def refresh(self, gpu_id: str) -> None:
        """Re-read the band of a GPU whose tenants changed outside take/release."""
        self._move(gpu_id, 0.0, 0)

    def take(self, fragments: Iterable[Fragment | tuple[str, float]],
             util: float = 1.0) -> None:
        """Record a new tenant of this utilisation holding these fragments."""
        for frag in fragments:
            gid, f = (frag.gpu, frag.fraction) if isinstance(frag, Fragment) else frag
            self._move(gid, f, 1, util)

    def release(self, fragments: Iterable[Fragment | tuple[str, float]],
                util: float = 1.0) -> None:
        """Record that the tenant (of this utilisation) holding these fragments left."""
        for frag in fragments:
            gid, f = (frag.gpu, frag.fraction) if isinstance(frag, Fragment) else frag
            if gid in self.gpus:
                self._move(gid, -f, -1, -util)



_EMPTY: dict[tuple[int, float], int] = {}   # (memory, reserve) -> an idle GPU's room, exact


def _exact(x: float) -> int:
    """``x`` times ``_ONE``, exactly (every float is a multiple of 2**-1074)."""
    n, d = x.as_integer_ratio()
    return n * (_ONE // d)


def best_fit(cluster: ClusterSnapshot, jobs: Iterable[JobView], need: float | Need,
             max_tenants: int | None = None) -> Fragment | None:
    """The tightest fragment that fits ``need`` on the cluster as the jobs hold it."""
    got = FreeMap(cluster, jobs, max_tenants).best_fit(need)
    return None if got is None else Fragment(*got)


def gang_place(cluster: ClusterSnapshot, jobs: Iterable[JobView], k: int,
               need: float | Need, max_tenants: int | None = None) -> tuple[Fragment, ...] | None:
    """``k`` fragments on distinct GPUs, one node if possible, else fewest nodes."""
    got = FreeMap(cluster, jobs, max_tenants).gang_place(k, need)
    return None if got is None else to_fragments(got)
