#!/usr/bin/env python3
"""What sharing buys: every policy on the same jobs, with the ordering and the sharing
told apart.

Two settings, each with the measured workload model (``--workload measured``):

* ``philly``: the 2,000 Philly jobs from 2017-11-06 (the evaluation window, never tuned
  on) on 128 GPUs (16x8, offered load 3.4);
* ``alibaba``: Alibaba's GPU-sharing trace (``alibaba-2023``), the pods created from day
  100 on, on a cluster small enough that they queue (default 4x8 GPUs of 32 GB).

Policies: fifo and sjf with whole GPUs (the traditional baselines), tiresias, gandiva,
fgs, fgs with one tenant per GPU (``max_cotenants=1``: fgs's ordering without its
sharing), fgs placing by FGD's fragmentation measure (``frag_measure``), and fifo and sjf under each sharing placement (FGD and its baselines). Ratios
are against fifo in the same run. Writes ``docs/results/sharing_<setting>.csv``.

    tools/sharing_tables.py [--settings philly,alibaba] [--placements fgd,best-fit,packing]
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MACHINE = os.environ.get("TFGSHARE_MACHINE",
                         "build VM, 2 cores, shared with other engineers")
sys.path.insert(0, str(ROOT))

from tfgshare.metrics import ratios  # noqa: E402
from tfgshare.policies.registry import get_policy  # noqa: E402
from tfgshare.sim.cluster import load_cluster  # noqa: E402
from tfgshare.sim.config import SimConfig  # noqa: E402
from tfgshare.sim.engine import simulate  # noqa: E402
from tfgshare.sim.profiles import load_profiles, published_profiles_path  # noqa: E402
from tfgshare.sim.workload import load_workload  # noqa: E402

SETTINGS = {
    "philly": dict(trace="philly", cluster="16x8", start="2017-11-06", jobs=2000),
    "alibaba": dict(trace="alibaba-2023", cluster="4x8:32768", start=100 * 86400.0,
                    jobs=None),
}
BASE = ("fifo", "sjf", "tiresias", "gandiva", "fgs", "fgs-1", "fgs-frag")


def policy(name: str):
    """A policy by its row name (``fgs-1``: fgs with one tenant per GPU; ``fgs-frag``: fgs
    placing by FGD's measure)."""
    if name == "fgs-1":
        return get_policy("fgs", max_cotenants=1)
    if name == "fgs-frag":
        return get_policy("fgs", frag_measure=True)
    return get_policy(name)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--settings", default="philly,alibaba")
    ap.add_argument("--placements", default="fgd,best-fit,packing")
    ap.add_argument("--alibaba-cluster", default=SETTINGS["alibaba"]["cluster"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    args = ap.parse_args(argv)
    SETTINGS["alibaba"]["cluster"] = args.alibaba_cluster
    placements = [p for p in args.placements.split(",") if p]
    names = list(BASE) + [f"{o}/{p}" for o in ("fifo", "sjf") for p in placements]
    profiles = load_profiles(published_profiles_path())
    args.out.mkdir(parents=True, exist_ok=True)
    for setting in args.settings.split(","):
        s = SETTINGS[setting]
        cluster = load_cluster(s["cluster"])
        work = load_workload(s["trace"], profiles, cluster.num_gpus, seed=args.seed,
                             num_jobs=s["jobs"], start=s["start"], workload="measured")
        config = SimConfig(seed=args.seed, **profiles.sim_overrides())
        stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        load0 = os.getloadavg()[0]
        print(f"\n{setting}: {len(work.jobs)} jobs on {cluster.name} ({cluster.num_gpus} "
              f"GPUs), workload measured, seed {args.seed}, load {load0:.2f}", flush=True)
        results = {}
        for n in names:
            t0 = time.process_time()
            results[n] = simulate(cluster, work.jobs, profiles, policy(n), config)
            print(f"  {n}: {time.process_time() - t0:.1f} CPU s", flush=True)
        base = results["fifo"].report
        rows = []
        print("| policy | JCT mean h | median h | p95 h | wait h | JCT fifo/x | alloc % "
              "| eff % | dev % | devbusy % | susp/res/mig |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for n, r in results.items():
            rep, rat = r.report, ratios(r.report, base)
            row = dict(setting=setting, policy=n, jobs=len(work.jobs), gpus=cluster.num_gpus,
                       jct_mean_h=rep.jct_mean / 3600, jct_median_h=rep.jct_median / 3600,
                       jct_p95_h=rep.jct_p95 / 3600, wait_mean_h=rep.wait_mean / 3600,
                       jct_ratio=rat["jct_ratio"], util_alloc=rep.util_allocated,
                       util_eff=rep.util_effective, util_device=rep.util_device,
                       util_device_busy=rep.util_device_busy,
                       moves=f"{rep.suspends}/{rep.resumes}/{rep.migrations}",
                       date=stamp, machine=MACHINE, load=f"{load0:.2f}", seed=args.seed,
                       command=f"tools/sharing_tables.py --settings {setting}")
            rows.append(row)
            print(f"| {n} | {row['jct_mean_h']:.2f} | {row['jct_median_h']:.2f} "
                  f"| {row['jct_p95_h']:.2f} | {row['wait_mean_h']:.2f} "
                  f"| {row['jct_ratio']:.2f} | {100 * rep.util_allocated:.1f} "
                  f"| {100 * rep.util_effective:.1f} | {100 * rep.util_device:.1f} "
                  f"| {100 * rep.util_device_busy:.1f} | {row['moves']} |", flush=True)
        path = args.out / f"sharing_{setting}.csv"
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
