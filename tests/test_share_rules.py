"""GPU-sharing placement rules (FGD and its baselines), the fill experiment, and the
fifo/sjf orders that run them in the simulator."""

from __future__ import annotations

import os
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from philly import TraceJob
from tfgshare.policies.registry import get_policy
from tfgshare.policies.share_rules import (MILLI, RULE_NAMES, Ask, Fragmentation, NodeRoom,
                                           Workload, feasible, make_rule, take)
from tfgshare.sim.alibaba import Node, Pod
from tfgshare.sim.cluster import load_cluster
from tfgshare.sim.engine import simulate
from tfgshare.sim.fill import ask_of, fill
from tfgshare.sim.profiles import load_profiles

EXAMPLES = 30 if os.environ.get("CI") else 150


def room(name, gpus, cpu=64_000, memory=256_000, kind="V100"):
    return NodeRoom(name, kind, cpu, memory, list(gpus), cpu, memory)


asks = st.builds(Ask, cpu=st.integers(0, 40_000), memory=st.integers(0, 100_000),
                 num_gpu=st.sampled_from([0, 1, 1, 1, 2, 4]),
                 milli=st.sampled_from([1000, 500, 250, 810, 100]))


@settings(max_examples=EXAMPLES, deadline=None, derandomize=bool(os.environ.get("CI")))
@given(st.sampled_from(RULE_NAMES), st.lists(asks, min_size=1, max_size=40),
       st.integers(0, 2**16))
def test_no_rule_overcommits_a_gpu_cpu_or_memory(rule_name, tasks, seed):
    tasks = [Ask(a.cpu, a.memory, a.num_gpu, a.milli if a.num_gpu == 1 else
                 (MILLI if a.num_gpu else 0)) for a in tasks]
    nodes = [room("a", [MILLI] * 4), room("b", [MILLI] * 8, cpu=96_000),
             room("c", [MILLI] * 2, memory=50_000)]
    rng = random.Random(seed)
    rule = make_rule(rule_name, rng, Workload.of(tasks))
    for ask in tasks:
        pick = rule.choose(nodes, ask, rng)
        if pick is None:
            assert not any(feasible(n, ask) for n in nodes)
            continue
        node = nodes[pick[0]]
        assert feasible(node, ask) and len(set(pick[1])) == ask.num_gpu
        assert all(node.gpus[i] >= ask.milli for i in pick[1])
        take(node, ask, pick[1])
        assert node.cpu >= 0 and node.memory >= 0 and min(node.gpus) >= 0


def test_fgd_fills_the_gpu_a_whole_gpu_task_could_not_use():
    # half-GPU and whole-GPU tasks are the workload; a half task goes to the half-used
    # GPU (nothing left unusable) rather than splitting the free one
    work = Workload.of([Ask(0, 0, 1, 500)] * 5 + [Ask(0, 0, 1, MILLI)] * 5)
    frag = Fragmentation(work)
    assert frag.of("V100", 64_000, [MILLI, 500]) == pytest.approx(0.5 * 500)
    rule = make_rule("fgd", random.Random(0), work)
    assert rule.choose([room("a", [MILLI, 500])], Ask(0, 0, 1, 500), random.Random(0)) \
        == (0, (1,))
    # across nodes: the node where the share fits snugly, not an idle one
    nodes = [room("idle", [MILLI, MILLI]), room("half", [500, MILLI])]
    assert rule.choose(nodes, Ask(0, 0, 1, 500), random.Random(0)) == (1, (0,))


def test_baselines_prefer_what_their_authors_describe():
    rng = random.Random(0)
    nodes = [room("idle", [MILLI] * 8), room("shared", [300, MILLI] + [MILLI] * 6)]
    share = Ask(1000, 0, 1, 250)
    assert make_rule("best-fit", rng).choose(nodes, share, rng) == (1, (0,))
    assert make_rule("packing", rng).choose(nodes, share, rng) == (1, (0,))
    nodes[1].tasks["share"] += 1
    assert make_rule("clustering", rng).choose(nodes, share, rng)[0] == 1
    picks = {make_rule("random-fit", rng).choose(nodes, share, rng)[0] for _ in range(40)}
    assert picks == {0, 1}


def test_target_workload_keeps_the_commonest_types():
    asks = [Ask(0, 0, 1, 500)] * 60 + [Ask(0, 0, 1, MILLI)] * 36 + [Ask(0, 0, 8, MILLI)] * 4
    work = Workload.of(asks)
    assert [t.milli for t, _ in work.types] == [500, MILLI]
    assert sum(p for _, p in work.types) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="at least one task"):
        Workload.of([])


