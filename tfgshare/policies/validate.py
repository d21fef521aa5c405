"""The one check of a round's actions, shared by the coordinator and the simulator:
what the policy planned is what may be applied.

``check_actions`` takes the actions in list order: each job at most once, a
start only for a waiting job and a suspend or migration only for a running one,
one fragment in (0, 1] per GPU of the job on GPUs of up nodes (a job across
nodes only on nodes that take gang members), and on each GPU ``sum(fraction) +
tenants * reserve`` within 1 (``placement.fits``). What the GPUs hold comes from
the caller as an ``Occupancy``: the simulator's jobs; the live coordinator's
runners, with its moves in flight (a runner asked to stop keeps its memory until
it exits; a migration target and a start in flight are reserved) and the jobs
it may not act on though their view allows it. A placement that fits only once
a suspend or migration in the list (before or after it), or a runner now
exiting, frees its room is deferred (a start) or waits for it (a migration);
the simulator frees that room at once. ``validate`` gives the same check's refusals as messages.

Imports only the policy records and :mod:`.placement`'s accounting.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Protocol, Sequence

from .base import Action, ClusterSnapshot, Fragment, JobState, JobView, Migrate, Start, Suspend
from .placement import GpuUse, fits, layout, usage

BUSY = (JobState.SAMPLING, JobState.SUSPENDING)


class Views(Protocol):
    """Jobs by id: a dict of views, or a ``JobSet``."""

    def get(self, job_id: str) -> JobView | None:
        """The view of job ``job_id``, None if it is not live."""


@dataclass(frozen=True)
class Occupancy:
    """What the caller's GPUs hold beyond the policy's plan, and what it must not touch.

    ``held`` covers at least the GPUs the actions name (``touched_gpus``).
    """

    held: Mapping[str, GpuUse]   # per GPU: its tenants, migration targets, starts in flight
    # per GPU: what runners asked to stop still hold (the live coordinator's moves in flight)
    exiting: Mapping[str, GpuUse] = field(default_factory=dict)
    unadopted: frozenset[str] = frozenset()   # jobs not re-adopted since a restart
    pinned: frozenset[str] = frozenset()      # waiting jobs a user holds back
    # a job's state as users see it, where it says more than its view's ("migrating")
    shown: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Checked:
    """A list of actions sorted by ``check_actions``."""

    ok: list[Action] = field(default_factory=list)        # carry out now
    deferred: list[Start] = field(default_factory=list)   # reserve; start once room frees
    refused: list[tuple[Action, str, str]] = field(default_factory=list)  # (action, reason, text)
    # per GPU the actions placed on: what it holds with them (before any frees) ...
    use: dict[str, GpuUse] = field(default_factory=dict)
    # ... and what the list's suspends and migrations (of running jobs) free on it
    freeing: dict[str, GpuUse] = field(default_factory=dict)
    freeing_jobs: set[str] = field(default_factory=set)


def touched_gpus(actions: Iterable[Action]) -> set[str]:
    """The GPUs these actions place fragments on."""
    return {f.gpu for a in actions if not isinstance(a, Suspend) for f in a.fragments}


def check_actions(actions: Sequence[Action], cluster: ClusterSnapshot, jobs: Views,
                  occupancy: Occupancy) -> Checked:
    """Which actions can be carried out now, which must wait for room, and why the
    others cannot (see the module doc)."""
    out = Checked()
    for a in actions:   # the room the list's moves free, wherever they stand in it
        if isinstance(a, (Suspend, Migrate)) and a.job not in out.freeing_jobs:
            job = jobs.get(a.job)
            if job is not None and job.state is JobState.RUNNING \
                    and a.job not in occupancy.unadopted:
                out.freeing_jobs.add(a.job)
                for f in job.fragments:
                    _add(out.freeing, f)
    seen: set[str] = set()
    for a in actions:
        job = jobs.get(a.job)
        reason, why = _problem(a, job, seen, cluster, occupancy, out)
        if job is not None:
            seen.add(a.job)
        if reason == "later" and isinstance(a, Start):
            out.deferred.append(a)
        elif reason == "later" and isinstance(a, Migrate):
            out.ok.append(a)    # the migration completes once the target frees
        elif reason:
            out.refused.append((a, reason, f"{type(a).__name__} {a.job}: {why}"))
            continue
        else:
            out.ok.append(a)
        if not isinstance(a, Suspend):
            for f in a.fragments:
                u = out.use[f.gpu]
                u.used += f.fraction
                u.tenants += 1
    return out


def _add(to: dict[str, GpuUse], f: Fragment) -> None:
    u = to.get(f.gpu)
    if u is None:
        to[f.gpu] = GpuUse(f.fraction, 1)
    else:
        u.used += f.fraction
        u.tenants += 1


def _problem(a: Action, job: JobView | None, seen: set[str], cluster: ClusterSnapshot,
             occ: Occupancy, out: Checked) -> tuple[str, str]:
    """("", "") if ``a`` can be done now, ("later", why) once room frees, else
    (reason key, why not)."""
    if job is None:
        return "unknown_job", f"unknown or finished job {a.job!r}"
    if a.job in seen:
        return "duplicate", "more than one action for this job"
    if a.job in occ.unadopted:
        return "not_adopted", "job not re-adopted yet"
    state = occ.shown.get(a.job, job.state.value)
    if job.state in BUSY:
        state = f"busy ({state})"
    if isinstance(a, Start):
        if not job.state.waiting or a.job in occ.pinned:
            return "not_waiting", f"job is {state}, not waiting"
    elif isinstance(a, (Suspend, Migrate)):
        if job.state is not JobState.RUNNING:
            return "not_running", f"job is {state}, not running"
        if isinstance(a, Suspend):
            return "", ""
    else:
        return "unknown_action", f"unknown action {a!r}"
    return fragments_problem(job, a.fragments, isinstance(a, Migrate), cluster, occ,
                             out.use, out.freeing)


def fragments_problem(job: JobView, frags: Sequence[Fragment], migrate: bool,
                      cluster: ClusterSnapshot, occ: Occupancy,
                      use: dict[str, GpuUse] | None = None,
                      freeing: Mapping[str, GpuUse] | None = None) -> tuple[str, str]:
    """Why ``job`` cannot start on (``migrate``: move to) these fragments now: ("", "")
    if it can, ("later", why) once room frees, else (reason key, why not).

    ``use``: per GPU, what it holds with the placements accepted so far (filled
    from ``occ.held`` as GPUs are met); ``freeing``: what the list's moves free.
    """
    use = {} if use is None else use
    freeing = freeing or {}
    if len(frags) != job.num_gpus:
        return "bad_fragments", f"{len(frags)} fragments for a {job.num_gpus}-GPU job"
    ids = [f.gpu for f in frags]
    if len(set(ids)) != len(ids):
        return "bad_fragments", f"two fragments on one GPU {ids}"
    if migrate and set(ids) & {f.gpu for f in job.fragments}:
        return "bad_fragments", "a migration target is a GPU it already holds"
    up = layout(cluster).gpus
    nodes = set()
    for gid in ids:
        g = up.get(gid)
        if g is not None:
            nodes.add(g.node)
            continue
        node, sep, index = gid.rpartition(":")
        if not sep or not node or not index.isdigit():
            return "bad_fragments", f"GPU must be NODE:INDEX, got {gid!r}"
        nodes.add(node)
    if len(nodes) > 1:   # a gang: one runner per node, each reachable by the others
        closed = sorted(n for n in nodes if not cluster.spans_onto(n)
                        and any(g.node == n for g in cluster.gpus))
        if closed:
            return "spans_nodes", (f"placement spans nodes {', '.join(sorted(nodes))} but "
                                   f"{', '.join(closed)} offers no gang address and ports")
    later = False
    for f in frags:
        g = up.get(f.gpu)
        if g is None:
            down = next((x.node for x in cluster.gpus if x.id == f.gpu), None)
            if down is not None:
                return "gpu_down", f"GPU {f.gpu} is on down node {down}"
            return "gpu_down", f"unknown GPU {f.gpu!r}: no up node has it"
        if not 0.0 < f.fraction <= 1.0:
            return "bad_fragments", f"fraction {f.fraction} on {f.gpu} is outside (0, 1]"
        u = use.get(f.gpu)
        if u is None:
            h = occ.held.get(f.gpu)
            u = use[f.gpu] = GpuUse(h.used, h.tenants) if h is not None else GpuUse()
        if fits(g, u, f.fraction, cluster.reserve_mb):
            continue
        gone = GpuUse()
        for part in (freeing.get(f.gpu), occ.exiting.get(f.gpu)):
            if part is not None:
                gone.used += part.used
                gone.tenants += part.tenants
        after = GpuUse(u.used - gone.used, u.tenants - gone.tenants)
        if gone.tenants and fits(g, after, f.fraction, cluster.reserve_mb):
            later = True
            continue
        return "no_room", (f"fraction {f.fraction:.3f} does not fit on {f.gpu} "
                           f"({u.tenants} tenants hold {u.used:.3f})")
    return ("later", "its room frees when a move ends") if later else ("", "")


def validate(actions: Sequence[Action], cluster: ClusterSnapshot,
             jobs: Sequence[JobView], max_tenants: int | None = None) -> list[str]:
    """Every action ``check_actions`` refuses, as readable messages (empty if none),
    with the GPUs holding more than ``max_tenants`` jobs once all are done, when given.

    What the GPUs hold is what ``jobs`` hold; a placement that waits for room a
    suspend or migration in the list frees is fine (it frees at once).
    """
    checked = check_actions(actions, cluster, {j.id: j for j in jobs},
                            Occupancy(usage(cluster, jobs)))
    errors = [text for _, _, text in checked.refused]
    if max_tenants is not None:
        placed = touched_gpus(checked.ok + checked.deferred)
        for gid, u in checked.use.items():
            if gid not in placed:
                continue
            gone = checked.freeing.get(gid)
            tenants = u.tenants - (gone.tenants if gone is not None else 0)
            if tenants > max_tenants:
                errors.append(f"GPU {gid} has {tenants} tenants, more than {max_tenants}")
    return errors
