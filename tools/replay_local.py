"""Replay a trace slice on a fresh local cluster: one node, virtual GPUs, one policy.

    tools/replay_local.py POLICY OUT [tfgshare replay flags...]

starts a ``LocalCluster`` under ``POLICY`` (coordinator and one agent ``n1`` with
``--virtual-gpus``, default 2x16GiB), waits until the agent's spare runners have
TensorFlow imported, runs ``tfgshare replay --coordinator ADDR --out OUT FLAGS`` against
it, stops the cluster and prints the load average before and after (the figures depend
on it). While the jobs run it measures the share of a core the agent's runners got
(``tfgshare.repro.cpushare``), so the replay also simulates the profile at that share.
Its exit code is the replay's.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tfgshare.agent.config import default_spares  # noqa: E402
from tfgshare.localcluster import LocalCluster  # noqa: E402
from tfgshare.repro import replay  # noqa: E402
from tfgshare.repro.cpushare import RunnerShareProbe  # noqa: E402
from tfgshare.repro.live import wait_warm  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    """Run one replay on a fresh local cluster; the replay's exit code."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("policy")
    p.add_argument("out", type=Path)
    p.add_argument("--virtual-gpus", default="2x16GiB")
    args, rest = p.parse_known_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"load average before: {os.getloadavg()}", flush=True)
    t0 = time.monotonic()
    cluster = LocalCluster(args.out / "cluster", policy=args.policy)
    code = 1
    try:
        cluster.start_coordinator()
        cluster.start_agent("n1", args.virtual_gpus)
        cluster.wait_nodes({"n1"})
        spares = default_spares(int(args.virtual_gpus.split("x")[0]))
        print(f"spare runners ready: {wait_warm(cluster.root, {'n1'}, spares)}", flush=True)
        # the CPU share its runners get (the agent's children), for the simulator
        probe = RunnerShareProbe(cluster.procs["agent-n1"].pid)
        code = replay.main(["--coordinator", cluster.address, "--out", str(args.out), *rest],
                           share_probe=probe)
    finally:
        cluster.stop_all(timeout_s=20)
    print(f"load average after: {os.getloadavg()}; wall {time.monotonic() - t0:.0f} s; "
          f"exit {code}", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
