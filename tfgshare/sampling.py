"""The one sampling configuration, shared by the live runner and the simulator.

A job's sampling phase runs ``WARMUP_STEPS`` unmeasured steps (graph set-up,
allocator and cache warm-up), then measures ``SAMPLE_STEPS`` steps; the two
together take at most ``MAX_SHARE`` of the job's steps (at least one measured
step). Step time, peak memory and single-tenant utilisation come from the
measured steps only. A job samples once: a run resumed after its sample does
not sample again.
"""

from __future__ import annotations

WARMUP_STEPS = 5     # enough for TensorFlow's first-step set-up and the allocator to settle
SAMPLE_STEPS = 20    # a stable mean step time (a few % spread on the slim models)
MAX_SHARE = 0.10     # sampling never takes more than this share of a job's steps
