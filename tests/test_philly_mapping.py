"""Mapping trace jobs to the paper's four models."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from philly import TraceJob, load_trace
from philly.filters import subsample
from philly.mapping import PAPER_MODELS, assign_models

PROFILES = {
    "inception_v3": {32: 0.52, 64: 0.97},
    "resnet_v1_50": {32: 0.36, 64: 0.66},
    "vgg_16": {32: 0.61, 64: 1.15},
    "alexnet_v2": {128: 0.09, 256: 0.17},
}


@pytest.fixture(scope="module")
def sample():
    return subsample(load_trace(), num_jobs=5000, seed=0)


def test_steps_reproduce_duration(sample):
    mapped = assign_models(sample, PROFILES, seed=1)
    for job, original in zip(mapped, sample):
        step = PROFILES[job.model][job.batch_size]
        assert job.total_steps >= 1
        assert abs(job.total_steps * step - original.duration) <= step
        assert (job.id, job.submit_time, job.num_gpus, job.duration) == (
            original.id, original.submit_time, original.num_gpus, original.duration)


def test_deterministic_and_order_independent(sample):
    first = {j.id: j for j in assign_models(sample, PROFILES, seed=3)}
    shuffled = list(sample)
    random.Random(9).shuffle(shuffled)
    again = {j.id: j for j in assign_models(shuffled[:1000], PROFILES, seed=3)}
    assert all(first[i] == job for i, job in again.items())
    other = assign_models(sample, PROFILES, seed=4)
    assert sum(first[j.id].model != j.model for j in other) > len(sample) // 4


def test_all_models_used_and_long_jobs_heavier(sample):
    mapped = assign_models(sample, PROFILES)
    assert {j.model for j in mapped} == set(PAPER_MODELS)
    short = Counter(j.model for j in mapped if j.gpu_time < 3600)
    long = Counter(j.model for j in mapped if j.gpu_time >= 100 * 3600)
    assert short["alexnet_v2"] / sum(short.values()) > long["alexnet_v2"] / sum(long.values())
    assert short["vgg_16"] / sum(short.values()) < long["vgg_16"] / sum(long.values())


def test_only_profiled_models_are_used(sample):
    profiles = {"resnet_v1_50": {"32": 0.36}, "alexnet_v2": {128: 0.09}, "mobilenet": {8: 0.01}}
    mapped = assign_models(sample[:500], profiles)
    assert {j.model for j in mapped} == {"resnet_v1_50", "alexnet_v2"}
    assert {j.batch_size for j in mapped if j.model == "resnet_v1_50"} == {32}


def test_tiny_job_gets_one_step():
    [job] = assign_models([TraceJob("x", 0.0, 1, 0.01)], {"vgg_16": {32: 0.6}})
    assert (job.model, job.batch_size, job.total_steps) == ("vgg_16", 32, 1)


@pytest.mark.parametrize("profiles, message", [
    ({"mobilenet": {8: 0.1}}, "none of the paper models .* use the shipped .*cpu-virtual-gpu"),
    ({"vgg_16": {}}, r"profiles\['vgg_16'\] must be a non-empty dict"),
    ({"vgg_16": {32: -1.0}}, r"profiles\['vgg_16'\]\[32\] = -1.0: need a positive"),
    ({"vgg_16": {"big": 0.5}}, "is not batch size -> seconds"),
    ([("vgg_16", 1)], "profiles must be a dict"),
])
def test_bad_profiles(profiles, message):
    with pytest.raises(ValueError, match=message):
        assign_models([TraceJob("x", 0.0, 1, 10.0)], profiles)
