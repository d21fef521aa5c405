"""Test helpers for the ``tfgshare`` commands: a small cluster to point them at, and a runner.

``fake_cluster`` is a fifo coordinator in a thread with one ``FakeAgent`` (node
``n1``) registered; ``run`` runs one ``tfgshare`` command line in this process and
returns what the user would see. Shared by the client, terminal and user-fix tests.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from coordinator_fakes import CoordinatorThread, FakeAgent
from tfgshare.cli import main as tfgshare
from tfgshare.policies.registry import get_policy

TWO_GPUS = ((0, 16384), (1, 16384))   # (index, MiB) of the fake agent's GPUs


@contextmanager
def fake_cluster(tmp_path: Path, gpus=TWO_GPUS) -> Iterator[tuple[CoordinatorThread, FakeAgent]]:
    """A fifo coordinator (state in ``tmp_path``) and agent ``n1`` with ``gpus``, registered."""
    ct = CoordinatorThread(tmp_path / "state.db", policy=get_policy("fifo"))
    agent = FakeAgent(ct.address, "n1", gpus=gpus)
    agent.register()
    yield ct, agent
    agent.close()
    ct.close()


def run(capsys, *argv: str) -> tuple[int, str, str]:
    """Run ``tfgshare ARGV`` here: its exit code, and what it printed to stdout and stderr."""
    code = tfgshare(list(argv))
    out, err = capsys.readouterr()
    return code, out, err
