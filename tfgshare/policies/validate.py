"""The check of a round's actions against the placement rule, shared by the
coordinator and the simulator: what the policy planned is what may be applied.

Imports only the policy records and :mod:`.placement`'s accounting.
"""

from __future__ import annotations

from typing import Sequence

from .base import Action, ClusterSnapshot, Fragment, JobState, JobView, Migrate, Start, Suspend
from .placement import EPS, GpuUse, reserve_fraction, usage


def validate(actions: Sequence[Action], cluster: ClusterSnapshot,
             jobs: Sequence[JobView], max_tenants: int | None = None) -> list[str]:
    """Every way these actions break the rules, as readable messages (empty if none).

    Checks each action against its job's state and size, and the GPUs as they
    would be once all actions are done (suspends and migrations free their old
    fragments first): no GPU past its memory, none on a down node, at most
    ``max_tenants`` jobs per GPU when given.
    """
    errors: list[str] = []
    by_id = {j.id: j for j in jobs}
    gpus = {g.id: g for g in cluster.gpus}
    use = usage(cluster, jobs)
    seen: set[str] = set()
    added: list[tuple[str, Fragment]] = []

    def check_fragments(job: JobView, frags: tuple[Fragment, ...], what: str) -> None:
        if len(frags) != job.num_gpus:
            errors.append(f"{what} {job.id}: {len(frags)} fragments for a "
                          f"{job.num_gpus}-GPU job")
        ids = [f.gpu for f in frags]
        if len(set(ids)) != len(ids):
            errors.append(f"{what} {job.id}: two fragments on one GPU {ids}")
        for f in frags:
            g = gpus.get(f.gpu)
            if g is None:
                errors.append(f"{what} {job.id}: unknown GPU {f.gpu!r}")
                continue
            if g.node in cluster.down_nodes:
                errors.append(f"{what} {job.id}: GPU {f.gpu} is on down node {g.node}")
            if not 0.0 < f.fraction <= 1.0:
                errors.append(f"{what} {job.id}: fraction {f.fraction} on {f.gpu} "
                              "is outside (0, 1]")
            added.append((job.id, f))

    def release(job: JobView) -> None:
        for f in job.fragments:
            u = use.get(f.gpu)
            if u is not None:
                u.used -= f.fraction
                u.tenants -= 1

    for a in actions:
        job = by_id.get(a.job)
        kind = type(a).__name__
        if job is None:
            errors.append(f"{kind}: unknown job {a.job!r}")
            continue
        if a.job in seen:
            errors.append(f"{kind} {a.job}: more than one action for this job")
            continue
        seen.add(a.job)
        if job.state in (JobState.SAMPLING, JobState.SUSPENDING):
            errors.append(f"{kind} {a.job}: job is busy ({job.state.value})")
            continue
        if isinstance(a, Start):
            if not job.state.waiting:
                errors.append(f"Start {a.job}: job is {job.state.value}, not waiting")
                continue
            check_fragments(job, a.fragments, "Start")
        elif isinstance(a, Suspend):
            if job.state is not JobState.RUNNING:
                errors.append(f"Suspend {a.job}: job is {job.state.value}, not running")
                continue
            release(job)
        elif isinstance(a, Migrate):
            if job.state is not JobState.RUNNING:
                errors.append(f"Migrate {a.job}: job is {job.state.value}, not running")
                continue
            release(job)
            check_fragments(job, a.fragments, "Migrate")
        else:
            errors.append(f"unknown action {a!r}")

    holders: dict[str, list[str]] = {}
    for job_id, f in added:
        if f.gpu not in gpus:
            continue
        u = use.setdefault(f.gpu, GpuUse())
        u.used += f.fraction
        u.tenants += 1
        holders.setdefault(f.gpu, []).append(job_id)
    for gid, u in use.items():
        g = gpus.get(gid)
        if g is None or u.tenants <= 0:
            continue
        total = u.used + u.tenants * reserve_fraction(g, cluster.reserve_mb)
        if total > 1.0 + EPS:
            errors.append(f"GPU {gid} overcommitted: fractions {u.used:.4f} + "
                          f"{u.tenants} reserves = {total:.4f} > 1 "
                          f"(new: {', '.join(holders.get(gid, [])) or 'none'})")
        if max_tenants is not None and u.tenants > max_tenants and gid in holders:
            errors.append(f"GPU {gid} has {u.tenants} tenants, more than {max_tenants}")
    return errors
