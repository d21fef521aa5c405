"""fgs's choice by FGD's fragmentation measure (``Fgs.frag_measure``): the measure, the
chooser on a FreeMap, the policy with it, and fgs's placement in FGD's fill experiment."""

from __future__ import annotations

from collections import Counter

import pytest

from tfgshare.policies.base import (GPU, ClusterSnapshot, Fragment, JobState, JobView,
                                    SampleRecord)
from tfgshare.policies.frag_choice import (LeastFragmenting, node_fragmentation, request_of,
                                           target_types)
from tfgshare.policies.freemap import FreeMap
from tfgshare.policies.registry import get_policy
from tfgshare.policies.share_rules import MILLI, Workload
from tfgshare.policies.validate import validate
from tfgshare.sim.alibaba import Node, Pod
from tfgshare.sim.fill import ask_of, fill


def snapshot(nodes: dict[str, int], memory_mb: float = 1000.0) -> ClusterSnapshot:
    return ClusterSnapshot(tuple(GPU(f"{n}:{i}", n, i, memory_mb)
                                 for n, k in nodes.items() for i in range(k)), reserve_mb=0.0)


def test_the_measure_counts_the_room_a_task_type_could_not_use():
    halves = ((1, 0.5, 1.0),)
    assert node_fragmentation([0.2, 1.0], halves) == pytest.approx(0.2)
    assert node_fragmentation([0.6, 0.6], halves) == pytest.approx(0.0)
    # a 2-GPU task of whole GPUs cannot run on a node with one idle GPU: all of it is lost
    assert node_fragmentation([1.0, 0.4], ((2, 1.0, 1.0),)) == pytest.approx(1.4)


def test_target_types_keep_the_commonest_requests_rounded_up_to_a_step():
    asked = Counter({request_of(1, 0.48): 60, request_of(1, 1.0): 36, request_of(8, 1.0): 4})
    types = target_types(asked)
    assert [(k, f) for k, f, _ in types] == [(1, 0.5), (1, 1.0)]
    assert sum(p for *_, p in types) == pytest.approx(1.0)
    assert target_types(Counter()) == ()


def test_the_chooser_keeps_room_the_workload_can_use_where_the_tightest_fit_would_not():
    cluster = snapshot({"a": 2})
    held = [JobView("h", 0.0, 1, JobState.RUNNING, fragments=(Fragment("a:0", 0.4),))]
    tight = FreeMap(cluster, held)
    # 0.6 free on a:0 and 1.0 on a:1; a 0.4 task: the tightest fit leaves 0.2 on a:0,
    # which no half-GPU task can use; the measure puts it on a:1 (0.6 left on each)
    assert tight.gang_place(1, 0.4)[0][0] == "a:0"
    fm = FreeMap(cluster, held)
    fm.chooser = LeastFragmenting(((1, 0.5, 1.0),))
    assert fm.gang_place(1, 0.4) == [("a:1", 0.4)]
    # with no workload learnt yet it is the tightest fit
    fm.chooser = LeastFragmenting(())
    assert fm.gang_place(1, 0.4)[0][0] == "a:0"


def test_a_gang_goes_to_the_node_it_fragments_least_and_spans_nodes_when_none_holds_it():
    cluster = snapshot({"a": 4, "b": 2})
    fm = FreeMap(cluster)
    fm.chooser = LeastFragmenting(((2, 1.0, 0.5), (4, 1.0, 0.5)))
    got = fm.gang_place(2, 1.0)
    assert {g.partition(":")[0] for g, _ in got} == {"b"}   # keeps a's four for a 4-GPU task
    assert len(fm.gang_place(6, 1.0)) == 6


def sampled(jid: str, mb: float, submit: float) -> JobView:
    return JobView(jid, submit, 1, JobState.QUEUED, total_steps=1000,
                   sample=SampleRecord(step_time_s=0.1, peak_memory_mb=mb, gpu_util=0.3),
                   predicted_remaining_s=100.0 + submit)


def test_fgs_with_the_measure_places_validly_and_as_the_measure_says():
    cluster = snapshot({"a": 2}, memory_mb=16_000.0)
    jobs = [sampled(f"j{i}", mb, float(i)) for i, mb in enumerate([5000, 5000, 2000])]
    plain = get_policy("fgs").decide(100.0, cluster, jobs)
    measured = get_policy("fgs", frag_measure=True).decide(100.0, cluster, jobs)
    for acts in (plain, measured):
        assert validate(acts, cluster, jobs, max_tenants=4) == []
        assert len(acts) == 3
    assert get_policy("fgs", frag_measure=True).decide(100.0, cluster, list(reversed(jobs))) \
        == measured


def pod(name, num_gpu, milli, cpu=4000):
    return Pod(name, cpu, 8000, num_gpu, milli, (), "LS", "Running", 0.0, 100.0, 0.0)


def test_fgs_in_the_fill_experiment_never_overcommits_and_beats_its_tightest_fit_here():
    nodes = [Node("n0", 32_000, 131_072, 2, "T4")]
    # 0.3, 0.5, 0.5, 0.7 fill two GPUs exactly; the tightest fit puts the first 0.5
    # beside the 0.3 (0.2 left, too small for any task), so the 0.7 finds no room; the
    # measure puts it on the idle GPU, keeping 0.7 free beside the 0.3
    seq = [pod("a", 1, 300), pod("b", 1, 500), pod("c", 1, 500), pod("d", 1, 700)]
    work = Workload.of(ask_of(p) for p in seq)
    tight = fill(nodes, seq, "fgs", workload=work)[-1]
    measured = fill(nodes, seq, "fgs-frag", workload=work)[-1]
    assert measured.allocated_milli == 2 * MILLI and measured.failed == 0
    assert tight.failed == 1 and tight.allocated_milli == 2 * MILLI - 700
