"""The one sampling configuration, shared by the live runner and the simulator.

A job's sampling phase runs ``WARMUP_STEPS`` unmeasured steps (graph set-up,
allocator and cache warm-up), then measures ``SAMPLE_STEPS`` steps; the two
together take at most ``MAX_SHARE`` of the job's steps (at least one measured
step). Step time, peak memory and single-tenant utilisation come from the
measured steps only. A job samples once: a run resumed after its sample does
not sample again. ``plan_sampling`` is the one rule for how long a phase is: the
runner runs it and the simulator charges it.
"""

from __future__ import annotations

from dataclasses import dataclass

WARMUP_STEPS = 5     # enough for TensorFlow's first-step set-up and the allocator to settle
SAMPLE_STEPS = 20    # a stable mean step time (a few % spread on the slim models)
MAX_SHARE = 0.10     # sampling never takes more than this share of a job's steps


@dataclass(frozen=True)
class SamplePlan:
    """How many steps to warm up and how many to measure."""

    warmup: int
    sampled: int

    @property
    def steps(self) -> int:
        """The phase's length in training steps (warm-up and sampled)."""
        return self.warmup + self.sampled


def plan_sampling(remaining_steps: int, warmup_steps: int = WARMUP_STEPS,
                  num_sample_steps: int = SAMPLE_STEPS,
                  max_share: float = MAX_SHARE) -> SamplePlan:
    """Warm-up and sample lengths, the two together within ``max_share`` of the job.

    The first step (graph set-up) is never sampled when there is a second one;
    a job with a step to run always gets at least one sampled step, so a sample
    record exists even for tiny jobs.
    """
    if remaining_steps <= 0 or num_sample_steps <= 0:
        return SamplePlan(0, 0)
    budget = max(2, int(remaining_steps * max_share))
    warmup = min(warmup_steps, max(1, budget // 4))
    sampled = max(1, min(num_sample_steps, budget - warmup))
    if warmup + sampled > remaining_steps:
        warmup = min(warmup, remaining_steps - 1)
        sampled = remaining_steps - warmup
    return SamplePlan(warmup, sampled)
