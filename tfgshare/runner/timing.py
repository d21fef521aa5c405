"""Step-time sampling and completion-time prediction (no TensorFlow).

A job first runs a warm-up, then a bounded number of sampled steps; their mean
step time predicts the remaining time (remaining steps x step time). After the
sample, the prediction follows an exponential moving average of step times.
``job_age_s`` is how long the job has been starting and ``job_waited_s`` how long it
waited for a warm runner before that (its ``start_phases`` event).
"""

from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from tfgshare.sampling import SamplePlan


@dataclass
class StepTimer:
    """Collects step durations: the sample, then a moving average for predictions."""

    plan: SamplePlan
    images_per_step: int
    alpha: float = 0.1
    steps_seen: int = 0
    sample: list[float] = field(default_factory=list)
    average_s: float | None = None

    @property
    def sample_done(self) -> bool:
        """True once the sampled steps are all measured."""
        return len(self.sample) >= self.plan.sampled > 0

    def add(self, seconds: float) -> bool:
        """Record one step's duration; True when this step completes the sample."""
        self.steps_seen += 1
        completes = False
        if self.steps_seen > self.plan.warmup and not self.sample_done and self.plan.sampled:
            self.sample.append(seconds)
            completes = self.sample_done
            if completes:
                self.average_s = statistics.fmean(self.sample)
        if not completes and self.steps_seen > self.plan.warmup:
            if self.average_s is None:
                self.average_s = seconds
            else:
                self.average_s += self.alpha * (seconds - self.average_s)
        return completes

    def predicted_remaining_s(self, remaining_steps: int) -> float | None:
        """Remaining steps times the current step-time estimate (None before any)."""
        if self.average_s is None:
            return None
        return max(0, remaining_steps) * self.average_s

    def sample_stats(self) -> dict:
        """Mean and spread of sampled step time, and images per second."""
        mean = statistics.fmean(self.sample)
        std = statistics.pstdev(self.sample) if len(self.sample) > 1 else 0.0
        return {
            "warmup_steps": self.plan.warmup,
            "sampled_steps": len(self.sample),
            "step_time_mean_s": mean,
            "step_time_std_s": std,
            "images_per_sec": self.images_per_step / mean if mean > 0 else math.inf,
        }


_job_start: float | None = None   # monotonic time a warm runner was handed its job
_job_waited = 0.0                 # seconds its job line waited for it to be ready


def mark_job_start(at: float, waited_s: float = 0.0) -> None:
    """Count a job's start from ``at`` (monotonic), not from the process start (warm
    runner), after its job waited ``waited_s`` for the runner to be ready."""
    global _job_start, _job_waited
    _job_start, _job_waited = at, max(0.0, waited_s)


def job_waited_s() -> float:
    """How long the job waited for its warm runner to be ready (0: none, or cold)."""
    return _job_waited


def job_age_s() -> float | None:
    """Seconds since this job started: since its process started (Linux) or it was handed
    to a warm runner; None where that cannot be read."""
    if _job_start is not None:
        return time.monotonic() - _job_start
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")
        return float(Path("/proc/uptime").read_text().split()[0]) - started
    except (OSError, ValueError, IndexError):
        return None
