"""What an attempt costs in the simulator: its start (start-up, restore), the
checkpoints its runner saves and the length of its sampling phase, from the model's
profile unless the ``SimConfig`` fixes them; the sampling length is the live
runner's own rule (``tfgshare.sampling.plan_sampling``).
"""

from __future__ import annotations

from dataclasses import dataclass

from tfgshare.sampling import plan_sampling

from .config import SimConfig
from .job import SimJob
from .profiles import ModelProfile

EPS = 1e-9


@dataclass(frozen=True, slots=True)
class AttemptCosts:
    """The cost rules of one simulation run."""

    config: SimConfig
    sample_steps: int   # the policy's sampling steps

    def start_s(self, job: SimJob) -> tuple[float, float]:
        """(start-up, restore) seconds of the job's next start."""
        prof = job.prof
        restore = self.checkpoint_s(prof) if job.has_checkpoint else 0.0
        startup = self.startup_s(prof)
        if (job.has_checkpoint and prof.resume_startup_s is not None
                and self.config.startup_s is None and self.config.checkpoint_s is None):
            # a measured restart: the exported graph is imported, not built again
            startup, restore = prof.resume_startup_s, 0.0
        return startup, restore

    def checkpoint_s(self, prof: ModelProfile) -> float:
        """One checkpoint save or restore: the profile's size at the storage speed, unless
        the config fixes it."""
        c = self.config.checkpoint_s
        return prof.checkpoint_mb / self.config.storage_mb_s if c is None else c

    def runner_saves_s(self, job: SimJob, prof: ModelProfile) -> float:
        """With ``runner_checkpoints``, a run's own saves: its last checkpoint, and the one
        after its sampling phase when it starts fresh and the sample ends before the job."""
        cfg = self.config
        if not cfg.runner_checkpoints:
            return 0.0
        saves = 1
        if not job.has_checkpoint and job.steps <= 0 \
                and self.sample_length(job) < job.total_steps:
            saves += 1
        return saves * self.checkpoint_s(prof)

    def sample_length(self, job: SimJob) -> int:
        """Steps of its sampling phase: the live runner's rule (``plan_sampling``) on the
        steps it has left."""
        cfg = self.config
        remaining = job.total_steps - int(job.steps + EPS)
        return plan_sampling(remaining, cfg.warmup_steps, self.sample_steps,
                             cfg.sample_share).steps

    def startup_s(self, prof: ModelProfile) -> float:
        """A fresh start's start-up: the profile's, unless the config fixes it."""
        c = self.config.startup_s
        return prof.startup_s if c is None else c
