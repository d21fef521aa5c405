"""The coordinator's settings and the ``tfgshare coordinator`` flags that set them."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfgshare.keys import RemovedToken

DEFAULT_ADDRESS = "tcp://127.0.0.1:5555"


@dataclass
class CoordinatorConfig:
    """How a coordinator runs (the ``tfgshare coordinator`` flags)."""

    state: Path
    bind: str = DEFAULT_ADDRESS
    policy: str = "fgs"
    policy_params: dict[str, Any] = field(default_factory=dict)
    checkpoint_root: Path | None = None     # default: <dir of state>/checkpoints
    metrics_port: int | None = None         # None: no HTTP metrics; 0: a free port
    metrics_host: str = "127.0.0.1"         # off loopback, scrapes need the bearer token
    reserve_mb: float = 300.0
    node_timeout: float = 10.0
    tick: float = 1.0
    heartbeat_s: float | None = None        # told to agents; default node_timeout / 4
    keys_dir: Path | None = None            # CurveZMQ keys; default: <dir of state>/keys
    max_retries: int = 2                    # failures in a row without progress before a
    #                                         job is marked failed
    max_batch: int = 2000                   # frames handled per loop turn
    round_gap: float = 0.005                # least seconds between event-driven rounds


def parser() -> argparse.ArgumentParser:
    """The ``tfgshare coordinator`` flags."""
    p = argparse.ArgumentParser(prog="tfgshare coordinator",
                                description="Run the ZeroMQ coordinator.")
    p.add_argument("--bind", default=DEFAULT_ADDRESS, help="ZMQ address to bind (ROUTER)")
    p.add_argument("--state", required=True, help="SQLite state file (created if missing)")
    from tfgshare.policies.registry import POLICY_NAMES
    p.add_argument("--policy", default="fgs",
                   help=f"scheduling policy (default fgs; one of {', '.join(POLICY_NAMES)})")
    p.add_argument("--policy-param", action="append", default=[], metavar="KEY=VALUE",
                   help="a policy parameter (JSON value), repeatable")
    p.add_argument("--checkpoint-root", default=None,
                   help="shared checkpoint directory (default: <dir of --state>/checkpoints)")
    p.add_argument("--metrics-port", type=int, default=None,
                   help="serve Prometheus metrics on this port (0: a free port)")
    p.add_argument("--metrics-host", default="127.0.0.1",
                   help="address the metrics port binds (default 127.0.0.1); off loopback every "
                        "scrape needs the bearer token `tfgshare keys init` writes to "
                        "<keys dir>/metrics.token")
    p.add_argument("--reserve-mb", type=float, default=300.0,
                   help="per-process CUDA context reserve on each GPU, MiB")
    p.add_argument("--node-timeout", type=float, default=10.0,
                   help="seconds without a heartbeat before a node is lost")
    p.add_argument("--tick", type=float, default=1.0, help="policy timer, seconds")
    p.add_argument("--token", action=RemovedToken, help=argparse.SUPPRESS)
    p.add_argument("--keys-dir", default=None,
                   help="CurveZMQ keys made by `tfgshare keys` (default: <dir of --state>/keys); "
                        "authentication is on whenever they exist or --bind is not loopback")
    p.add_argument("--max-retries", type=int, default=2, metavar="N",
                   help="restarts after failures in a row without progress before a job is "
                        "marked failed (a failure after the job advanced counts as the first; "
                        "default 2)")
    return p


def config_from_args(argv: list[str]) -> CoordinatorConfig:
    """Parse and check the flags; exit with a clear message on bad ones."""
    p = parser()
    a = p.parse_args(argv)
    params = {}
    for item in a.policy_param:
        key, sep, value = item.partition("=")
        if not sep:
            p.error(f"--policy-param must be KEY=VALUE, got {item!r}")
        try:
            params[key] = json.loads(value)
        except ValueError:
            params[key] = value
    for name in ("node_timeout", "tick"):
        if getattr(a, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be > 0")
    if a.reserve_mb < 0:
        p.error("--reserve-mb must be >= 0")
    if a.max_retries < 0:
        p.error("--max-retries must be >= 0")
    return CoordinatorConfig(
        state=Path(a.state), bind=a.bind, policy=a.policy, policy_params=params,
        checkpoint_root=Path(a.checkpoint_root) if a.checkpoint_root else None,
        metrics_port=a.metrics_port, metrics_host=a.metrics_host, reserve_mb=a.reserve_mb, node_timeout=a.node_timeout,
        tick=a.tick, keys_dir=Path(a.keys_dir) if a.keys_dir else None,
        max_retries=a.max_retries)
