"""Where a ``k``-GPU gang goes on a ``FreeMap``: one node if possible, else the fewest nodes.

``place_gang`` is ``FreeMap.gang_place`` for ``k > 1`` once enough GPUs fit. It reads
the map's search groups (GPUs grouped by memory size and band, each sorted by free
room) and changes nothing. Imports only ``placement`` (and ``freemap`` for its type).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from operator import itemgetter
from typing import TYPE_CHECKING, Callable

from .placement import EPS, GANG_LOOKAHEAD, Need, layout

if TYPE_CHECKING:
    from .freemap import FreeMap

_GID = itemgetter(2)       # a search key's GPU id

Ok = Callable[[str], bool] | None
Placed = list[tuple[str, float]]


def place_gang(fm: FreeMap, k: int, need: Need, ok: Ok, min_band: int | None) -> Placed | None:
    """``k`` distinct GPUs that each fit ``need`` (the rule of ``FreeMap.gang_place``).

    With one group searched, the scan stops soon after a node first collects ``k``;
    with several (``over_groups``), the node with the fewest fitting GPUs in the whole
    cluster wins.
    """
    groups = fm._searched(min_band)
    if len(groups) > 1:   # no early stop: the fewest fitting GPUs over the whole cluster
        return over_groups(fm, k, need, ok, min_band, groups)
    by_node: dict[str, Placed] = {}
    gpus = fm.gpus
    for mem, band, keys in groups:
        f = need(fm._rep[mem])
        check = ok if (min_band is None or band == min_band) else None
        block = None   # free room at which some node first held the gang
        extra = 0
        for free, _, gid in keys[bisect_left(keys, (f - EPS,)):]:
            if block is not None:
                extra += 1
                if free > block + EPS or extra > GANG_LOOKAHEAD:
                    break
            if check is not None and not check(gid):
                continue
            cands = by_node.setdefault(gpus[gid].node, [])
            cands.append((gid, f))
            if block is None and len(cands) == k:
                block = free
    whole = [c for c in by_node.values() if len(c) >= k]
    if whole:
        return min(whole, key=lambda c: (len(c), fm.order[c[0][0]]))[:k]
    return span(fm, k, by_node)


def span(fm: FreeMap, k: int, by_node: dict[str, Placed]) -> Placed | None:
    """A gang no one node holds, over the fewest nodes (each node's fitting GPUs in
    ``by_node``, tightest first): the smallest node that finishes it, else the biggest."""
    if fm.cluster.gang_nodes is not None:
        by_node = {n: c for n, c in by_node.items() if fm.cluster.spans_onto(n)}
    if sum(map(len, by_node.values())) < k:
        return None
    chosen: Placed = []
    first = {n: fm.order[c[0][0]] for n, c in by_node.items()}
    nodes = sorted(by_node, key=lambda n: (-len(by_node[n]), first[n]))
    left = k
    while left > 0:
        done = [n for n in nodes if len(by_node[n]) >= left]
        node = min(done, key=lambda n: (len(by_node[n]), first[n])) if done else nodes[0]
        nodes.remove(node)
        take = by_node[node][:left]
        chosen += take
        left -= len(take)
    return chosen


def over_groups(fm: FreeMap, k: int, need: Need, ok: Ok, min_band: int | None,
                groups: list[tuple[int, int, list]]) -> Placed | None:
    """A gang searched over several groups: of the nodes with at least ``k`` fitting
    GPUs, the one with the fewest (then the lowest cluster order of its first GPU in
    scan order), its first ``k`` in scan order; if there is none, ``span``.

    The same answer as collecting every node's list, at a fraction of the cost: the
    nodes are counted in C (``Counter``) and only the chosen node's GPUs are ordered.
    """
    gids: list[str] = []
    fracs: list[float] = []   # the fraction on each of ``gids``
    fits: list[tuple[float, Callable | None]] = []   # per group: (fraction, check)
    for mem, band, keys in groups:
        f = need(fm._rep[mem])
        check = ok if (min_band is None or band == min_band) else None
        found = keys[bisect_left(keys, (f - EPS,)):]
        before = len(gids)
        gids += (map(_GID, found) if check is None else
                 [gid for _, _, gid in found if check(gid)])
        fracs += [f] * (len(gids) - before)
        fits.append((f, check))
    lay = layout(fm.cluster)
    nodes = list(map(lay.node_of.__getitem__, gids))
    counts = Counter(nodes)
    fewest = min((c for c in counts.values() if c >= k), default=None)
    if fewest is None:   # no node holds it: it spans nodes, from this same scan
        by_node: dict[str, Placed] = {}
        for gid, node, f in zip(gids, nodes, fracs):
            by_node.setdefault(node, []).append((gid, f))
        return span(fm, k, by_node)
    tied = [n for n, c in counts.items() if c == fewest]
    node = tied[0]
    if len(tied) > 1:
        first = dict(zip(reversed(nodes), reversed(gids)))   # each node's first GPU
        node = min(tied, key=lambda n: fm.order[first[n]])
    at = {(mem, band): i for i, (mem, band, _) in enumerate(groups)}
    mine = []   # (scan position, GPU id, fraction) of the node's fitting GPUs
    for gid in lay.on_node[node]:
        i = at.get(fm._group(gid))
        if i is None or gid in fm.closed:
            continue
        f, check = fits[i]
        free, order = fm.free(gid), fm.order[gid]
        keys = groups[i][2]
        j = bisect_left(keys, (free, order, gid))
        if (j < len(keys) and keys[j][2] == gid and free >= f - EPS
                and (check is None or check(gid))):
            mine.append(((i, free, order), gid, f))
    mine.sort()
    return [(gid, f) for _, gid, f in mine[:k]]