def pod(name, num_gpu, milli, cpu=4000):
    return Pod(name, cpu, 8000, num_gpu, milli, (), "LS", "Running", 0.0, 100.0, 0.0)


def test_fill_counts_arrivals_allocation_and_failures():
    nodes = [Node("n0", 32_000, 131_072, 2, "T4"), Node("n1", 32_000, 131_072, 2, "T4")]
    seq = [pod(f"p{i}", 1, 600) for i in range(4)] + [pod("big", 2, MILLI), pod("c", 0, 0)]
    work = Workload.of(ask_of(p) for p in seq)
    for rule in RULE_NAMES:
        points = fill(nodes, seq, rule, workload=work, seed=1)
        last = points[-1]
        assert len(points) == len(seq) and last.arrived == 6
        assert last.arrived_milli == 4 * 600 + 2 * MILLI
        # four 600-milli shares need all four GPUs: the 2-GPU task can never fit
        assert last.allocated_milli == 2400 and last.failed == 1 and last.used_gpus == 4


def test_fifo_with_a_sharing_placement_packs_requested_shares():
    # three quarter-GPU jobs on one GPU (a fourth would pass its context reserves):
    # shared they all start at once; fifo's whole GPUs run them one after another
    jobs = [TraceJob(f"q{i}", 0.0, 1, 600.0, model="lenet", batch_size=32, total_steps=2000,
                     gpu_fraction=0.25, gpu_util=0.2) for i in range(3)]
    cluster = load_cluster("1x1:16384")
    profiles = load_profiles()
    shared = simulate(cluster, jobs, profiles, get_policy("fifo/fgd"))
    alone = simulate(cluster, jobs, profiles, get_policy("fifo"))
    starts = [r.first_start for r in shared.records]
    assert max(starts) - min(starts) < 1.0
    starts = sorted(r.first_start for r in alone.records)
    assert starts[-1] - starts[0] > 10.0
    assert shared.report.jct_mean < alone.report.jct_mean
    with pytest.raises(ValueError, match="unknown placement"):
        get_policy("fifo/tetris")


def test_a_job_wider_than_a_node_spans_idle_gpus_instead_of_blocking_fifo():
    jobs = [TraceJob("wide", 0.0, 16, 600.0, model="lenet", batch_size=32, total_steps=500),
            TraceJob("small", 1.0, 1, 60.0, model="lenet", batch_size=32, total_steps=100,
                     gpu_fraction=0.5)]
    result = simulate(load_cluster("2x8"), jobs, load_profiles(), get_policy("fifo/fgd"))
    assert all(r.finish_time is not None for r in result.records)
    wide = next(r for r in result.records if r.id == "wide")
    small = next(r for r in result.records if r.id == "small")
    assert small.first_start > wide.first_start      # fifo: the wide job first, then it


def test_ties_go_to_the_first_node_of_the_seeded_order_except_for_random_fit():
    nodes = [room(n, [MILLI] * 4) for n in "abcd"]
    share, rng = Ask(0, 0, 1, 500), random.Random(0)
    for name in ("best-fit", "dot-product", "packing", "fgd"):
        rule = make_rule(name, rng, Workload.of([share]))
        assert rule.choose(nodes, share, rng, rank=[3, 1, 0, 2])[0] == 2
    rule = make_rule("random-fit", rng)
    assert {rule.choose(nodes, share, rng, rank=[3, 1, 0, 2])[0] for _ in range(60)} \
        == {0, 1, 2, 3}


def test_a_share_placement_honours_the_gpu_types_a_job_asks_for():
    from tfgshare.policies.base import GPU, ClusterSnapshot, JobState, JobView
    cluster = ClusterSnapshot((GPU("t:0", "t", 0, 16384, "T4"),
                               GPU("v:0", "v", 0, 32768, "V100M32")), reserve_mb=0.0)
    for types, gpu in ((("V100M32",), "v:0"), (("T4", "P100"), "t:0")):
        job = JobView("j", 0.0, 1, JobState.QUEUED, requested_fraction=0.5, gpu_types=types)
        for rule in RULE_NAMES:
            [start] = get_policy(f"fifo/{rule}").decide(0.0, cluster, [job])
            assert [f.gpu for f in start.fragments] == [gpu]
    job = JobView("j", 0.0, 1, JobState.QUEUED, requested_fraction=0.5, gpu_types=("A100",))
    assert get_policy("fifo/fgd").decide(0.0, cluster, [job]) == []
