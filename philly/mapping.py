"""Giving each trace job one of the paper's four models, a batch size and a step count.

The Philly trace records only how long a job ran on how many GPUs, not what it
trained. The rule, for a job of ``g = duration * num_gpus / 3600`` GPU-hours:

1. Its GPU-time bucket (< 1, < 10, < 100, >= 100 GPU-hours) sets weights over the
   four models (``BUCKET_WEIGHTS``). This follows Pollux's idea of matching short
   jobs with small workloads and long jobs with large ones: short jobs lean
   towards ``alexnet_v2`` (fast steps, small memory), long ones towards
   ``vgg_16`` and ``inception_v3`` (slow steps; ``vgg_16`` has the largest
   footprint). Every bucket keeps all four models so that jobs of every size
   still bring every memory footprint to the fragment packer, which is what the
   paper's GPU sharing depends on.
2. A model is drawn with those weights (only models present in ``profiles``
   count), then a batch size uniformly from those profiled for it.
3. ``total_steps = max(1, round(duration / step_time(model, batch)))``, so
   ``total_steps * step_time`` is within half a step of the job's duration on the
   reference GPU (within one step for jobs shorter than half a step).

The draws come from a hash of ``(seed, job.id)``, not from a shared random
stream: the result for a job depends only on the seed, its id and its duration
and GPU count, never on the order or the other jobs of the list.
"""

from __future__ import annotations

import hashlib
import math

from philly.jobs import TraceJob

PAPER_MODELS = ("inception_v3", "resnet_v1_50", "vgg_16", "alexnet_v2")

# (upper bound in GPU-hours, relative weight of each paper model)
BUCKET_WEIGHTS: tuple[tuple[float, dict[str, float]], ...] = (
    (1.0, {"alexnet_v2": 4, "resnet_v1_50": 3, "inception_v3": 2, "vgg_16": 1}),
    (10.0, {"alexnet_v2": 2, "resnet_v1_50": 3, "inception_v3": 3, "vgg_16": 2}),
    (100.0, {"alexnet_v2": 1, "resnet_v1_50": 3, "inception_v3": 3, "vgg_16": 3}),
    (math.inf, {"alexnet_v2": 1, "resnet_v1_50": 2, "inception_v3": 3, "vgg_16": 4}),
)

Profiles = dict[str, dict[int, float]]


def assign_models(jobs: list[TraceJob], profiles: Profiles, seed: int = 0) -> list[TraceJob]:
    """The jobs with model, batch size and total steps chosen by the module's rule.

    ``profiles`` maps model name to ``{batch_size: step_time_seconds}`` on the
    reference GPU; models other than the paper's four are ignored.
    """
    table = _check_profiles(profiles)
    models = [m for m in PAPER_MODELS if m in table]
    buckets = [(bound, [weights[m] for m in models]) for bound, weights in BUCKET_WEIGHTS]
    mapped = []
    for job in jobs:
        u_model, u_batch = _uniforms(seed, job.id)
        model = _pick(models, _bucket_weights(buckets, job.gpu_time / 3600.0), u_model)
        batches = table[model]
        batch, step_time = batches[min(int(u_batch * len(batches)), len(batches) - 1)]
        steps = max(1, round(job.duration / step_time))
        mapped.append(job.copy_with(model=model, batch_size=batch, total_steps=steps))
    return mapped


def _bucket_weights(buckets: list[tuple[float, list[float]]], gpu_hours: float) -> list[float]:
    for bound, weights in buckets:
        if gpu_hours < bound:
            return weights
    return buckets[-1][1]


def _pick(items: list[str], weights: list[float], u: float) -> str:
    threshold = u * sum(weights)
    total = 0.0
    for item, weight in zip(items, weights):
        total += weight
        if threshold < total:
            return item
    return items[-1]


def _uniforms(seed: int, job_id: str) -> tuple[float, float]:
    digest = hashlib.blake2b(f"{seed}\x00{job_id}".encode(), digest_size=16).digest()
    scale = float(2**64)
    return int.from_bytes(digest[:8], "little") / scale, int.from_bytes(digest[8:], "little") / scale


def _check_profiles(profiles: Profiles) -> dict[str, list[tuple[int, float]]]:
    if not isinstance(profiles, dict):
        raise ValueError(f"profiles must be a dict {{model: {{batch_size: step_time_s}}}}, got {type(profiles).__name__}")
    table = {}
    for model in PAPER_MODELS:
        if model not in profiles:
            continue
        batches = profiles[model]
        if not isinstance(batches, dict) or not batches:
            raise ValueError(f"profiles[{model!r}] must be a non-empty dict {{batch_size: step_time_s}}")
        rows = []
        for batch, step in batches.items():
            try:
                size, seconds = int(batch), float(step)
            except (TypeError, ValueError):
                raise ValueError(f"profiles[{model!r}][{batch!r}] = {step!r} is not batch size -> seconds") from None
            if size <= 0 or size != float(batch) or not (seconds > 0 and math.isfinite(seconds)):
                raise ValueError(
                    f"profiles[{model!r}][{batch!r}] = {step!r}: need a positive integer batch size "
                    "and a positive step time in seconds")
            rows.append((size, seconds))
        table[model] = sorted(rows)
    if not table:
        raise ValueError(
            f"the profile has none of the paper models {', '.join(PAPER_MODELS)} (it has "
            f"{', '.join(sorted(profiles))}): a trace's jobs are mapped onto them, so profile "
            "at least one (tfgshare profile alexnet_v2@195 --batch-sizes 2 --out FILE) or use "
            "the shipped tfgshare/data/profiles/cpu-virtual-gpu.yaml")
    return table
