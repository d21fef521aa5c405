"""The worked example of docs/policies.md runs in the simulator and keeps its promises."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from philly.jobs import TraceJob
from tfgshare.policies.base import Policy
from tfgshare.policies.registry import get_policy
from tfgshare.sim.cluster import load_cluster
from tfgshare.sim.config import SimConfig
from tfgshare.sim.engine import simulate
from tfgshare.sim.profiles import load_profiles

EXAMPLE = Path(__file__).resolve().parent.parent / "docs" / "example_policy.py"

# One model: 1 s a step alone, 10 s start-up, 1,000 MB (a 24 GiB GPU holds two at 0.45).
TOY = """
models:
  toy:
    params: 1000000
    startup_s: 10
    batches:
      1: {step_time_s: 1.0, memory_mb: 1000, gpu_util: 0.5}
"""


def load_example():
    """docs/example_policy.py as a module, loaded by its path as docs/policies.md says."""
    spec = importlib.util.spec_from_file_location("example_policy", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module     # dataclasses look their module up while defined
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def toy(tmp_path):
    path = tmp_path / "toy.yaml"
    path.write_text(TOY)
    return load_profiles(path)


def job(id, submit, steps, gpus=1):
    return TraceJob(id, submit, gpus, float(steps), model="toy", batch_size=1,
                    total_steps=steps)


def test_every_job_finishes_fewest_steps_first_and_two_to_a_gpu(toy):
    policy = load_example().FewestSteps()
    # six jobs on one GPU, all waiting by t=1; steps chosen so no two tie
    steps = {"a": 60, "b": 10, "c": 50, "d": 20, "e": 40, "f": 30}
    jobs = [job(jid, 0.0 if jid == "a" else 1.0, n) for jid, n in steps.items()]
    res = simulate(load_cluster("1x1"), jobs, toy, policy, SimConfig(check=True, seed=1))
    recs = {r.id: r for r in res.records}

    assert sorted(recs) == sorted(steps)
    assert all(r.finish_time is not None for r in recs.values()), "a job did not finish"
    assert all(r.suspends == 0 and r.migrations == 0 for r in recs.values())
    # "a" came alone and started at once; the other five started fewest steps first
    later = sorted((j for j in recs if j != "a"), key=lambda j: recs[j].first_start)
    assert recs["a"].first_start == 0.0
    assert later == sorted(later, key=steps.get)
    # never more than two jobs on the GPU: no moment inside three [start, finish) spans
    spans = [(r.first_start, r.finish_time) for r in recs.values()]
    for t, _ in spans:
        assert sum(s <= t < e for s, e in spans) <= 2
    # two at a time did share the GPU, each with a 0.45 fragment
    assert any(sum(s <= t < e for s, e in spans) == 2 for t, _ in spans)
    assert res.report.util_allocated <= 1.0


class FreshMemo(Policy):
    """The example without ``new_memo``: every round then decides from a fresh memo."""

    name = "fewest-steps (fresh memo)"
    tick_s = None

    def __init__(self, policy):
        self.policy = policy

    def decide(self, now, cluster, jobs):
        return self.policy.decide(now, cluster, jobs)


def test_a_gang_is_placed_and_a_fresh_memo_decides_as_the_kept_one(toy):
    policy = load_example().FewestSteps(share=0.3)
    jobs = [job("wide", 0.0, 30, gpus=2), job("small", 0.0, 10), job("late", 5.0, 5),
            job("long", 6.0, 80), job("mid", 7.0, 25, gpus=2)]
    kept = simulate(load_cluster("1x2"), jobs, toy, policy, SimConfig(check=True, seed=1))
    recs = {r.id: r for r in kept.records}
    assert all(r.finish_time is not None for r in recs.values())
    assert recs["wide"].num_gpus == 2
    # the memo is a cache only: the same decisions with a fresh one each round
    fresh = simulate(load_cluster("1x2"), jobs, toy, FreshMemo(policy),
                     SimConfig(check=True, seed=1))
    assert [(r.id, r.first_start, r.finish_time) for r in fresh.records] == \
        [(r.id, r.first_start, r.finish_time) for r in kept.records]


def test_fewest_steps_first_beats_fifo_on_mean_jct_here(toy):
    # what a researcher checks next: the new policy beside a baseline on the same jobs
    steps = [200, 10, 10, 10, 10]
    jobs = [job(f"j{i}", float(i), n) for i, n in enumerate(steps)]
    ours = simulate(load_cluster("1x1"), jobs, toy, load_example().FewestSteps(),
                    SimConfig(seed=1))
    fifo = simulate(load_cluster("1x1"), jobs, toy, get_policy("fifo"), SimConfig(seed=1))
    assert all(r.finish_time is not None for r in ours.records)
    assert ours.report.jct_mean < fifo.report.jct_mean


def test_docs_policies_md_shows_the_example_as_it_is():
    # the page a researcher reads quotes the file the tests run, whole
    page = (EXAMPLE.parent / "policies.md").read_text()
    assert "```python\n" + EXAMPLE.read_text() + "```\n" in page
