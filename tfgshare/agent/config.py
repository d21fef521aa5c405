"""How an agent is set up: ``AgentConfig`` and the defaults it and the command line share.

Owns the agent's settings (where its coordinator is, how it runs its runners,
where gang members listen) and their defaults: ``FENCE_SHARE``, ``MAX_SPARES``,
``DEFAULT_GANG_PORTS``. ``tfgshare.agent.node`` re-exports every name here.

May import: ``tfgshare.agent.supervisor`` (for ``SPARE_WAIT_S``), ``tfgshare.agent.pacer``
(for ``PROGRESS_EVERY_S``) and the standard library only; nothing that talks to the
coordinator.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tfgshare.agent.pacer import PROGRESS_EVERY_S
from tfgshare.agent.supervisor import SPARE_WAIT_S

# share of the coordinator's node timeout after which a silent coordinator's runners are killed
FENCE_SHARE = 0.5
# default spare runners: one per GPU and one more, up to this (each holds ~0.4 GB of host
# memory and costs an import of CPU time; see ``default_spares``)
MAX_SPARES = 3
DEFAULT_GANG_PORTS = (47000, 47999)   # where gang members listen unless --gang-ports says


def default_spares(gpus: int) -> int:
    """How many spare runners a node of ``gpus`` GPUs keeps by default: one per GPU and
    one more, at most ``MAX_SPARES``. A job sampled and then resumed starts twice in
    quick succession, so a node's starts come in bursts of more than its GPUs; a spare
    that is still importing when its job arrives makes the job wait for the import."""
    return max(1, min(MAX_SPARES, gpus + 1))


@dataclass
class AgentConfig:
    """How an agent reaches its coordinator and runs its jobs."""

    coordinator: str
    node: str
    work_dir: Path
    heartbeat_s: float | None = None     # None: what the coordinator asks for
    threads: int = 1                     # CPU threads per runner
    suspend_timeout_s: float = 60.0
    register_retry_s: float = 1.0
    runner_cmd: list[str] | None = None  # None: python -m tfgshare.runner
    warm_runner: bool = True             # keep spare runners with TensorFlow imported
    spare_runners: int | None = None     # how many; None: default_spares(GPUs)
    #                                      (real runners only: not with runner_cmd)
    spare_wait_s: float = SPARE_WAIT_S   # a used spare is replaced after its job's first
    #                                      step, or this long after the hand-over; 0: at once
    lost_after_s: float | None = None    # silence before fencing and reconnecting; None:
    #                                      FENCE_SHARE x the coordinator's node timeout
    data_roots: list[Path] | None = None  # where dataset dirs may be; None: the shared
    #                                       data folder and the checkpoint root
    key: str | None = None               # CurveZMQ secret key file (None: $TFGSHARE_KEY)
    server_key: str | None = None        # the coordinator's public key file
    progress_every_s: float = PROGRESS_EVERY_S   # a job's progress reports at most this
    #                                      often (tfgshare.agent.pacer); 0 (default): all
    # a job that spans nodes runs one gang member here (runner.replicas), listening on
    # ``gang_address`` at a port of ``gang_ports`` the coordinator picks; None: no gangs here
    gang_address: str = "127.0.0.1"
    gang_ports: tuple[int, int] | None = DEFAULT_GANG_PORTS
