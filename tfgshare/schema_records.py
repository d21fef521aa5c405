"""The records nested in agent messages: GPUs, runners, telemetry, gang parts, fragments.

Owns the small structs an agent reports (``GpuInfo``, ``RunningJob``,
``GpuTelemetry``, ``JobTelemetry``, ``PortRange``) and a coordinator commands
(``GangMember``, ``FragmentSpec``); the messages that carry them are in
``tfgshare.schema``, which re-exports every name here.

May import: ``schema_fields``, msgspec and the standard library only (it sits
under every part).
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta, Struct, field

from .schema_fields import Fraction, HostPort, Name, NonNegative, Port, Positive


class GpuInfo(Struct, forbid_unknown_fields=True):
    """A GPU an agent offers at registration."""

    index: NonNegative
    name: Name
    memory_mb: Positive
    virtual: bool = False


class RunningJob(Struct, forbid_unknown_fields=True):
    """A runner still alive on an agent, reported at (re-)registration."""

    job: Name
    pid: int
    step: NonNegative = 0
    attempt: int | None = None


class GpuTelemetry(Struct, forbid_unknown_fields=True):
    """One GPU's load in a heartbeat."""

    index: NonNegative
    util: float = 0.0
    memory_used_mb: float = 0.0


class JobTelemetry(Struct, forbid_unknown_fields=True):
    """One job's progress and real GPU memory (per GPU index) in a heartbeat."""

    job: Name
    step: NonNegative = 0
    gpu_memory_mb: dict[int, float] = field(default_factory=dict)




class PortRange(Struct, forbid_unknown_fields=True):
    """Ports ``first``..``last`` (inclusive) an agent's gang members may listen on."""

    first: Port
    last: Port

    def __post_init__(self) -> None:
        if self.last < self.first:
            raise ValueError(f"port range {self.first}-{self.last} is empty")


class GangMember(Struct, forbid_unknown_fields=True):
    """One node's part of a job that spans nodes: worker ``task`` of the gang.

    Worker 0 is the chief: it owns the checkpoint and serves the ``ps_hosts``
    parameter servers in its own process (runner ``--serve_ps``).
    """

    task: NonNegative
    ps_hosts: Annotated[list[HostPort], Meta(min_length=1, max_length=64)]
    worker_hosts: Annotated[list[HostPort], Meta(min_length=2, max_length=1024)]

    def runner_args(self) -> list[str]:
        """The runner flags that make it this member (TF-Slim's names)."""
        args = ["--job_name", "worker", "--task", str(self.task),
                "--ps_hosts", ",".join(self.ps_hosts),
                "--worker_hosts", ",".join(self.worker_hosts),
                "--num_ps_tasks", str(len(self.ps_hosts)),
                "--worker_replicas", str(len(self.worker_hosts)), "--sync_replicas"]
        return args + (["--serve_ps"] if self.task == 0 else [])


class FragmentSpec(Struct, forbid_unknown_fields=True):
    """One fragment of a job on the agent's GPU ``gpu_index``."""

    gpu_index: NonNegative
    fraction: Fraction

