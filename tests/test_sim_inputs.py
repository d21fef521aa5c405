"""Simulator inputs: cluster specs and model profiles, and their errors."""

from __future__ import annotations

import pytest

from tfgshare.sim.cluster import load_cluster
from tfgshare.sim.profiles import load_profiles

PAPER_MODELS = ("inception_v3", "resnet_v1_50", "vgg_16", "alexnet_v2")


def test_shorthand_and_yaml_clusters(tmp_path):
    c = load_cluster("3x4:16384")
    assert c.num_gpus == 12 and {g.memory_mb for g in c.gpus} == {16384}
    assert len({g.node for g in c.gpus}) == 3 and c.gpus[5].id == "n1:1"
    spec = tmp_path / "mine.yaml"
    spec.write_text("reserve_mb: 500\nnodes:\n"
                    "  - {count: 2, gpus: 8, memory_mb: 24576, name_prefix: a}\n"
                    "  - {count: 1, gpus: 2, memory_mb: 12288, name_prefix: b, speed: 0.5}\n")
    c = load_cluster(str(spec))
    assert c.num_gpus == 18 and c.reserve_mb == 500
    assert c.speed == {"b0:0": 0.5, "b0:1": 0.5}
    assert load_cluster("small").num_gpus == 16


def test_philly_clusters():
    assert load_cluster("philly").num_gpus == 2490
    assert load_cluster("vc:6214e9").num_gpus == 64 * 8
    assert load_cluster("philly-revised").num_gpus == 3205


@pytest.mark.parametrize("spec, message", [
    ("0x8", "must be positive"),
    ("banana", "bad cluster spec 'banana'"),
    ("vc:nope", "unknown Philly VC 'nope'"),
])
def test_bad_cluster_specs(spec, message):
    with pytest.raises(ValueError, match=message):
        load_cluster(spec)


def test_bad_cluster_yaml(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes:\n  - {count: 2, gpus: -1}\n")
    with pytest.raises(ValueError, match=r"nodes\[0\].gpus"):
        load_cluster(str(bad))
    bad.write_text("nodes:\n  - {count: 2, gpus: 4, colour: red}\n")
    with pytest.raises(ValueError, match="unknown key"):
        load_cluster(str(bad))
    bad.write_text("gpus: 4\n")
    with pytest.raises(ValueError, match="non-empty 'nodes' list"):
        load_cluster(str(bad))


def test_shipped_profiles_cover_the_paper_models():
    p = load_profiles()
    assert set(PAPER_MODELS) <= set(p.models())
    table = p.step_times()
    for m in PAPER_MODELS:
        assert len(table[m]) >= 3 and all(t > 0 for t in table[m].values())
    # checkpoint = float32 weights + one momentum slot each
    assert p.get("vgg_16", 32).checkpoint_mb == pytest.approx(138357544 * 8 / 2**20)
    assert 500 < p.get("vgg_16", 32).checkpoint_mb / 2 < 540       # ~528 MB of weights
    assert 90 < p.get("inception_v3", 32).checkpoint_mb / 2 < 110  # ~100 MB of weights
    # bigger batches take longer and need more memory
    for m in PAPER_MODELS:
        rows = sorted((b, p.get(m, b)) for b in table[m])
        assert all(a[1].step_time_s < b[1].step_time_s and a[1].memory_mb < b[1].memory_mb
                   for a, b in zip(rows, rows[1:]))


def test_bad_profiles(tmp_path):
    p = load_profiles()
    with pytest.raises(KeyError, match="profiled sizes"):
        p.get("vgg_16", 3)
    bad = tmp_path / "p.yaml"
    bad.write_text("models:\n  m:\n    params: 10\n    startup_s: 1\n"
                   "    batches:\n      8: {step_time_s: 0.1, memory_mb: 10, gpu_util: 1.5}\n")
    with pytest.raises(ValueError, match=r"models.m.batches.8.gpu_util"):
        load_profiles(bad)
    bad.write_text("models: [1, 2]\n")
    with pytest.raises(ValueError, match="'models' mapping"):
        load_profiles(bad)
    with pytest.raises(FileNotFoundError, match="not found"):
        load_profiles(tmp_path / "missing.yaml")
