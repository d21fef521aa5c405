#!/usr/bin/env python3
"""FGD's fill experiment, ours beside its authors' simulator, on the same arrivals.

Runs :mod:`tfgshare.sim.fill` for each placement rule on Alibaba's default pod list and
GPU nodes, and, given the logs of the authors' simulator
(``hkust-adsl/kubernetes-scheduler-simulator``, ``bin/simon apply ...``, one log per
policy named ``run_<Policy>.txt``), replays the very arrival order each log shows and
prints both curves side by side: allocated GPU share and fragmentation (FGD's measure) of
the cluster against the arrived GPU demand, each a share of the cluster's GPUs.

    tools/compare_fgd.py                              # ours only, seeded arrivals
    tools/compare_fgd.py --peer-logs DIR              # beside the peer's logs
    tools/compare_fgd.py --sample 8 --peer-logs DIR   # every 8th node and pod, both sides

Writes ``docs/results/fgd_fill.csv`` (ours) and, with peer logs, the side-by-side table
``docs/results/fgd_compare.csv``. Light: no TensorFlow.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MACHINE = os.environ.get("TFGSHARE_MACHINE",
                         "build VM, 2 cores, shared with other engineers")
sys.path.insert(0, str(ROOT))

from tfgshare.policies.share_rules import Workload  # noqa: E402
from tfgshare.sim.alibaba import load_nodes, load_pods  # noqa: E402
from tfgshare.sim.fill import FILL_RULES, arrivals, ask_of, fill  # noqa: E402

# our rule -> the peer's policy name in its logs (run_<name>.txt)
PEER_NAMES = {"random-fit": "Random", "best-fit": "BestFit", "dot-product": "DotProd",
              "packing": "GpuPacking", "clustering": "GpuClustering", "fgd": "FGD"}
POINTS = (0.2, 0.4, 0.6, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3)   # arrived share of the cluster
PLACED = re.compile(r"is scheduled to node\((\d+)-([^)]+)\)")
ATTEMPT = re.compile(r"\[(\d+)\] attempt to create pod\([^/]*/([^)]+)\)")
FRAG = re.compile(r"Frag amount: ([\d.]+); Frag ratio: [\d.]+%; Q124 ratio: [\d.]+%; \(origin\)")
ALLOC = re.compile(r"Used GPU Milli: (\d+); Total GPUs: \d+; Arrived GPU Milli: (\d+)")
TUNED = re.compile(r"-tuned-\d+$")


def read_peer(path: Path) -> tuple[list[str], list[tuple[int, int, float]], list[str]]:
    """The arrival order (base pod names), per arrival (arrived milli, allocated milli,
    fragmentation milli), and its tie-break order of the nodes it placed on (by the
    seeded prefix it gives node names) from one log of the authors' simulator."""
    names: list[str] = []
    points: list[tuple[int, int, float]] = []
    prefix: dict[str, int] = {}
    frag = 0.0
    with open(path, errors="replace") as f:
        for line in f:
            m = PLACED.search(line)
            if m:
                prefix[m.group(2)] = int(m.group(1))
                continue
            m = ATTEMPT.search(line)
            if m:
                names.append(TUNED.sub("", m.group(2)))
                continue
            m = FRAG.search(line)
            if m:
                frag = float(m.group(1))
                continue
            m = ALLOC.search(line)
            if m:
                points.append((int(m.group(2)), int(m.group(1)), frag))
    return names, points, sorted(prefix, key=prefix.get)


