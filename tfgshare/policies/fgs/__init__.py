"""fgs: the paper's fine-grained GPU sharing scheduler.

After Chung, Tong and Chen, "A fine-grained GPU sharing and job scheduling for
deep learning jobs on the cloud", J. Supercomputing 81(2), 2025, as read in
docs (PAPER.md). Each decision, in order:

1. **Promoted jobs** (waited past a bound, see ``starving``; a job still to
   sample too, at ``max_wait_s``, and then for its sampling phase): the
   ``max_reservations`` longest waiting go first (the others keep their
   shortest-first place until their turn). One that cannot be placed makes
   room: small running jobs (no more GPUs than it, past their ``min_run``) on
   the GPUs that free soonest are moved elsewhere (migrate) or suspended. If
   those jobs are still inside their ``min_run``, or bigger jobs must finish
   first, the GPUs are reserved (nothing else starts on them this round) if
   they free within ``reserve_horizon_s``.
2. **Sampling**: a new job (no sample, no prediction) runs its sampling phase
   (``sample_only``) on a best-fit ``sample_memory_mb`` fragment, or with
   ``sample_on_idle`` on an idle GPU, else the least-loaded one.
3. **Shortest predicted remaining time first** for the other waiting jobs, each
   on the smallest free fragment that fits (best fit) sized from its sampled
   peak memory plus ``headroom``, with at most ``max_cotenants`` jobs on a GPU
   and no tenant's predicted slowdown (the ``interference`` model) past
   ``slowdown_cap``. Multi-GPU jobs are gang-placed on one node if possible.
4. **Consolidation** (``defrag``): when the first job that does not fit would
   fit in the total free capacity, tenants of a nearly fitting GPU are
   migrated to other GPUs' free room to clear a fragment for it.

Running jobs are never preempted for a shorter job, only for promoted jobs
and consolidation, and never within their ``min_run`` of their last start:
their measured move cost over ``move_share`` (``policies.movecost``), or
``min_run_s`` before it is measured.

The package is one module per phase of a decision, as extension points of a
scheduler framework are (each named for what it decides; each says what it
owns and may import in its docstring):

- ``policy``: ``Fgs``, its settings and ``decide``, which runs the phases in
  order, each receiving one round's state (``fit.RoundState``; they share
  nothing else), and keeps the memo's FreeMap;
- ``order`` (queue order): the walks over the waiting queues, stopped once
  nothing left could fit (``SmallestLeft``) and passing over size buckets too
  big for any room (``SizedWalk``);
- ``fit``: a round's working state, a job's size, and whether a GPU has room
  and stays calm for one more tenant (``RoundState``);
- ``best_fit``: placing a walk's jobs on the tightest fragments that fit
  (``BestFit``);
- ``make_room``: making room for a promoted job, or reserving GPUs for it
  (``MakeRoom``), with the memo-kept indexes in ``room_index`` (a 1-GPU
  job's read over every GPU's steps as arrays in ``step_table``);
- ``consolidate``: migrating single-GPU tenants to clear fragments
  (``Consolidate``, ``MovableIndex``);
- ``memo``: ``FgsMemo``, what fgs keeps between rounds (the queues,
  promotions, what each index reads of a tenant);
- ``records``: the NamedTuples those keep and pass, never positional tuples.

Imports run one way, in the order of ``LAYERS``: a module imports only
modules before it there (``policy`` only for types), which
``tests/test_import_rules.py`` checks.
"""

from .fit import util_of
from .memo import FgsMemo
from .policy import Fgs

__all__ = ["Fgs", "FgsMemo", "util_of"]

# fgs's modules, each importing only those before it (at run time)
LAYERS = ("records", "order", "memo", "fit", "best_fit", "step_table", "room_index", "make_room",
          "consolidate", "policy")
