"""Properties of the simulator under every policy, over random small traces and clusters.

Each run is in check mode: every action list goes through
``placement.validate`` and after it the simulator checks that no GPU's fractions
(plus context reserves) pass 1 and that each job holds exactly the fragments it
was given, on distinct GPUs (no job runs in two places).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from philly.jobs import TraceJob
from tfgshare.policies.registry import POLICY_NAMES, get_policy
from tfgshare.sim.cluster import load_cluster
from tfgshare.sim.config import SimConfig
from tfgshare.sim.engine import simulate

TICK = 30.0


@st.composite
def scenarios(draw):
    nodes = draw(st.integers(1, 3))
    per_node = draw(st.sampled_from([1, 2, 4]))
    memory = draw(st.sampled_from([8192, 16384]))
    sizes = [g for g in (1, 2, 4) if g <= nodes * per_node]
    jobs = []
    for i in range(draw(st.integers(1, 8))):
        jobs.append(TraceJob(
            f"j{i}", draw(st.floats(0, 1200, allow_nan=False)), draw(st.sampled_from(sizes)),
            0.0, model="toy", batch_size=draw(st.sampled_from([1, 2, 3])),
            total_steps=draw(st.integers(1, 400))))
    return f"{nodes}x{per_node}:{memory}", jobs


class Watch:
    """Wraps a policy; asserts that no job's step count ever goes down."""

    def __init__(self, policy):
        self.policy = policy
        self.name = policy.name
        self.steps: dict[str, int] = {}

    def __getattr__(self, attr):          # sample_steps, tick_s ... of the policy
        return getattr(self.policy, attr)

    def decide(self, now, cluster, jobs, memo=None):
        for j in jobs:
            assert j.steps_done >= self.steps.get(j.id, 0), f"{j.id} lost steps at {now}"
            assert 0 <= j.steps_done <= j.total_steps
            self.steps[j.id] = j.steps_done
        return self.policy.decide(now, cluster, jobs, memo)


def fgs_for_tests():
    return get_policy("fgs", max_wait_s=900.0, promote_floor_s=60.0, min_run_s=60.0)


def make_policy(name):
    return fgs_for_tests() if name == "fgs" else get_policy(name)


@pytest.mark.parametrize("name", POLICY_NAMES)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(scenario=scenarios())
def test_every_policy_keeps_the_rules_and_finishes_every_job(name, scenario, toy_profiles):
    spec, jobs = scenario
    watch = Watch(make_policy(name))
    res = simulate(load_cluster(spec), jobs, toy_profiles, watch,
                   SimConfig(check=True, tick_s=TICK, seed=1))
    assert sorted(r.id for r in res.records) == sorted(j.id for j in jobs)
    for r in res.records:
        assert r.finish_time is not None and r.finish_time >= r.submit_time
        assert 0 <= r.waited_s <= r.finish_time - r.submit_time + 1e-6
    assert 0 <= res.report.util_allocated <= 1 + 1e-9
    assert 0 <= res.report.util_effective <= 1 + 1e-9


@st.composite
def starvation_scenarios(draw):
    """A job as wide as the cluster behind a steady stream of 1-GPU jobs (load below 1):
    shortest-first alone would keep some GPU busy and the wide job waiting."""
    nodes, per_node = draw(st.integers(1, 2)), draw(st.sampled_from([2, 4]))
    gpus = nodes * per_node
    sizes = [(draw(st.sampled_from([1, 2])), draw(st.integers(100, 400))) for _ in range(60)]
    # the arrivals spaced for a drawn offered load: the 1-GPU jobs' steps alone, at
    # TOY_PROFILES' step times (1 s a step at batch 1, 2 s at batch 2), over the GPUs
    work = sum(steps * float(batch) for batch, steps in sizes)
    gap = work / (len(sizes) * gpus * draw(st.floats(0.4, 0.95)))
    jobs = [TraceJob("wide", 10.0, gpus, 0.0, model="toy", batch_size=1, total_steps=200)]
    jobs += [TraceJob(f"s{i}", i * gap, 1, 0.0, model="toy", batch_size=batch,
                      total_steps=steps) for i, (batch, steps) in enumerate(sizes)]
    return f"{nodes}x{per_node}:16384", jobs


def worst_slowdown(pol):
    """The most the simulator slows a tenant that fgs admitted.

    fgs caps each tenant's *predicted* slowdown at ``slowdown_cap`` with its own
    estimate of the cost per co-tenant (``interference_overhead``); the
    simulator's ground truth charges ``Colocation.overhead`` per co-tenant, so
    with ``max_cotenants`` on a GPU a tenant runs up to that ratio slower.
    """
    extra = pol.max_cotenants - 1
    return pol.slowdown_cap * (1 + SimConfig().colocation.overhead * extra) / (
        1 + pol.interference_overhead * extra)


def wait_bound(pol, jobs, toy_profiles):
    """fgs promotes a job after max_wait_s; it then waits at most for room to be made:
    the longest job's run (start-ups, steps at the worst slowdown), min_run_s and two ticks."""
    longest = max(2 * 5 + j.total_steps * toy_profiles.get("toy", j.batch_size).step_time_s
                  * worst_slowdown(pol) for j in jobs)
    return pol.max_wait_s + longest + pol.min_run_s + 2 * TICK


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(scenario=starvation_scenarios())
def test_fgs_bounds_every_wait(scenario, toy_profiles):
    spec, jobs = scenario
    pol = fgs_for_tests()
    res = simulate(load_cluster(spec), jobs, toy_profiles, pol, SimConfig(tick_s=TICK, seed=1))
    bound = wait_bound(pol, jobs, toy_profiles)
    worst = max(res.records, key=lambda r: r.waited_s)
    assert worst.waited_s <= bound, (worst, bound)


def test_the_wait_bound_needs_aging(toy_profiles):
    """The same kind of scenario without aging breaks the bound, so the check can fail."""
    nodes, per_node, gap = 1, 4, 400 / 4
    jobs = [TraceJob("wide", 10.0, 4, 0.0, model="toy", batch_size=1, total_steps=200)]
    jobs += [TraceJob(f"s{i}", i * gap, 1, 0.0, model="toy", batch_size=1 + i % 2,
                      total_steps=100 + (37 * i) % 300) for i in range(60)]
    no_aging = get_policy("fgs", max_wait_s=1e9, max_wait_ratio=1e9, promote_floor_s=60.0,
                          min_run_s=60.0)
    res = simulate(load_cluster(f"{nodes}x{per_node}:16384"), jobs, toy_profiles, no_aging,
                   SimConfig(tick_s=TICK, seed=1))
    waited = {r.id: r.waited_s for r in res.records}
    assert waited["wide"] > wait_bound(fgs_for_tests(), jobs, toy_profiles)
