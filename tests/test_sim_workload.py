"""Trace jobs made ready for the simulator: filters, models, jobs too wide to run."""

from __future__ import annotations

import pytest

from tfgshare.sim.profiles import load_profiles
from tfgshare.sim.workload import load_workload


def _trace(tmp_path):
    path = tmp_path / "mini.csv"
    rows = ["timestamp,duration,num_gpus,gpu_time,cluster"]
    for i in range(10):
        gpus = (1, 2, 4, 8)[i % 4]
        rows.append(f"2017-10-01 00:{i:02d}:00,{600 * (i + 1)}.0,{gpus},"
                    f"{600 * (i + 1) * gpus}.0,{'ab'[i % 2]}")
    path.write_text("\n".join(rows) + "\n")
    return str(path)


def test_models_filters_and_too_wide(tmp_path):
    prof = load_profiles()
    w = load_workload(_trace(tmp_path), prof, cluster_gpus=4, seed=3, num_jobs=8)
    assert len(w.jobs) + len(w.too_wide) == 8
    assert all(j.num_gpus == 8 for j in w.too_wide) and len(w.too_wide) == 2
    for j in w.jobs:
        p = prof.get(j.model, j.batch_size)          # every job has a profiled model
        assert j.total_steps == max(1, round(j.duration / p.step_time_s))
    again = load_workload(_trace(tmp_path), prof, cluster_gpus=4, seed=3, num_jobs=8)
    assert again.jobs == w.jobs
    only_a = load_workload(_trace(tmp_path), prof, cluster_gpus=64, vcs=["a"])
    assert {j.vc for j in only_a.jobs} == {"a"} and len(only_a.jobs) == 5
    fast = load_workload(_trace(tmp_path), prof, cluster_gpus=64, time_compression=2.0)
    assert max(j.submit_time for j in fast.jobs) == pytest.approx(9 * 60 / 2)


def test_bad_filters(tmp_path):
    with pytest.raises(ValueError, match="num_jobs"):
        load_workload(_trace(tmp_path), load_profiles(), 4, num_jobs=0)
    with pytest.raises(ValueError, match="no jobs left"):
        load_workload(_trace(tmp_path), load_profiles(), 4, vcs=["zz"])
