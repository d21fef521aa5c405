"""FIFO on exclusive GPUs: arrival order, whole GPUs, head-of-line blocking."""

import pytest

from tfgshare.policies.base import Start
from tfgshare.policies.builders import make_cluster, make_job
from tfgshare.policies.validate import validate
from tfgshare.policies.registry import POLICY_NAMES, get_policy


def test_registry_errors_name_the_problem():
    with pytest.raises(ValueError, match="unknown policy 'nope'.*fifo"):
        get_policy("nope")
    with pytest.raises(ValueError, match="no parameter.*bogus"):
        get_policy("fifo", bogus=1)
    assert "fifo" in POLICY_NAMES and get_policy("fifo").name == "fifo"


def test_fifo_starts_in_arrival_order_on_whole_gpus():
    c = make_cluster(1, 2)
    jobs = [make_job("late", submit=5), make_job("early", submit=1), make_job("mid", submit=3)]
    acts = get_policy("fifo").decide(10, c, jobs)
    assert [a.job for a in acts] == ["early", "mid"]
    assert all(isinstance(a, Start) and len(a.fragments) == 1 for a in acts)
    assert all(a.fragments[0].fraction == pytest.approx(1 - 300 / 16000) for a in acts)
    assert len({a.fragments[0].gpu for a in acts}) == 2
    assert validate(acts, c, jobs, max_tenants=1) == []


def test_fifo_head_of_line_blocking():
    c = make_cluster(1, 4)
    jobs = [make_job("run", submit=0, on={"n0:0": 0.98}),
            make_job("big", submit=1, gpus=4), make_job("small", submit=2)]
    assert get_policy("fifo").decide(10, c, jobs) == []


def test_fifo_never_shares_a_gpu_and_skips_impossible_jobs():
    c = make_cluster(1, 2)
    jobs = [make_job("tiny", submit=0, on={"n0:0": 0.1}),
            make_job("huge", submit=1, gpus=3), make_job("next", submit=2),
            make_job("last", submit=3)]
    acts = get_policy("fifo").decide(10, c, jobs)
    assert [(a.job, a.fragments[0].gpu) for a in acts] == [("next", "n0:1")]


def test_fifo_gang_on_one_node():
    c = make_cluster(2, 4)
    jobs = [make_job("x", submit=0, on={"n0:0": 0.98}), make_job("g", submit=1, gpus=4)]
    (a,) = get_policy("fifo").decide(10, c, jobs)
    assert {f.gpu.split(":")[0] for f in a.fragments} == {"n1"}