def at_shares(series: list[tuple[int, int, float]], capacity: int) -> dict[float, tuple]:
    """(allocated share, fragmentation share) at the first arrival reaching each POINT."""
    out = {}
    for share in POINTS:
        hit = next((p for p in series if p[0] >= share * capacity), None)
        if hit is not None:
            out[share] = (hit[1] / capacity, hit[2] / capacity)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rules", default=",".join(FILL_RULES))
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--peer-logs", type=Path, default=None,
                    help="folder of the peer simulator's logs, run_<Policy>.txt")
    ap.add_argument("--sample", type=int, default=1, metavar="K",
                    help="keep every K-th node and every K-th pod of the lists (rows 0, K, "
                         "2K, ...), as the peer's input was cut for a quicker run")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    args = ap.parse_args(argv)
    if args.sample < 1:
        ap.error("--sample must be >= 1")
    nodes, pods = load_nodes()[::args.sample], load_pods()[::args.sample]
    by_name = {p.name: p for p in pods}
    workload = Workload.of(ask_of(p) for p in pods)
    capacity = 1000 * sum(n.gpus for n in nodes)
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load = f"{os.getloadavg()[0]:.2f}"
    args.out.mkdir(parents=True, exist_ok=True)
    ours_rows, cmp_rows = [], []
    given = argv if argv is not None else sys.argv[1:]
    # the peer's log folder and --out are this machine's: the command names them DIR, OUT
    command = "tools/compare_fgd.py " + re.sub(
        r"(--peer-logs|--out)(=|\s+)\S+", lambda m: f"{m.group(1)} {m.group(1)[2:].upper()}",
        " ".join(given)).replace("PEER-LOGS", "DIR")
    print(f"{len(nodes)} nodes, {capacity // 1000} GPUs; {len(pods)} pods"
          f"{'' if args.sample == 1 else f' (every {args.sample}th row)'}; "
          f"target workload: {len(workload.types)} task types; load {load}")
    for rule in [r.strip() for r in args.rules.split(",") if r.strip()]:
        peer_file = args.peer_logs / f"run_{PEER_NAMES[rule]}.txt" \
            if args.peer_logs and rule in PEER_NAMES else None
        peer, order = None, None
        fgd_file = args.peer_logs / "run_FGD.txt" if args.peer_logs else None
        if peer_file is not None and peer_file.is_file():
            names, peer, order = read_peer(peer_file)
            seq = [by_name[n] for n in names[:len(peer)]]
            source = f"the peer's {len(seq)} arrivals and node order"
        elif fgd_file is not None and fgd_file.is_file():
            # no log of this rule: the arrivals and node order of the peer's FGD run, which
            # the same seed gives every policy of the peer
            names, fgd_points, order = read_peer(fgd_file)
            seq = [by_name[n] for n in names[:len(fgd_points)]]
            source = f"the peer's FGD run's {len(seq)} arrivals and node order"
        else:
            seq = arrivals(pods, nodes, args.seed)
            source = f"seeded arrivals (seed {args.seed}, {len(seq)} tasks)"
        t0 = time.process_time()
        pts = fill(nodes, seq, rule, workload=workload, seed=args.seed, order=order)
        cpu = time.process_time() - t0
        mine = at_shares([(p.arrived_milli, p.allocated_milli, p.frag_milli) for p in pts],
                         capacity)
        theirs = at_shares(peer, capacity) if peer else {}
        last = pts[-1]
        print(f"\n{rule}: {source}, {cpu:.1f} CPU s; end: arrived "
              f"{last.arrived_milli / capacity:.1%}, allocated "
              f"{last.allocated_milli / capacity:.1%}, failed {last.failed}")
        print(f"  {'arrived':>8} {'alloc ours':>10} {'peer':>7} {'frag ours':>10} {'peer':>7}")
        for share, (alloc, frag) in mine.items():
            ta, tf = theirs.get(share, (None, None))
            fmt = (lambda x: f"{x:7.2%}" if x is not None else "      -")
            print(f"  {share:8.0%} {alloc:10.2%} {fmt(ta)} {frag:10.2%} {fmt(tf)}")
            ours_rows.append(dict(rule=rule, arrived=share, allocated=round(alloc, 5),
                                  frag=round(frag, 5), arrivals=source, date=stamp, machine=MACHINE,
                                  load=load, command=command))
            if ta is not None:
                cmp_rows.append(dict(rule=rule, arrived=share, allocated_ours=round(alloc, 5),
                                     allocated_peer=round(ta, 5), frag_ours=round(frag, 5),
                                     frag_peer=round(tf, 5), date=stamp, machine=MACHINE,
                                     load=load, command=command))
    tag = "" if args.sample == 1 else f"_sample{args.sample}"
    _write(args.out / f"fgd_fill{tag}.csv", ours_rows)
    if cmp_rows:
        _write(args.out / f"fgd_compare{tag}.csv", cmp_rows)
    return 0


def _write(path: Path, rows: list[dict]) -> None:
    if not rows:
        return
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
