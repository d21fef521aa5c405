"""Filters, subsampling, scaling to a smaller cluster and time compression."""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from datetime import datetime

import pytest
from hypothesis import given, settings, strategies as st

from philly import TraceJob, load_trace
from philly.filters import compress_time, offered_load, rebase, scale_to_cluster, select, subsample


@pytest.fixture(scope="module")
def trace():
    return load_trace()


def make_jobs(n: int, seed: int = 1) -> list[TraceJob]:
    rng = random.Random(seed)
    t, jobs = 0.0, []
    for i in range(n):
        t += rng.expovariate(1 / 60)
        jobs.append(TraceJob(f"j{i}", t, rng.choice([1, 1, 1, 2, 4, 8]), rng.uniform(10, 5000),
                             rng.choice(["a", "b", "c"])))
    return jobs


def test_select_each_filter():
    jobs = make_jobs(500)
    assert all(j.vc in {"a", "b"} for j in select(jobs, vcs={"a", "b"}))
    assert {j.num_gpus for j in select(jobs, gpus=[2, 8])} == {2, 8}
    assert all(2 <= j.num_gpus <= 4 for j in select(jobs, min_gpus=2, max_gpus=4))
    assert all(100 <= j.duration <= 1000 for j in select(jobs, min_duration=100, max_duration=1000))
    window = select(jobs, start=1000, end=5000)
    assert window and all(1000 <= j.submit_time < 5000 for j in window)
    assert len(window) == sum(1000 <= j.submit_time < 5000 for j in jobs)
    assert select(jobs, max_jobs=10) == jobs[:10]
    assert select(jobs) == jobs


def test_select_dates_need_an_origin():
    jobs = make_jobs(50)
    origin = datetime(2017, 10, 1)
    assert select(jobs, start=datetime(2017, 10, 1, 0, 10), origin=origin) == select(jobs, start=600)
    with pytest.raises(ValueError, match="has no dates"):
        select(jobs, start=datetime(2017, 10, 1))
    with pytest.raises(ValueError, match="neither seconds nor an ISO date-time"):
        select(jobs, end="tomorrow", origin=origin)
    with pytest.raises(ValueError, match="start 600 is after end 60"):
        select(jobs, start=600, end=60)
    with pytest.raises(ValueError, match="max_jobs must be a number >= 0"):
        select(jobs, max_jobs=-1)


def test_rebase_puts_first_job_at_zero():
    jobs = make_jobs(20)
    shifted = rebase(jobs)
    assert shifted[0].submit_time == 0
    gaps = [b.submit_time - a.submit_time for a, b in zip(jobs, jobs[1:])]
    assert [b.submit_time - a.submit_time for a, b in zip(shifted, shifted[1:])] == pytest.approx(gaps)


def test_copy_with_changes_only_the_named_fields():
    job = TraceJob("j1", 5.0, 2, 60.0, vc="vc1", gpu_types=("V100",))
    moved = job.copy_with(submit_time=1.0, model="vgg_16")
    assert moved == dataclasses.replace(job, submit_time=1.0, model="vgg_16")
    assert (job.submit_time, job.model) == (5.0, "")   # the original is untouched
    with pytest.raises(TypeError, match="no field gpus"):
        job.copy_with(gpus=3)


def test_subsample_is_seeded_and_keeps_times(trace):
    sample = subsample(trace, fraction=0.1, seed=7)
    assert len(sample) == round(0.1 * len(trace))
    assert sample == subsample(trace, fraction=0.1, seed=7)
    assert sample != subsample(trace, fraction=0.1, seed=8)
    ids = {j.id for j in trace}
    assert all(j.id in ids for j in sample)
    assert all(a.submit_time <= b.submit_time for a, b in zip(sample, sample[1:]))
    assert len(subsample(trace, num_jobs=500, seed=1)) == 500


def test_subsample_preserves_arrival_shape(trace):
    def weekly_share(jobs):
        weeks = Counter(int(j.submit_time // (7 * 86400)) for j in jobs)
        return {w: n / len(jobs) for w, n in weeks.items()}

    full, part = weekly_share(trace), weekly_share(subsample(trace, fraction=0.2, seed=3))
    for week, share in full.items():
        assert part.get(week, 0) == pytest.approx(share, abs=0.01)


def test_subsample_bad_arguments():
    jobs = make_jobs(10)
    with pytest.raises(ValueError, match="exactly one"):
        subsample(jobs)
    with pytest.raises(ValueError, match="fraction must be in"):
        subsample(jobs, fraction=1.5)
    with pytest.raises(ValueError, match="more than the 10 jobs"):
        subsample(jobs, num_jobs=11)


@pytest.mark.parametrize("cluster_gpus", [16, 256, 1024])
def test_scale_to_cluster_keeps_load_per_gpu(trace, cluster_gpus):
    span = trace[-1].submit_time
    scaled = scale_to_cluster(trace, cluster_gpus, 2490, seed=5)
    assert all(j.num_gpus <= cluster_gpus for j in scaled)
    per_gpu = offered_load(scaled, span) / cluster_gpus
    assert per_gpu == pytest.approx(offered_load(trace) / 2490, rel=0.01)
    assert scaled == scale_to_cluster(trace, cluster_gpus, 2490, seed=5)
    assert len(scaled) < len(trace)


def test_scale_to_cluster_bad_arguments():
    with pytest.raises(ValueError, match="scaling can only thin"):
        scale_to_cluster(make_jobs(10), 100, 10)
    with pytest.raises(ValueError, match="cluster_gpus must be a positive integer"):
        scale_to_cluster(make_jobs(10), 0, 10)


def test_compress_time():
    jobs = make_jobs(100)
    fast = compress_time(jobs, 4)
    assert [j.duration for j in fast] == [j.duration for j in jobs]
    assert fast[0].submit_time == jobs[0].submit_time
    assert fast[-1].submit_time - fast[0].submit_time == pytest.approx(
        (jobs[-1].submit_time - jobs[0].submit_time) / 4)
    both = compress_time(jobs, 4, durations=True)
    assert [j.duration for j in both] == pytest.approx([j.duration / 4 for j in jobs])
    assert offered_load(both) == pytest.approx(offered_load(jobs))
    with pytest.raises(ValueError, match="factor must be a positive number"):
        compress_time(jobs, 0)


job_lists = st.lists(
    st.builds(TraceJob, id=st.text(min_size=1, max_size=5),
              submit_time=st.floats(0, 1e6), num_gpus=st.sampled_from([1, 2, 4, 8]),
              duration=st.floats(1, 1e5)),
    max_size=40,
).map(lambda js: sorted(js, key=lambda j: j.submit_time))


@settings(max_examples=60, deadline=None)
@given(jobs=job_lists, factor=st.floats(0.1, 100), seed=st.integers(0, 10))
def test_properties(jobs, factor, seed):
    fast = compress_time(jobs, factor)
    assert [j.id for j in fast] == [j.id for j in jobs]
    assert all(a.submit_time <= b.submit_time for a, b in zip(fast, fast[1:]))
    sample = subsample(jobs, fraction=0.5, seed=seed)
    assert sample == subsample(jobs, fraction=0.5, seed=seed)
    assert all(j in jobs for j in sample)
    assert select(jobs, max_jobs=5) == jobs[:5]
