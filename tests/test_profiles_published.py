"""The published model profile, the loader's provenance check, and the Philly utilisation
statistics (tfgshare/data/profiles/published.yaml, tfgshare/data/philly_utilization.yaml)."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pytest
import yaml

from tfgshare.sim.profiles import PROVENANCE_FIELDS, load_profiles

PAPER_MODELS = ("inception_v3", "resnet_v1_50", "vgg_16", "alexnet_v2")
DATA = Path(str(resources.files("tfgshare") / "data"))
PUBLISHED = DATA / "profiles" / "published.yaml"


def test_published_profile_loads_with_the_four_paper_models():
    p = load_profiles(PUBLISHED)
    assert p.provenance == "required" and "P100" in p.reference_gpu
    assert set(PAPER_MODELS) <= set(p.models())
    table = p.step_times()
    for m in PAPER_MODELS:
        sizes = sorted(table[m])
        # a bigger batch takes longer and needs more memory
        assert all(table[m][a] < table[m][b] for a, b in zip(sizes, sizes[1:]))
        assert all(p.get(m, a).memory_mb < p.get(m, b).memory_mb
                   for a, b in zip(sizes, sizes[1:]))


def test_every_published_value_has_a_source_or_an_estimate_reason():
    p = load_profiles(PUBLISHED)
    refs = yaml.safe_load(PUBLISHED.read_text())["references"]
    measured = 0
    for prof in p.by_key.values():
        for name in PROVENANCE_FIELDS:
            assert prof.provenance(name) in ("measured", "estimate"), (prof.model, name)
            assert prof.sources.get(name, "").strip() or prof.estimates.get(name, "").strip()
        for text in prof.sources.values():
            # each source names an entry of the file's references before its colon
            key = text.split(":", 1)[0]
            assert key in refs, (prof.model, prof.batch_size, text)
        if prof.provenance("step_time_s") == "measured":
            measured += 1
            # the quoted figure is the one the step time was computed from
            found = re.search(r"= (\d+(?:\.\d+)?) images/s", prof.sources["step_time_s"])
            assert found, prof.sources["step_time_s"]
            ips = float(found.group(1))
            assert prof.step_time_s == pytest.approx(prof.batch_size / ips, abs=6e-5)
    # the published step times: batch 32 and 64 of three models and alexnet's 512
    assert measured == 7


def test_provenance_required_rejects_a_value_without_source(tmp_path):
    bad = tmp_path / "p.yaml"
    head = "provenance: required\nmodels:\n  m:\n    params: 10\n    startup_s: 1\n    batches:\n"
    bad.write_text(head + "      8:\n        step_time_s: 0.1\n        memory_mb: 10\n"
                   "        gpu_util: 0.5\n        sources: {step_time_s: 'paper, Table 1',"
                   " gpu_util: 'paper, Figure 2'}\n")
    with pytest.raises(ValueError, match=r"models\.m\.batches\.8\.memory_mb: no source"):
        load_profiles(bad)
    # an estimate with its reason is enough
    good = bad.read_text().replace("gpu_util: 'paper, Figure 2'}",
                                   "gpu_util: 'paper, Figure 2'}\n"
                                   "        estimate: {memory_mb: 'scaled from a K80'}")
    bad.write_text(good)
    prof = load_profiles(bad).get("m", 8)
    assert prof.provenance("memory_mb") == "estimate"
    assert prof.provenance("step_time_s") == "measured"
    assert prof.sources["gpu_util"] == "paper, Figure 2"
    # a list of estimated fields needs its reason
    bad.write_text(head + "      8: {step_time_s: 0.1, memory_mb: 10, gpu_util: 0.5,"
                   " estimate: [step_time_s, memory_mb, gpu_util]}\n")
    with pytest.raises(ValueError, match="estimate_reason"):
        load_profiles(bad)
    bad.write_text(head + "      8: {step_time_s: 0.1, memory_mb: 10, gpu_util: 0.5,"
                   " estimate: [step_time_s, memory_mb, gpu_util], estimate_reason: guessed}\n")
    assert load_profiles(bad).get("m", 8).estimates == dict.fromkeys(PROVENANCE_FIELDS, "guessed")
    bad.write_text(head + "      8: {step_time_s: 0.1, memory_mb: 10, gpu_util: 0.5,"
                   " estimate: {speed: guessed}}\n")
    with pytest.raises(ValueError, match="speed not one of"):
        load_profiles(bad)
    bad.write_text("provenance: maybe\n" + head.split("\n", 1)[1]
                   + "      8: {step_time_s: 0.1, memory_mb: 10, gpu_util: 0.5}\n")
    with pytest.raises(ValueError, match="provenance: 'maybe'"):
        load_profiles(bad)


def test_files_without_provenance_still_load_and_measured_files_name_their_command(tmp_path):
    # the estimated profile has no sources, and is not required to
    old = load_profiles()
    assert old.provenance is None
    assert all(p.sources == {} and p.estimates == {} for p in old.by_key.values())
    f = tmp_path / "m.yaml"
    f.write_text("measured_by: tfgshare profile m\ndevice: GPU 0\nprovenance: measured\n"
                 "models:\n  m:\n    params: 10\n    startup_s: 1\n    batches:\n"
                 "      8: {step_time_s: 0.1, memory_mb: 10, gpu_util: 1.0,"
                 " estimate: {gpu_util: not measured}}\n")
    prof = load_profiles(f).get("m", 8)
    assert "tfgshare profile m" in prof.sources["step_time_s"]
    assert "GPU 0" in prof.sources["memory_mb"]
    assert prof.provenance("gpu_util") == "estimate" and "gpu_util" not in prof.sources


def test_philly_utilization_statistics_and_fits():
    data = yaml.safe_load((DATA / "philly_utilization.yaml").read_text())
    assert "Jeon" in data["source"]["paper"] and "philly-traces" in data["source"]["read_from"]
    assert list(data["size_classes"]) == ["1", "2-4", "5-8", ">8"]
    fitted = 0
    groups = [c[s] for c in data["size_classes"].values() for s in ("passed", "killed", "failed")]
    groups += list(data["dedicated_servers"].values())
    for g in groups:
        pub, fit = g["published"], g["fit"]
        cdf = [v for _, v in sorted(pub["cdf_at_util_percent"].items())]
        assert all(0 <= v <= 1 for v in cdf) and cdf == sorted(cdf)
        assert cdf[0] == pub["idle_share"]
        assert 0 <= pub["p25"] <= pub["median"] <= pub["p75"] <= 1 and 0 < pub["mean"] < 1
        if fit["family"] is None:
            assert fit["why"]
            continue
        fitted += 1
        # the atom is the figure's idle share; the fitted mean is the figure's mean
        assert fit["p_zero"] == pub["idle_share"] and fit["a"] > 0 and fit["b"] > 0
        mean = (1 - fit["p_zero"]) * fit["a"] / (fit["a"] + fit["b"])
        assert mean == pytest.approx(pub["mean"], abs=0.01)
        assert 0 <= fit["max_cdf_error"] < 0.1
    assert fitted >= 12
    assert all(c["passed"]["fit"]["family"] for c in data["size_classes"].values())
