"""A coordinator and agents as local processes: what the demo and the e2e tests run.

Every process starts in its own session (process group) with its output in
``<root>/logs/<name>.log``; ``stop`` ends each of them, politely first (SIGTERM,
so an agent checkpoints its runners) and then with SIGKILL. Each dies with the
process that started it (so a killed demo or test run leaves none behind), and
runners die with their agent. The coordinator's state and the shared checkpoint directory live
under ``root``. Bound anywhere but loopback, it runs with CurveZMQ keys as an
operator would set them up (``keys/`` beside the state: an admin user for its
clients and one agent key per node).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tfgshare import keys
from tfgshare.agent.supervisor import die_with_parent
from tfgshare.client.api import Client


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass
class LocalCluster:
    """Processes of one local cluster, rooted at ``root``."""

    root: Path
    host: str = "127.0.0.1"          # where the coordinator binds and agents connect
    port: int = 0                    # 0: a free port, chosen at the first start
    policy: str = "fgs"
    node_timeout: float = 10.0
    tick: float = 0.5
    coordinator_flags: list[str] = field(default_factory=list)
    keyed: bool | None = None        # CurveZMQ keys; None: whenever host is not loopback
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        if not self.port:
            self.port = free_port(self.host)
        if self.keyed is None:
            self.keyed = not keys.is_loopback(self.address)
        if self.keyed:   # as an operator would: the coordinator's pair and an admin user
            keys.init(self.keys_dir)
            self._key("local", "admin")

    @property
    def keys_dir(self) -> Path:
        """Where the coordinator finds its keys (its default: beside the state)."""
        return keys.keys_dir_for(self.state)

    def _key(self, name: str, role: str) -> Path:
        """The secret key file issued to ``name`` (made and registered once)."""
        secret = self.keys_dir / "issued" / name / f"{name}.key_secret"
        if not secret.exists():
            keys.add(self.keys_dir, name, role)
        return secret

    @property
    def address(self) -> str:
        return f"tcp://{self.host}:{self.port}"

    @property
    def state(self) -> Path:
        return self.root / "state.db"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    def log(self, name: str) -> Path:
        """The output file of process ``name``."""
        return self.root / "logs" / f"{name}.log"

    def start_coordinator(self, name: str = "coordinator", timeout_s: float = 30.0) -> None:
        """Start the coordinator on ``address`` and wait until it answers."""
        self._spawn(name, [sys.executable, "-m", "tfgshare.cli", "coordinator",
                           "--bind", self.address, "--state", str(self.state),
                           "--checkpoint-root", str(self.checkpoints), "--policy", self.policy,
                           "--node-timeout", str(self.node_timeout), "--tick", str(self.tick),
                           *self.coordinator_flags])
        end = time.monotonic() + timeout_s
        with self.client(timeout_s=0.5) as c:
            while True:
                self._check_alive(name)
                try:
                    c.nodes()
                    return
                except Exception:
                    if time.monotonic() > end:
                        raise TimeoutError(f"coordinator did not answer within {timeout_s:g}s; "
                                           f"see {self.log(name)}") from None

    def start_agent(self, node: str, virtual_gpus: str | None = "2x16GiB", threads: int = 1,
                    extra: list[str] | None = None, prefix: list[str] | None = None) -> None:
        """Start an agent for ``node`` offering virtual GPUs (``prefix``: e.g. ip netns exec).

        ``virtual_gpus=None`` lets the agent use the node's real GPUs (NVML).
        """
        work = self.root / "agents" / node
        gpus = ["--virtual-gpus", virtual_gpus, "--force-virtual"] if virtual_gpus else []
        if self.keyed:
            extra = ["--key", str(self._key(node, "agent")), *(extra or [])]
        self._spawn(f"agent-{node}", [*(prefix or []), sys.executable, "-m", "tfgshare.cli",
                                      "agent", "--coordinator", self.address, "--node", node,
                                      *gpus, "--work-dir", str(work), "--threads", str(threads),
                                      *(extra or [])])

    def client(self, timeout_s: float = 5.0) -> Client:
        """A client of this cluster's coordinator."""
        key = str(self._key("local", "admin")) if self.keyed else None
        return Client(self.address, timeout_s=timeout_s, key=key)

    def wait_nodes(self, names: set[str], timeout_s: float = 60.0) -> None:
        """Wait until every node in ``names`` is up."""
        end = time.monotonic() + timeout_s
        with self.client() as c:
            while True:
                up = {n["name"] for n in c.nodes() if n["state"] == "up"}
                if names <= up:
                    return
                for name in names - up:
                    self._check_alive(f"agent-{name}")
                if time.monotonic() > end:
                    raise TimeoutError(f"nodes {sorted(names - up)} did not join within "
                                       f"{timeout_s:g}s; see {self.root / 'logs'}")
                time.sleep(0.1)

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to process ``name``'s group and, for SIGKILL, reap it."""
        proc = self.procs.get(name)
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        if sig == signal.SIGKILL:
            proc.wait()

    def stop(self, name: str, timeout_s: float = 20.0) -> None:
        """SIGTERM process ``name``, then SIGKILL its group if it lingers."""
        proc = self.procs.get(name)
        if proc is None:
            return
        if proc.poll() is None:
            self.kill(name, signal.SIGTERM)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)   # whatever is left in its group
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()

    def stop_all(self, timeout_s: float = 20.0) -> None:
        """Stop the agents (their runners checkpoint), then the coordinator."""
        names = list(self.procs)
        for name in names:
            if name.startswith("agent-") and self.procs[name].poll() is None:
                self.kill(name, signal.SIGTERM)
        for name in names:
            if name.startswith("agent-"):
                self.stop(name, timeout_s)
        for name in names:
            self.stop(name, timeout_s)

    def __enter__(self) -> "LocalCluster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()

    def _spawn(self, name: str, cmd: list[str]) -> None:
        old = self.procs.get(name)
        if old is not None and old.poll() is None:
            raise RuntimeError(f"{name} is already running (pid {old.pid})")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with open(self.log(name), "ab") as out:
            self.procs[name] = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out,
                                                stderr=subprocess.STDOUT, env=env,
                                                start_new_session=True,
                                                preexec_fn=die_with_parent(os.getpid()))

    def _check_alive(self, name: str) -> None:
        proc = self.procs.get(name)
        if proc is not None and proc.poll() is not None:
            tail = self.log(name).read_text(errors="replace").splitlines()[-15:]
            raise RuntimeError(f"{name} exited with code {proc.returncode}:\n"
                               + "\n".join(tail))
