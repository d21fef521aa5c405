"""The simulator's self-check after each applied round (``SimConfig.check``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .job import SimulationError

if TYPE_CHECKING:
    from .engine import Simulator


def check_invariants(sim: "Simulator") -> None:
    """Raise SimulationError unless the fractions on each GPU are within 1, each job
    holds exactly its fragments, and the count of holding jobs is right."""
    seen: dict[str, list[str]] = {}
    for g, ts in sim.tenants.items():
        total = 0.0
        for j in ts:
            fr = [f.fraction for f in j.fragments if f.gpu == g]
            if len(fr) != 1:
                raise SimulationError(f"job {j.id} holds {len(fr)} fragments on GPU {g}")
            total += fr[0] + sim.reserve_frac[g]
            seen.setdefault(j.id, []).append(g)
        if total > 1.0 + 1e-6:
            raise SimulationError(f"GPU {g} overcommitted at t={sim.now}: {total:.4f} > 1")
    for j in sim.live.values():
        holds = j.state.holds_gpu
        if holds != bool(j.fragments) or sorted(seen.get(j.id, [])) != sorted(
                f.gpu for f in j.fragments):
            raise SimulationError(f"job {j.id} ({j.state.value}) occupancy mismatch: "
                                  f"fragments {j.fragments}, on GPUs {seen.get(j.id)}")
    if sim.n_holding != len({jid for jid in seen}):
        raise SimulationError(f"{sim.n_holding} jobs counted as holding GPUs, "
                              f"{len(seen)} found")
    _check_window(sim)


def _check_window(sim: "Simulator") -> None:
    """The live window's counts and run sum are those of a scan of the oldest live jobs."""
    from itertools import islice

    from tfgshare.policies.prediction import AHEAD_SCAN

    waiting = measured = 0
    runs = 0.0
    for j in islice(sim.live.values(), AHEAD_SCAN):
        if j.sample is not None and j.state.waiting:
            waiting += 1
            if j.measured_step_s is not None:
                measured += 1
                runs += max(0.0, j.total_steps - j.steps) * j.measured_step_s
    w, m, r = sim.window.read(AHEAD_SCAN, 0)
    if (w, m) != (waiting, measured) or abs(r - runs) > 1e-6 * max(1.0, runs):
        raise SimulationError(f"live window at t={sim.now}: {w} waiting, {m} measured, "
                              f"{r:.3f} s of runs; a scan finds {waiting}, {measured}, "
                              f"{runs:.3f} s")
