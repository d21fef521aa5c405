"""Trace jobs made ready for the simulator: filters, models, jobs too wide to run."""

from __future__ import annotations

import gc

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
    # loading pauses the cyclic garbage collector; a failed load gives it back
    assert gc.isenabled()


def _tiresias_csv(tmp_path):
    # the Tiresias simulator's own names, a TF-Slim name, an unknown name, a blank
    # model, a job with no GPUs, and an interval that disagrees with the arrivals
    path = tmp_path / "tiresias.csv"
    path.write_text("job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
                    "0,1,0,606,vgg19,164,30\n"
                    "1,8,30,133,resnet50,147,23\n"
                    "2,2,53,157,vgg_16,127,26\n"
                    "3,0,79,513,vgg16,121,20\n"
                    "4,1,99,0,nosuchnet,50,5\n"
                    "5,1,150,40,,60,0\n")
    return str(path)


def test_tiresias_csv_models_steps_and_counts(tmp_path):
    prof = load_profiles()
    w = load_workload(_tiresias_csv(tmp_path), prof, cluster_gpus=4, seed=1)
    by_id = {j.id: j for j in w.jobs}
    assert sorted(by_id) == ["0", "2", "4", "5"]             # 8-GPU job 1 too wide, 3 no GPUs
    assert (by_id["0"].model, by_id["0"].batch_size) == ("vgg_16", 32)
    assert (by_id["2"].model, by_id["2"].batch_size) == ("vgg_16", 32)
    assert by_id["0"].total_steps == round(164 / prof.get("vgg_16", 32).step_time_s)
    assert by_id["4"].model in ("inception_v3", "resnet_v1_50", "vgg_16", "alexnet_v2")
    assert w.dropped == {"no GPUs (trace)": 1, "wider than the cluster's 4 GPUs": 1}
    assert w.changed == {"model 'vgg19' mapped to 'vgg_16'": 1,
                         "model 'resnet50' mapped to 'resnet_v1_50'": 1,
                         "model 'nosuchnet' unknown: drawn by philly.mapping": 1}
    notes = " ".join(w.notes)
    assert "interval column not used" in notes and "(1 of 5 rows" in notes
    assert "iterations column not used" in notes


def test_tiresias_csv_steps_from_iterations(tmp_path):
    prof = load_profiles()
    w = load_workload(_tiresias_csv(tmp_path), prof, cluster_gpus=8, steps_from="iterations")
    by_id = {j.id: j for j in w.jobs}
    assert (by_id["0"].total_steps, by_id["1"].total_steps, by_id["5"].total_steps) == (606, 133, 40)
    assert "4" not in by_id and w.dropped["no iterations (--steps-from iterations)"] == 1
    with pytest.raises(ValueError, match="steps_from"):
        load_workload(_tiresias_csv(tmp_path), prof, cluster_gpus=8, steps_from="nope")


@pytest.mark.parametrize("util, memory", [(0.4, None), (None, 2500.0), (0.7, 1200.0),
                                          (None, None)])
def test_a_jobs_own_profile_is_the_profile_replaced_with_its_workload_values(util, memory):
    from dataclasses import replace

    prof = load_profiles().get("resnet_v1_50", 32)
    own = prof.with_workload(util, memory)
    changes = {k: v for k, v in (("gpu_util", util), ("memory_mb", memory)) if v is not None}
    want = replace(prof, **changes)
    assert own == want and vars(own) == vars(want) and hash(own) == hash(want)
    assert own.gpu_util == (prof.gpu_util if util is None else util)
    assert prof.memory_mb != 2500.0 and load_profiles().get("resnet_v1_50", 32) == prof
