"""The ``tfgshare agent`` command line: its flags and the parsing of their values.

Owns ``build_parser`` and two readers: ``gang_ports`` (``--gang-ports``) and
``default_gang_address`` (``--gang-address`` when not given);
``tfgshare.agent.node.main`` parses with them, checks the other values and runs
the agent. ``tfgshare.agent.node`` re-exports every name here.

May import: ``tfgshare.keys`` (the removed ``--token`` flag), ``tfgshare.agent.config``,
``tfgshare.agent.supervisor`` (for ``SPARE_WAIT_S``) and the standard library.
"""

from __future__ import annotations

import argparse
import socket
from pathlib import Path

from tfgshare import keys
from tfgshare.agent.config import DEFAULT_GANG_PORTS, MAX_SPARES
from tfgshare.agent.supervisor import SPARE_WAIT_S


def build_parser() -> argparse.ArgumentParser:
    """The ``tfgshare agent`` command line."""
    p = argparse.ArgumentParser(prog="tfgshare agent",
                                description="Run a node agent: offer this node's GPUs "
                                            "to a coordinator and run its jobs.")
    p.add_argument("--coordinator", required=True, metavar="tcp://HOST:PORT",
                   help="the coordinator's address")
    p.add_argument("--node", default=socket.gethostname(),
                   help="this node's name (default: the host name)")
    p.add_argument("--virtual-gpus", metavar="SPEC",
                   help="GPUs to offer when NVML finds none, e.g. 2x16GiB or 1x8GiB,1x24GiB "
                        "(their jobs run on the CPU; each virtual GPU gets its own share of "
                        "the CPU cores, and its runners are pinned to them, when there are "
                        "at least as many cores as virtual GPUs)")
    p.add_argument("--force-virtual", action="store_true",
                   help="offer the --virtual-gpus even where NVML finds real GPUs")
    p.add_argument("--work-dir", type=Path,
                   help="runner events and logs (default: a folder in the temp dir)")
    p.add_argument("--heartbeat", type=float, metavar="S",
                   help="seconds between heartbeats (default: the coordinator's choice)")
    p.add_argument("--token", action=keys.RemovedToken, help=argparse.SUPPRESS)
    p.add_argument("--key", default=None,
                   help="this agent's CurveZMQ secret key file (default $TFGSHARE_KEY; made by "
                        "`tfgshare keys add-agent NODE`)")
    p.add_argument("--server-key", default=None,
                   help="the coordinator's public key file (default $TFGSHARE_SERVER_KEY, else "
                        "coordinator.key beside --key)")
    p.add_argument("--threads", type=int, default=1, help="CPU threads per runner (default 1)")
    p.add_argument("--suspend-timeout", type=float, default=60.0, metavar="S",
                   help="seconds a runner has to checkpoint before it is killed")
    p.add_argument("--runner", metavar="CMD",
                   help="command that starts a job runner, split on spaces "
                        "(default: this Python with -m tfgshare.runner)")
    p.add_argument("--no-warm-runner", dest="warm_runner", action="store_false",
                   help="start every runner cold (default: keep spare runners with "
                        "TensorFlow imported, so starts and resumes skip the import)")
    p.add_argument("--spare-runners", type=int, default=None, metavar="N",
                   help="spare runners to keep (default: one per GPU and one more, at "
                        f"most {MAX_SPARES})")
    p.add_argument("--spare-wait", type=float, default=SPARE_WAIT_S, metavar="S",
                   help="replace a spare a job took once that job reports its first step, "
                        f"or S seconds after the hand-over (default {SPARE_WAIT_S:g}: at "
                        "once; waiting was not measured faster, docs/benchmarks.md)")
    p.add_argument("--data-root", type=Path, action="append", metavar="DIR",
                   help="a folder job dataset dirs may be under, repeatable (default: the "
                        "shared data folder and the checkpoint root)")
    p.add_argument("--gang-address", metavar="HOST",
                   help="where the other nodes reach this node's part of a job that spans "
                        "nodes (default: 127.0.0.1 for a loopback coordinator, else the host "
                        "name)")
    p.add_argument("--gang-ports", metavar="FIRST-LAST",
                   default=f"{DEFAULT_GANG_PORTS[0]}-{DEFAULT_GANG_PORTS[1]}",
                   help="ports those gang members may listen on, or 'none' to take no job "
                        "that spans nodes (default %(default)s)")
    p.add_argument("-v", "--verbose", action="store_true", help="log debug detail")
    return p


def gang_ports(text: str) -> tuple[int, int] | None:
    """``FIRST-LAST`` as a port range, None for 'none'; ValueError naming the problem."""
    if text.strip().lower() == "none":
        return None
    first, sep, last = text.partition("-")
    if not sep or not first.strip().isdigit() or not last.strip().isdigit():
        raise ValueError(f"--gang-ports {text!r} must look like 47000-47999 or be 'none'")
    lo, hi = int(first), int(last)
    if not 1 <= lo <= hi <= 65535:
        raise ValueError(f"--gang-ports {text!r} is not a range of ports within 1-65535")
    return lo, hi


def default_gang_address(coordinator: str) -> str:
    """Loopback for a coordinator on loopback, else this host's name."""
    host = coordinator.split("://", 1)[-1].rpartition(":")[0].strip("[]")
    return "127.0.0.1" if host in ("127.0.0.1", "localhost", "::1") else socket.gethostname()
