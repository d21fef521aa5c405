"""Where the project finds its shared, read-only data."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def shared_dir() -> Path:
    """The shared data folder: $TFGSHARE_SHARED, else ``../shared`` beside the repo."""
    env = os.environ.get("TFGSHARE_SHARED")
    return Path(env) if env else REPO_ROOT.parent / "shared"


def philly_dir() -> Path:
    """The folder holding the Philly trace files (see its README)."""
    return shared_dir() / "data" / "philly"
