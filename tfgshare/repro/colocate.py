"""Co-location for ``tfgshare profile --colocate``: two jobs at once on one device, their
slowdowns, and the simulator's co-location model fitted to them.

A pair runs until each job made ``PAIR_STEPS`` steps alongside the other; a job's
slowdown is its step time in the pair over its step time alone. On a GPU that is the
whole measurement. On a virtual GPU (both runners pinned to one core, as two tenants of
it) a machine shared with other work skews it: the job alone and the pair each got
some share of the core, and the shares differ when the load changes between the runs.
So each is also taken at a whole core, from the threads' time ran and waited runnable
(``cpushare``), as ``tfgshare replay`` scales a profile:

- alone: step time x the share its runner got (``cpu_share``);
- in the pair: step time x the pair's share of the core, ``(ran_a + ran_b) / (ran_a +
  ran_b + other)``, where ``other``, the time the core ran other work while the pair
  wanted it, is what each runner waited beyond its partner's running
  (``waited_a - ran_b``, ``waited_b - ran_a``; their mean, at least 0). This assumes
  both runners want the core throughout, as busy training loops do;

and ``slowdown_full_core`` = the pair's whole-core step over the alone whole-core step.
The single-tenant utilisations the model takes are also at a whole core (busy share /
CPU share, at most 1). The fit uses the whole-core slowdowns where every pair has them.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path

from .measure import (STEADY_MIN_S, Device, NvmlUtil, Run, sched_between, spawn, stop_runs,
                      wait_runs)

PAIR_STEPS = 3           # steady steps each job of a co-located pair makes alongside the other


def pair_share(cpu: list[tuple[float, float]]) -> float | None:
    """The share of their core two co-located runners got together, from each one's
    ``(ran, waited)`` over the same interval (see the module doc); None if they never ran."""
    (ran_a, waited_a), (ran_b, waited_b) = cpu
    other = max(0.0, ((waited_a - ran_b) + (waited_b - ran_a)) / 2)
    ran = ran_a + ran_b
    return ran / (ran + other) if ran > 0 else None


def colocate_pair(device: Device, a: tuple[str, int, int | None], b: tuple[str, int, int | None],
                  alone: dict[tuple[str, int], float], work: Path, nvml: NvmlUtil | None,
                  timeout_s: float = 900.0) -> dict:
    """Run jobs ``a`` and ``b`` at once on one device; their slowdowns against running
    alone, and on the CPU each runner's ``(ran, waited)`` and the pair's share of the core
    over the steps they made together."""
    extra = ["--warmup_steps", "1", "--num_sample_steps", "2", "--log_every_n_steps", "1"]
    if device.gpu:
        extra += ["--memory_fraction", "0.45"]
    runs = [spawn(f"{m}/{bs} pair", device, m, bs, size, 100000,
                  work / f"pair-{m}-{bs}-{i}", extra, timeout_s)
            for i, (m, bs, size) in enumerate((a, b))]
    end = [float("inf")]

    def overlap_start() -> float | None:
        # each run checkpoints right after its sample: the window starts once both have
        firsts = [r.first("checkpoint") or r.first("sample") for r in runs]
        return None if None in firsts else max(e["time"] for e in firsts)

    def in_overlap(r: Run) -> list[float]:
        t = overlap_start()
        return [] if t is None else [e["step_time_s"] for e in r.all("progress")
                                     if t < e["time"] <= end[0]]

    def enough() -> bool:
        t = overlap_start()
        return t is not None and all(len(in_overlap(r)) >= PAIR_STEPS for r in runs) \
            and time.time() - t >= STEADY_MIN_S

    try:   # the faster job keeps stepping until the slower one has made its share
        wait_runs(runs, nvml, timeout_s, until=enough)
        end[0] = time.time()
    finally:
        stop_runs(runs)
    out = {"models": [f"{m}/{bs}" for m, bs, _ in (a, b)], "slowdown": []}
    for r, (m, bs, _) in zip(runs, (a, b)):
        times = in_overlap(r)
        out["slowdown"].append(sum(times) / len(times) / alone[(m, bs)])
    if not device.gpu:
        cpu = [sched_between(r, overlap_start(), end[0]) for r in runs]
        if None not in cpu:
            out["cpu"] = [(round(ran, 3), round(waited, 3)) for ran, waited in cpu]
            out["pair_share"] = pair_share(cpu)
    return out


def at_full_core(pair: dict, shares: dict[str, float]) -> list[float] | None:
    """A CPU pair's slowdowns at a whole core (see the module doc): None without the
    pair's share or either job's alone share."""
    s = pair.get("pair_share")
    if not s or any(not shares.get(k) for k in pair["models"]):
        return None
    return [raw * s / shares[k] for raw, k in zip(pair["slowdown"], pair["models"])]


def fit_colocation(pairs: list[dict], utils: dict[str, float],
                   shares: dict[str, float] | None = None) -> dict:
    """Fit ``Colocation(overhead, exponent)`` to measured pair slowdowns (grid least squares).

    With ``shares`` (each job's CPU share alone) and every pair's whole-core slowdowns,
    those and the whole-core utilisations are fitted (``basis`` "full core"); else the
    slowdowns as measured. Returns the parameters, the basis and the mean and largest
    relative error of the fit.
    """
    from tfgshare.sim.colocation import Colocation

    full = [at_full_core(p, shares) for p in pairs] if shares else [None]
    use_full = bool(pairs) and None not in full
    points = []   # (total util, slowdown)
    for p, f in zip(pairs, full if use_full else [None] * len(pairs)):
        if use_full:
            total = sum(min(1.0, utils[k] / shares[k]) for k in p["models"])
        else:
            total = sum(utils[k] for k in p["models"])
        points += [(total, s) for s in (f if use_full else p["slowdown"])]
    if not points:
        raise ValueError("no co-located pairs to fit")
    best = None
    for oi in range(0, 201):
        for ei in range(0, 61):
            c = Colocation(overhead=oi * 0.01, exponent=ei * 0.05)
            err = sum(((c.slowdown(2, u) - s) / s) ** 2 for u, s in points)
            if best is None or err < best[0]:
                best = (err, c)
    c = best[1]
    rel = [abs(c.slowdown(2, u) - s) / s for u, s in points]
    return {"overhead": c.overhead, "exponent": c.exponent,
            "basis": "full core" if use_full else "as measured",
            "fit_error_mean": sum(rel) / len(rel), "fit_error_max": max(rel),
            "points": len(points)}


def choose_pairs(models: list[tuple], spec: str | None) -> list[tuple[tuple, tuple]]:
    """The pairs to co-locate: all, the first N (``spec`` a number) or ``A+B,C+D``."""
    combos = list(itertools.combinations(models, 2))
    if spec is None:
        return combos
    if spec.strip().isdigit():
        return combos[:int(spec)]
    by_name = {m[0]: m for m in models}
    out = []
    for item in spec.split(","):
        a, _, b = item.strip().partition("+")
        if a not in by_name or b not in by_name or a == b:
            raise ValueError(f"--pairs: {item!r} is not two different profiled models A+B "
                             f"(profiled: {', '.join(by_name)})")
        out.append((by_name[a], by_name[b]))
    return out
