"""Plots of simulation results: JCT CDF, utilisation and queue length over time."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np

from tfgshare.metrics import Timeline

from .job import SimResult

HOUR = 3600.0


def binned(timeline: Timeline, column: str, bins: int = 500) -> tuple[np.ndarray, np.ndarray]:
    """The time-average of a timeline column over ``bins`` equal spans (bin centres, values)."""
    t = np.frombuffer(timeline.times, dtype=float)
    v = np.frombuffer(getattr(timeline, column), dtype=float)
    if len(t) < 2:
        return t.copy(), v.copy()
    area = np.concatenate([[0.0], np.cumsum(v[:-1] * np.diff(t))])
    edges = np.linspace(t[0], t[-1], bins + 1)
    cum = np.interp(edges, t, area)
    return (edges[:-1] + edges[1:]) / 2, np.diff(cum) / np.diff(edges)


def write_plots(results: Mapping[str, SimResult], num_gpus: int, out: Path) -> list[Path]:
    """Write jct_cdf.png, utilisation.png and queue.png under ``out``; return their paths."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, res in results.items():
        jct = np.sort([r.jct for r in res.records if r.jct is not None]) / HOUR
        if len(jct):
            ax.step(np.maximum(jct, 1e-3), np.arange(1, len(jct) + 1) / len(jct),
                    where="post", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (hours)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("JCT CDF per policy")
    ax.grid(alpha=0.3)
    ax.legend()
    paths.append(_save(fig, out / "jct_cdf.png", plt))

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for name, res in results.items():
        x, alloc = binned(res.timeline, "allocated")
        _, eff = binned(res.timeline, "effective")
        line, = ax1.plot(x / HOUR, 100 * alloc / num_gpus, label=name, lw=1)
        ax2.plot(x / HOUR, 100 * eff / num_gpus, color=line.get_color(), lw=1)
    ax1.set_ylabel("allocated (%)")
    ax2.set_ylabel("effective (%)")
    ax2.set_xlabel("time (hours)")
    ax1.set_title("GPU utilisation over time")
    ax1.legend(fontsize="small")
    for a in (ax1, ax2):
        a.grid(alpha=0.3)
    paths.append(_save(fig, out / "utilisation.png", plt))

    fig, ax = plt.subplots(figsize=(8, 4))
    for name, res in results.items():
        x, q = binned(res.timeline, "queued")
        ax.plot(x / HOUR, q, label=name, lw=1)
    ax.set_xlabel("time (hours)")
    ax.set_ylabel("waiting jobs")
    ax.set_title("Queue length over time")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    paths.append(_save(fig, out / "queue.png", plt))
    return paths


def _save(fig, path: Path, plt) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
