"""Every policy, on random valid cluster states: valid, deterministic, order-free actions."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tfgshare.policies.base import (ClusterSnapshot, Fragment, GPU, JobState, JobView,
                                    SampleRecord, Start)
from tfgshare.policies.freemap import FreeMap
from tfgshare.policies.validate import validate
from tfgshare.policies.registry import POLICY_NAMES, get_policy

STATES = [JobState.QUEUED, JobState.SAMPLED, JobState.SUSPENDED, JobState.RUNNING,
          JobState.RUNNING, JobState.SAMPLING, JobState.SUSPENDING]
CAPS = {"fifo": 1, "sjf": 1, "tiresias": 1, "tiresias-promote": 1, "gandiva": 4, "fgs": 4}


@st.composite
def worlds(draw):
    nodes = draw(st.integers(1, 3))
    gpus = []
    for n in range(nodes):
        mem = draw(st.sampled_from([12000, 16000, 24000]))
        for i in range(draw(st.integers(1, 4))):
            gpus.append(GPU(f"n{n}:{i}", f"n{n}", i, mem))
    down = frozenset(draw(st.sets(st.sampled_from([f"n{n}" for n in range(nodes)]),
                                  max_size=1)))
    cluster = ClusterSnapshot(tuple(gpus), 300.0, down)
    now = 50_000.0
    free = FreeMap(cluster, max_tenants=4)
    jobs = []
    for k in range(draw(st.integers(0, 14))):
        state = draw(st.sampled_from(STATES))
        ngpu = draw(st.sampled_from([1, 1, 1, 2, 3]))
        sample = None
        if draw(st.booleans()) or state in (JobState.RUNNING, JobState.SAMPLED):
            sample = SampleRecord(draw(st.floats(0.01, 2.0)), draw(st.floats(200, 20000)),
                                  draw(st.floats(0.05, 1.0)))
        frags = ()
        if state.holds_gpu:
            frac = draw(st.floats(0.05, 0.9))
            placed = free.gang_place(ngpu, frac)
            if placed is None:
                state = JobState.SUSPENDED
            else:
                free.take(placed)
                frags = tuple(Fragment(g, f) for g, f in placed)
        submit = draw(st.floats(0, now - 1))
        jobs.append(JobView(
            id=f"j{k}", submit_time=submit, num_gpus=ngpu, state=state,
            total_steps=draw(st.integers(10, 10 ** 6)), sample=sample,
            requested_fraction=draw(st.none() | st.floats(0.05, 1.0)),
            fragments=frags, attained_service_s=draw(st.floats(0, 20_000)),
            last_start=draw(st.none() | st.floats(submit, now)),
            last_wait_start=draw(st.none() | st.floats(submit, now)),
            predicted_remaining_s=draw(st.none() | st.floats(1, 1e6))))
    return now, cluster, jobs


VARIANTS = [(name, {}) for name in POLICY_NAMES] + [
    (f"{order}/{rule}", {}) for order in ("fifo", "sjf")
    for rule in ("fgd", "best-fit", "packing", "clustering", "random-fit")] + [
    ("fgs", {"min_run_s": 0.0, "max_reservations": 3}),       # moves happen more often
    ("fgs", {"frag_measure": True}),                           # FGD's measure picks places
    ("tiresias", {"min_run_s": 0.0, "thresholds": (100.0, 5000.0)}),
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world=worlds(), variant=st.sampled_from(VARIANTS))
def test_every_action_is_valid_and_decisions_are_deterministic(world, variant):
    now, cluster, jobs = world
    name, params = variant
    pol = get_policy(name, **params)
    acts = pol.decide(now, cluster, jobs)
    assert validate(acts, cluster, jobs, max_tenants=CAPS.get(name)) == []
    assert pol.decide(now, cluster, list(reversed(jobs))) == acts
    for a in acts:   # exclusive policies hand out whole GPUs only
        if CAPS.get(name) == 1 and isinstance(a, Start):
            assert all(f.fraction > 0.97 for f in a.fragments)
