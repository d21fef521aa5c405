"""A sweep's outputs: every run as CSV, the spread across seeds per cell, and a plot.

A cell is one (cluster, workload, load, policy); its seeds are its samples. Each metric
is given as the mean over the seeds and the 95 % Student t-interval of that mean,
``mean +- t(0.975, n-1) * sd / sqrt(n)`` (sd with ``n - 1``); one seed gives no interval.
Nothing here imports TensorFlow; matplotlib is imported only to draw the plot.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from tfgshare.metrics import format_duration

CELL = ("cluster", "workload", "load", "policy")
SUMMARY_METRICS = ("jct_mean", "jct_p95", "wait_mean", "util_allocated", "util_effective",
                   "makespan")
# t(0.975, df) for df = 1..30 (two-sided 95 %); beyond, the Cornish-Fisher expansion
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom (df >= 1)."""
    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964
    return z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)


def t_interval(values) -> tuple[float, float, float]:
    """(mean, low, high) of the 95 % t-interval of the mean; NaN bounds for one value."""
    a = np.asarray([v for v in values if v is not None and not math.isnan(v)], float)
    if a.size == 0:
        return math.nan, math.nan, math.nan
    mean = float(a.mean())
    if a.size < 2:
        return mean, math.nan, math.nan
    half = t975(a.size - 1) * float(a.std(ddof=1)) / math.sqrt(a.size)
    return mean, mean - half, mean + half


def summarise(rows: list[dict], metrics=SUMMARY_METRICS) -> list[dict]:
    """One dict per cell, in the rows' order: the cell, n and each metric's mean/lo/hi."""
    cells: dict[tuple, list[dict]] = {}
    for r in rows:
        cells.setdefault(tuple(r[k] for k in CELL), []).append(r)
    out = []
    for cell, runs in cells.items():
        d = dict(zip(CELL, cell))
        d["n"] = len(runs)
        d["seeds"] = " ".join(str(r["seed"]) for r in runs)
        for m in metrics:
            d[m], d[f"{m}_lo"], d[f"{m}_hi"] = t_interval([r.get(m) for r in runs])
        out.append(d)
    return out


def write_csv(rows: list[dict], path: Path, columns=None) -> Path:
    """Write dict rows as CSV (columns: ``columns`` or the first row's keys)."""
    columns = list(columns or (rows[0] if rows else []))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return path


def _pm(cell: dict, metric: str, fmt) -> str:
    mean, hi = cell[metric], cell[f"{metric}_hi"]
    if mean is None or math.isnan(mean):
        return "-"
    return fmt(mean) if math.isnan(hi) else f"{fmt(mean)} ± {fmt(hi - mean)}"


def pivot_markdown(cells: list[dict], metric: str = "jct_mean") -> str:
    """A Markdown table: a row per (cluster, workload, load), a column per policy, each
    entry ``mean ± half-width`` of ``metric`` across seeds."""
    policies = list(dict.fromkeys(c["policy"] for c in cells))
    rows: dict[tuple, dict] = {}
    for c in cells:
        rows.setdefault((c["cluster"], c["workload"], c["load"]), {})[c["policy"]] = c
    fmt = format_duration if metric in ("jct_mean", "jct_p95", "wait_mean", "makespan") \
        else (lambda v: f"{100 * v:.1f}%")
    n = sorted({c["n"] for c in cells})
    lines = [f"{metric}: mean ± 95 % t-interval half-width over "
             f"{'/'.join(map(str, n))} seeds per cell\n",
             f"| cluster | workload | load | {' | '.join(policies)} |",
             "|---|---|---:|" + "---:|" * len(policies)]
    for (cluster, workload, load), by in rows.items():
        lines.append(f"| {cluster} | {workload} | {load:g} | " + " | ".join(
            _pm(by[p], metric, fmt) if p in by else "-" for p in policies) + " |")
    return "\n".join(lines)


def plot_jct(cells: list[dict], path: Path) -> Path | None:
    """Mean JCT (hours) against load, a line per policy with 95 % bars, a panel per
    (cluster, workload); None when matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    clusters = list(dict.fromkeys(c["cluster"] for c in cells))
    workloads = list(dict.fromkeys(c["workload"] for c in cells))
    policies = list(dict.fromkeys(c["policy"] for c in cells))
    fig, axes = plt.subplots(len(workloads), len(clusters), squeeze=False, sharex=True,
                             figsize=(max(6.0, 4.2 * len(clusters)), 3.2 * len(workloads) + 0.4))
    loads = sorted({c["load"] for c in cells})
    for i, w in enumerate(workloads):
        for j, cl in enumerate(clusters):
            ax = axes[i][j]
            for k, pol in enumerate(policies):
                sel = sorted((c for c in cells if (c["cluster"], c["workload"], c["policy"])
                              == (cl, w, pol)), key=lambda c: c["load"])
                if not sel:
                    continue
                shift = 0.015 * (k - (len(policies) - 1) / 2)   # side by side, not on top
                x = np.array([c["load"] for c in sel]) * (1 + shift)
                y = np.array([c["jct_mean"] for c in sel]) / 3600
                lo = np.array([c["jct_mean_lo"] for c in sel]) / 3600
                hi = np.array([c["jct_mean_hi"] for c in sel]) / 3600
                err = np.nan_to_num(np.vstack([y - lo, hi - y]))
                ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=pol)
            ax.set_title(f"{cl}, {w}", fontsize=9)
            ax.set_xticks(loads)
            ax.set_xticklabels([f"{v:g}" for v in loads])
            ax.set_xlim(loads[0] * 0.9 - 0.05, loads[-1] * 1.1 + 0.05)
            if i == len(workloads) - 1:   # shared x axis: labelled on the bottom row
                ax.set_xlabel("offered load")
            ax.set_ylabel("mean JCT (h)")
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle("mean JCT against load: mean and 95 % t-interval across seeds", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_report(rows: list[dict], grid, out: Path, plot: bool = True) -> str:
    """Write runs.csv, summary.csv, summary.md and (``plot``) jct_vs_load.png under
    ``out``; return the text to print."""
    from .sweep import COLUMNS
    out = Path(out)
    if not rows:
        return f"no finished runs in {out}"
    write_csv(rows, out / "runs.csv", COLUMNS)
    cells = summarise(rows)
    write_csv(cells, out / "summary.csv")
    text = "\n\n".join(pivot_markdown(cells, m) for m in ("jct_mean", "wait_mean",
                                                         "util_allocated"))
    (out / "summary.md").write_text(text + "\n")
    made = plot_jct(cells, out / "jct_vs_load.png") if plot else None
    files = "runs.csv, summary.csv, summary.md" + (", jct_vs_load.png" if made else "")
    return (f"{text}\n\n{len(rows)} runs of {len(grid.points())} in the grid, "
            f"{len(cells)} cells; wrote {files} to {out}")
