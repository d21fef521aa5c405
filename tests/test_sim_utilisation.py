"""The workload model: per-job utilisation drawn from Philly's published figures."""

from __future__ import annotations

import json
import statistics

import pytest

from philly import TraceJob
from tfgshare.sim import cli
from tfgshare.sim.utilisation import FLOOR, apply_workload, draw_util, load_cdfs, size_class


def test_draws_follow_the_published_figure_by_job_size():
    cdfs = load_cdfs()
    assert set(cdfs) == {"1", "2-4", "5-8", ">8"}
    assert [size_class(n) for n in (1, 2, 4, 8, 16)] == ["1", "2-4", "2-4", "5-8", ">8"]
    draws = [draw_util(1, f"j{i}", seed=3) for i in range(4000)]
    assert min(draws) == FLOOR and max(draws) <= 1.0
    # Jeon et al.'s one-GPU passed jobs: 28.9 % of GPU-minutes idle, median 55.6 %
    assert sum(d == FLOOR for d in draws) / len(draws) == pytest.approx(0.289, abs=0.03)
    assert statistics.median(draws) == pytest.approx(0.556, abs=0.04)
    # seeded by job id: the same job draws the same, another seed another
    assert draw_util(1, "j7", 3) == draws[7] and draw_util(1, "j7", 4) != draws[7]


def test_a_share_caps_the_draw_and_profile_keeps_jobs_as_they_are():
    jobs = [TraceJob(f"j{i}", 0.0, 1, 60.0, gpu_fraction=0.1) for i in range(50)]
    drawn = apply_workload(jobs, "measured", seed=0)
    assert all(FLOOR <= j.gpu_util <= 0.1 for j in drawn)
    assert apply_workload(jobs, "profile", seed=0) == jobs
    with pytest.raises(ValueError, match="unknown workload model"):
        apply_workload(jobs, "guess", seed=0)


def test_simulate_report_names_the_workload_model(tmp_path, capsys):
    for model in ("measured", "profile"):
        out = tmp_path / model
        assert cli.main(["--trace", "philly", "--cluster", "2x8", "--jobs", "40",
                         "--policy", "fifo,fgs", "--workload", model, "--no-plots",
                         "--out", str(out)]) == 0
        doc = json.loads((out / "report.json").read_text())
        assert doc["workload"] == model
        assert any(n.startswith(f"workload {model}") for n in doc["notes"])
    assert doc["profile"].endswith("model_profiles.yaml")
