"""What moving a job costs, and how long it must run between moves.

A suspend or migration costs the job a checkpoint save and a restart (process
start, graph, restore, first step). The live coordinator measures both from the
runner's events (``checkpoint`` seconds, ``start_phases``), the simulator from its profile's start-up and
checkpoint costs (with its measurement noise); both fill ``JobView.move_cost_s``
with ``move_cost_s`` here, and a policy derives from it how long a job runs
before it may be moved (``min_run_s``) and how long a job waits before it may
make others move (``promote_floor_s``). Before a job's move cost is measured
the policy's fixed values stand.
"""

from __future__ import annotations

# a move's cost at most this share of the run segment before it: a job runs at
# least its move cost / MOVE_SHARE between a start and its next move
MOVE_SHARE = 0.1
# a waiting job is promoted (and makes others move) only after it has waited as
# long as its own minimum run: a running job must run that long before it may be
# moved, and a waiting one waits that long before it may move others
PROMOTE_FLOOR_RUNS = 1.0


def move_cost_s(restart_s: float | None, save_s: float | None) -> float | None:
    """One move's measured cost: its checkpoint save plus its restart (None: restart not measured)."""
    if restart_s is None:
        return None
    return max(0.0, restart_s) + max(0.0, save_s or 0.0)


def min_run_s(move_cost: float | None, fallback_s: float, share: float = MOVE_SHARE) -> float:
    """Seconds a job runs after a start before it may be moved: its move cost / ``share``.

    ``fallback_s`` before the move cost is measured (None).
    """
    if move_cost is None:
        return fallback_s
    return move_cost / share


def promote_floor_s(move_cost: float | None, fallback_s: float,
                    share: float = MOVE_SHARE) -> float:
    """Seconds a job waits before it may be promoted: ``PROMOTE_FLOOR_RUNS`` of its minimum runs.

    ``fallback_s`` before its move cost is measured (None).
    """
    if move_cost is None:
        return fallback_s
    return PROMOTE_FLOOR_RUNS * move_cost / share
