"""The published co-location points (tfgshare/data/colocation_points.yaml) and the tool that
checks the simulator's co-location model against them (tools/check_colocation.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

import check_colocation as cc  # noqa: E402

from tfgshare.sim.colocation import Colocation  # noqa: E402
from tfgshare.sim.profiles import load_profiles  # noqa: E402


def test_every_point_has_a_source_and_values_in_range():
    points, sources = cc.load_points()
    assert len(points) >= 100 and {"lucid", "gavel"} <= set(sources)
    assert len({p["id"] for p in points}) == len(points)
    for p in points:
        assert p["source"] in sources and sources[p["source"]].strip() and p["where"]
        assert len(p["jobs"]) == len(p["slowdown"]) >= 2
        assert all(0.3 < s < 5 for s in p["slowdown"]), p["id"]
        for job in p["jobs"]:
            util, assumed = cc.job_util(job)
            assert 0 < util <= 1 and job["batch_size"] > 0
            assert assumed == (job.get("util_alone") is None)
        if "speed" in p:        # normalised speed together: slowdown is its inverse
            assert p["slowdown"] == pytest.approx([1 / s for s in p["speed"]], rel=1e-3)
        if "throughput_alone" in p:
            assert p["slowdown"] == pytest.approx(
                [a / t for a, t in zip(p["throughput_alone"], p["throughput_together"])],
                rel=1e-3)


def test_job_without_any_utilisation_is_refused():
    with pytest.raises(ValueError, match="neither util_alone nor util_assumed"):
        cc.job_util({"model": "x", "util_alone": None})


@pytest.mark.parametrize("model", [Colocation(), Colocation(0.3, 0.5), Colocation(0.0, 0.0)])
def test_errors_follow_the_model(model):
    points, _ = cc.load_points()
    rows = cc.evaluate(points, model)
    assert len(rows) == sum(len(p["jobs"]) for p in points)
    by_id = {p["id"]: p for p in points}
    for r in rows:
        p = by_id[r["id"]]
        total = sum(cc.job_util(j)[0] for j in p["jobs"])
        expected = model.slowdown(len(p["jobs"]), total)
        assert r["predicted"] == pytest.approx(expected)
        assert r["rel_error"] == pytest.approx((expected - r["published"]) / r["published"])
    s = cc.summarize(rows)
    assert s["n"] == len(rows)
    assert s["mean_abs"] == pytest.approx(sum(abs(r["rel_error"]) for r in rows) / len(rows))
    assert s["mean_signed"] == pytest.approx(sum(r["rel_error"] for r in rows) / len(rows))
    assert s["max_abs"] == max(abs(r["rel_error"]) for r in rows)


def test_parameter_sets_are_the_defaults_and_the_measured_fit(capsys):
    sets = cc.model_params()
    assert sets["default"] == Colocation()
    fit = load_profiles(cc.default_profile_path()).colocation
    assert sets["cpu-virtual-gpu fit"] == Colocation(fit["overhead"], fit["exponent"])
    assert cc.main(["--summary"]) == 0
    out = capsys.readouterr().out
    assert "== default" in out and "== cpu-virtual-gpu fit" in out and "mean |error|" in out
