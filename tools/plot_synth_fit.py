"""Plot a synthetic trace's marginals against its sources' (Philly, Alibaba's GPU-sharing
trace): GPU-count shares, duration CDFs per GPU count, VC shares, hour-of-week arrival
rate, and the one-GPU jobs' gpu_milli CDF.

    python tools/plot_synth_fit.py [--jobs 50000] [--cluster 64x8] [--load 0.9]
                                   [--seed 0] [--out docs/figures/synth_fit.png]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tfgshare.sim import synth  # noqa: E402
from tfgshare.sim.cluster import load_cluster  # noqa: E402


def _cdf(ax, values, label, style):
    v = np.sort(np.asarray(values, float))
    ax.plot(v, np.arange(1, len(v) + 1) / len(v), style, label=label, lw=1.2)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=50_000)
    p.add_argument("--cluster", default="64x8")
    p.add_argument("--load", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(REPO / "docs" / "figures" / "synth_fit.png"))
    args = p.parse_args(argv)
    src = synth.fit_sources()
    gpus = load_cluster(args.cluster).num_gpus
    gen = synth.generate(args.jobs, gpus, args.load, args.seed, sources=src)

    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    ax = axes[0, 0]
    sizes = sorted(set(src.num_gpus.tolist()))
    want, got = Counter(src.num_gpus.tolist()), Counter(gen.num_gpus.tolist())
    x = np.arange(len(sizes))
    ax.bar(x - 0.2, [want[s] / len(src.num_gpus) for s in sizes], 0.4, label="Philly")
    ax.bar(x + 0.2, [got[s] / len(gen.num_gpus) for s in sizes], 0.4, label="generated")
    ax.set_xticks(x, [str(s) for s in sizes])
    ax.set_yscale("log")
    ax.set_xlabel("GPUs per job")
    ax.set_ylabel("share of jobs")
    ax.set_title("GPU count")
    ax.legend()

    ax = axes[0, 1]
    for g, colour in zip((1, 2, 4, 8), ("C0", "C1", "C2", "C3")):
        _cdf(ax, src.durations[src.num_gpus == g], f"Philly {g} GPU", colour + "-")
        _cdf(ax, gen.durations[gen.num_gpus == g], f"generated {g} GPU", colour + "--")
    ax.set_xscale("log")
    ax.set_xlabel("duration (s)")
    ax.set_ylabel("CDF")
    ax.set_title("duration by GPU count")
    ax.legend(fontsize=7)

    ax = axes[0, 2]
    vcount = Counter(gen.vcs)
    vshare = np.bincount(src.vc_index, minlength=len(src.vcs)) / len(src.vc_index)
    order = np.argsort(-vshare)
    x = np.arange(len(order))
    ax.bar(x - 0.2, vshare[order], 0.4, label="Philly")
    ax.bar(x + 0.2, [vcount[src.vcs[i]] / len(gen.vcs) for i in order], 0.4,
           label="generated")
    ax.set_xticks(x, [src.vcs[i] for i in order], rotation=60, fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("share of jobs")
    ax.set_title("virtual cluster")
    ax.legend()

    ax = axes[1, 0]
    hours = (gen.submit // 3600).astype(int)
    gprof = synth.hour_profile(hours % synth.HOURS_PER_WEEK, hours[0], hours[-1])
    corr = np.corrcoef(gprof, src.hour_rate)[0, 1]
    ax.plot(src.hour_rate / src.hour_rate.mean(), label="Philly")
    ax.plot(gprof / gprof.mean(), "--", label="generated")
    ax.set_xticks(range(0, 169, 24), ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun", ""])
    ax.set_ylabel("arrival rate / mean")
    ax.set_title(f"arrivals by hour of week (r = {corr:.3f})")
    ax.legend()

    ax = axes[1, 1]
    one = gen.gpu_milli[gen.num_gpus == 1]
    _cdf(ax, src.one_gpu_milli, f"Alibaba one-GPU pods ({np.mean(src.one_gpu_milli < 1000):.1%}"
         " < 1000)", "C0-")
    _cdf(ax, one, f"generated one-GPU jobs ({np.mean(one < 1000):.1%} < 1000)", "C1--")
    ax.set_xlabel("gpu_milli")
    ax.set_ylabel("CDF")
    ax.set_title("GPU share requested (one-GPU jobs)")
    ax.legend(fontsize=8)

    ax = axes[1, 2]
    ax.axis("off")
    ax.text(0.0, 0.95, "\n".join([
        f"generated: {args.jobs:,} jobs, seed {args.seed}",
        f"cluster {args.cluster} ({gpus} GPUs), asked load {args.load:g}",
        f"offered load achieved: {gen.offered_load():.3f}",
        f"arrival span: {(gen.submit[-1] - gen.submit[0]) / 86400:.1f} days",
        "",
        "sources:",
        f"  Philly: {len(src.num_gpus):,} jobs (GPUs, duration, VC",
        "  resampled jointly; hour-of-week rate)",
        f"  Alibaba gpu-v2023: {len(src.one_gpu_milli):,} one-GPU pods",
        "  (gpu_milli of one-GPU jobs)",
    ]), va="top", family="monospace", fontsize=10)

    fig.suptitle("tfgshare trace generate: generated marginals against their sources")
    fig.tight_layout()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"wrote {out} (hour-of-week r = {corr:.3f}, load {gen.offered_load():.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
