"""What a loop turn has to say: agent commands, the commands awaiting an answer, job log lines.

Owns the commands queued for the agents (sent after the turn's replies, once the
database is committed), the commands sent and not yet answered (``pending``) and
the job log lines not yet written to the state database. It decides nothing.

May import: ``tfgshare.schema``, ``coordinator.cluster`` (the job and node types)
``coordinator.logs`` and ``policies.base``.
"""

from __future__ import annotations

import logging
import time

from tfgshare import schema as s
from tfgshare.coordinator.cluster import LiveJob, Node
from tfgshare.coordinator.logs import log
from tfgshare.policies.base import JobState


class Outbox:
    """Agent commands and job log lines of the turn in hand."""

    def __init__(self) -> None:
        self.commands: list[tuple[list[bytes], s.Message]] = []
        # command id -> (job, attempt, type, node), until the agent answers
        self.pending: dict[str, tuple[str, int, str, str]] = {}
        self.logs: list[tuple[str, float, str]] = []   # (job, time, line), not yet stored
        self._stamp_second, self._stamp = -1, ""

    def send(self, node: Node, msg: s.Message, job: LiveJob | None = None) -> None:
        """Queue a command to a node's agent (none while it is away); with ``job``,
        await its answer (a refusal re-queues the job)."""
        if node.identity is None:
            return
        if job is not None:
            self.pending[msg.id] = (job.id, job.attempt, msg.TYPE, node.name)
        self.commands.append(([node.identity], msg))

    def send_adopt(self, node: Node, job: LiveJob) -> None:
        """Take a reported runner of the job back: adopt it, and repeat a cancel or a
        suspend asked before."""
        self.send(node, s.AdoptJob(job=job.id, attempt=job.attempt), job)
        if job.cancel_requested:
            self.send(node, s.CancelJob(job=job.id, attempt=job.attempt), job)
        elif job.state is JobState.SUSPENDING:
            self.send(node, s.SuspendJob(job=job.id, attempt=job.attempt), job)

    def take_commands(self) -> list[tuple[list[bytes], s.Message]]:
        """The commands queued so far, handed over once (the queue is emptied)."""
        out, self.commands = self.commands, []
        return out

    def forget_node(self, name: str) -> None:
        """A node is lost: its commands will never be answered."""
        self.pending = {k: v for k, v in self.pending.items() if v[3] != name}

    def log_job(self, job: LiveJob, now: float, line: str, decision: bool = True) -> None:
        """A line of the job's log (a decision also goes to the coordinator's log)."""
        second = int(now)
        if second != self._stamp_second:
            self._stamp_second = second
            self._stamp = time.strftime("%H:%M:%S", time.localtime(second))
        self.logs.append((job.id, now, f"{self._stamp}.{int(now * 1000) % 1000:03d} {line}"))
        if decision and log.isEnabledFor(logging.INFO):
            log.info("%s: %s", job.id, line)
