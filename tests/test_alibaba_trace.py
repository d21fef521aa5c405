"""Alibaba's GPU-sharing trace: the shipped files and small files in the same format."""

from __future__ import annotations

import gzip
from collections import Counter

import pytest

from philly import LoadReport, TraceFormatError
from tfgshare.sim.alibaba import (cluster_from_nodes, is_pod_list, load_nodes, load_pods,
                                  trace_jobs)
from tfgshare.sim.cluster import load_cluster
from tfgshare.sim.profiles import load_profiles
from tfgshare.sim.workload import load_workload

POD_HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
              "creation_time,deletion_time,scheduled_time\n")
NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"


def write(path, header, rows, gz=False):
    text = header + "".join(r + "\n" for r in rows)
    if gz:
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


def test_shipped_pod_list_counts():
    report = LoadReport()
    pods = load_pods(report=report)
    assert len(pods) == 8152 and report.corrupt == 0
    counts = Counter(p.num_gpu for p in pods)
    assert counts == {1: 6989, 0: 1088, 8: 44, 2: 16, 4: 15}
    single = [p for p in pods if p.num_gpu == 1]
    shares = sum(p.gpu_milli < 1000 for p in single)
    assert round(100 * shares / len(single)) == 44     # the README's 44 % of one-GPU tasks


def test_shipped_nodes_make_the_trace_cluster():
    nodes = load_nodes()
    assert len(nodes) == 1213 and sum(n.gpus for n in nodes) == 6212
    cluster = load_cluster("alibaba-2023")
    assert cluster.num_gpus == 6212 and cluster.reserve_mb == 0
    kinds = Counter(g.kind for g in cluster.gpus)
    assert kinds["G2"] == 4392 and kinds["V100M32"] == 204 and kinds["A10"] == 2
    v100 = next(g for g in cluster.gpus if g.kind == "V100M32")
    assert v100.memory_mb == 32768


def test_pods_become_jobs_with_every_choice_counted(tmp_path):
    path = write(tmp_path / "pods.csv.gz", POD_HEADER, [
        "p0,4000,8000,1,500,,LS,Running,100,1000,100",          # a half GPU, censored
        "p1,0,100,0,0,,BE,Succeeded,150,300,150",               # CPU only
        "p2,4000,8000,1,1000,V100M16|V100M32,LS,Failed,200,260,210",
        "p3,88000,327680,8,1000,,Burstable,Pending,300,1000,",  # never scheduled
        "p4,8000,16000,2,1000,,LS,Succeeded,400,900,450",
    ], gz=True)
    assert is_pod_list(path)
    report = LoadReport()
    jobs = trace_jobs(load_pods(path, report=report), report)
    assert [j.id for j in jobs] == ["p0", "p2", "p4"]
    assert [j.submit_time for j in jobs] == [0.0, 100.0, 300.0]      # re-based
    assert [j.duration for j in jobs] == [900.0, 50.0, 450.0]
    assert jobs[0].gpu_fraction == 0.5 and jobs[1].gpu_fraction is None
    assert jobs[1].gpu_types == ("V100M16", "V100M32")
    assert jobs[2].num_gpus == 2
    assert report.skipped == {"CPU-only pod (num_gpu 0)": 1,
                              "never scheduled (Pending at the trace's end: no run time)": 1}
    assert any("1 pod(s) still Running at the trace's end" in n for n in report.notes)


def test_corrupt_lines_are_named_skipped_and_bounded(tmp_path):
    good = [f"p{i},1000,1000,1,1000,,LS,Succeeded,{i},{i + 60},{i}" for i in range(20)]
    bad = ["px,1000,1000,1,1500,,LS,Succeeded,0,60,0",     # more than a GPU
           "py,1000,1000,2,500,,LS,Succeeded,0,60,0",      # a share of a 2-GPU pod
           "pz,1000,1000,1,500,,LS"]                        # cut short
    path = write(tmp_path / "pods.csv", POD_HEADER, good + bad)
    report = LoadReport()
    pods = load_pods(path, report=report)
    assert len(pods) == 20 and report.corrupt == 3
    assert any("gpu_milli 1500" in p for p in report.problems)
    assert any("only one-GPU pods" in p for p in report.problems)
    with pytest.raises(TraceFormatError, match="line 22: gpu_milli 1500"):
        load_pods(path, strict=True)
    worse = write(tmp_path / "worse.csv", POD_HEADER, good[:5] + bad * 3)
    with pytest.raises(TraceFormatError, match="9 of 14 lines are corrupt"):
        load_pods(worse)
    with pytest.raises(TraceFormatError, match="lacks"):
        load_pods(write(tmp_path / "other.csv", "a,b,c\n", ["1,2,3"]))
    with pytest.raises(FileNotFoundError, match="not found"):
        load_pods(tmp_path / "absent.csv")


def test_node_list_of_another_cluster(tmp_path):
    path = write(tmp_path / "nodes.csv", NODE_HEADER, [
        "a,64000,262144,2,P100", "b,96000,786432,8,V100M32", "c,32000,262144,0,",
        "d,1000,1000,4,"])                                    # GPUs of no model: corrupt
    report = LoadReport()
    nodes = load_nodes(path, report=report)
    assert [n.sn for n in nodes] == ["a", "b", "c"] and report.corrupt == 1
    cluster = cluster_from_nodes(nodes)
    assert cluster.num_gpus == 10
    assert load_cluster(str(path)).num_gpus == 10


def test_workload_from_a_pod_file_replays_shares(tmp_path):
    path = write(tmp_path / "pods.csv", POD_HEADER, [
        f"p{i},1000,1000,1,{250 if i % 2 else 1000},,LS,Succeeded,{60 * i},{60 * i + 600},"
        f"{60 * i}" for i in range(10)])
    cluster = load_cluster("2x2:16384")
    work = load_workload(str(path), load_profiles(), cluster.num_gpus, seed=1)
    assert len(work.jobs) == 10
    assert [j.gpu_fraction for j in work.jobs[:2]] == [None, 0.25]
    assert all(j.model and j.total_steps >= 1 for j in work.jobs)


def test_simulate_alibaba_on_its_own_cluster_says_nothing_waited(tmp_path, capsys):
    import json

    from tfgshare.sim import cli
    assert cli.main(["--trace", "alibaba-2023", "--jobs", "60", "--policy", "fifo",
                     "--placement", "fgd", "--no-plots", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "note: no job waited on alibaba-2023 (6212 GPUs)" in out
    doc = json.loads((tmp_path / "report.json").read_text())
    assert doc["cluster"] == "alibaba-2023" and doc["jobs"] == 60
    assert set(doc["policies"]) == {"fifo/fgd"}
    assert doc["dropped"]["CPU-only pod (num_gpu 0) (trace)"] >= 1
