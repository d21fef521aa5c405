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


# ---- where a job's paths may point (the agent's rule, checked at submit too) -------


def data_roots(explicit: list[Path] | None, checkpoint_root: str | Path | None) -> list[Path]:
    """The folders a job's dataset dir may be under: an agent's ``--data-root`` folders if
    it has any, else the shared data folder and the checkpoint root (when known)."""
    if explicit is not None:
        return list(explicit)
    roots = [shared_dir() / "data"]
    if checkpoint_root:
        roots.append(Path(checkpoint_root))
    return roots


def absolute(path: str, what: str) -> str:
    """``path``; ValueError unless it is absolute (an agent resolves it in its own folder,
    on its own machine). The part of ``confine`` a client checks without the roots."""
    if not os.path.isabs(path):
        raise ValueError(f"{what} {path} must be an absolute path (the agent runs in "
                         "another folder, maybe on another machine)")
    return path


def confine(path: str, roots: list[Path], what: str) -> Path:
    """``path`` resolved (symlinks followed); ValueError unless it is absolute and lies
    strictly under a root. The agent applies it to every path from the wire; the
    coordinator and ``tfgshare submit`` apply it to a job's dataset dir at submit."""
    absolute(path, what)
    resolved = Path(path).resolve()
    for root in roots:
        root = Path(root).resolve()
        if resolved != root and resolved.is_relative_to(root):
            return resolved
    raise ValueError(f"{what} {path} is outside the allowed roots "
                     f"({', '.join(str(Path(r)) for r in roots)})")


def existing_parent(path: str) -> str:
    """``path`` if it exists, else its nearest ancestor that does (to test access before
    the folder is made)."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    return str(p)
