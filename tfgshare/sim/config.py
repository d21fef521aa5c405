"""The simulator's knobs: costs, sampling, measurement noise and decision timing."""

from __future__ import annotations

from dataclasses import dataclass, field

from tfgshare import sampling
from tfgshare.policies.prediction import VIEW_REFRESH_S, VIEW_REFRESH_SHARE

from .colocation import Colocation


@dataclass(frozen=True)
class SimConfig:
    """Parameters of one simulation (defaults are documented estimates).

    Checkpoint save and restore each take ``checkpoint_mb / storage_mb_s``
    seconds (or ``checkpoint_s`` when set; 0 makes moves free); every (re)start
    pays the model's ``startup_s`` first (or ``startup_s`` here when set), except a
    restart from a checkpoint under a profile that measured one (``resume_startup_s``,
    read included), when neither is set here. The sampling
    phase runs real training steps, as many as the live runner's rule
    (``tfgshare.sampling.plan_sampling``) gives for ``warmup_steps``, ``sample_steps``
    and ``sample_share``, then saves a checkpoint.
    """

    seed: int = 0
    storage_mb_s: float = 250.0          # checkpoint bandwidth to shared storage
    colocation: Colocation = field(default_factory=Colocation)
    cross_node_slowdown: float = 0.10    # step-time penalty when a job spans nodes
    warmup_steps: int = sampling.WARMUP_STEPS   # the live runner's (tfgshare.sampling)
    sample_steps: int = sampling.SAMPLE_STEPS
    sample_share: float = sampling.MAX_SHARE
    step_noise: float = 0.05             # relative s.d. of a sampled step time
    memory_noise: float = 0.03           # measured peak exceeds the true one by up to ~this
    tick_s: float | None = 60.0          # call the policy at least this often while jobs wait
    refresh_s: float = VIEW_REFRESH_S    # running jobs report progress this often ...
    refresh_share: float = VIEW_REFRESH_SHARE   # ... or this share of their predicted
                                         # remaining time (``prediction.view_refresh_s``)
    check: bool = False                  # check the invariants after every round (slow; the
                                         # actions are always checked: policies.validate)
    startup_s: float | None = None       # every (re)start's start-up time; None: the profile's
    checkpoint_s: float | None = None    # each checkpoint save or restore; None: by bandwidth
    # the live runner's own checkpoints, each holding the job's GPUs while written: the last
    # one before a job ends, and the one a fresh run (not sample-only, no checkpoint yet)
    # writes after its sampling phase (off by default: the shipped figures predate it)
    runner_checkpoints: bool = False
    # a start-up (graph build, restore, first step's set-up) computes on the device it
    # starts on, slowed by the co-tenants there as a step is (virtual GPUs: the runner's
    # one core); off, it is host work that co-tenants do not slow (GPUs)
    startup_on_device: bool = False

    def __post_init__(self) -> None:
        for name in ("storage_mb_s", "refresh_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)!r}")
        if self.tick_s is not None and not self.tick_s > 0:
            raise ValueError(f"tick_s must be positive or None, got {self.tick_s!r}")
        if not 0 < self.sample_share <= 1:
            raise ValueError(f"sample_share must be in (0, 1], got {self.sample_share!r}")
        for name in ("warmup_steps", "sample_steps"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")
        for name in ("startup_s", "checkpoint_s"):
            v = getattr(self, name)
            if v is not None and not (0 <= v < float("inf")):
                raise ValueError(f"{name} must be >= 0 and finite, or None, got {v!r}")
        for name in ("cross_node_slowdown", "step_noise", "memory_noise", "refresh_share"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")
