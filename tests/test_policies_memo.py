"""A policy's memo is a cache: a fresh memo each round gives the same decisions as a reused one."""

import dataclasses

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sortedcontainers import SortedList

from philly.jobs import TraceJob
from tfgshare.policies.base import JobState, JobView, Start
from tfgshare.policies.jobset import JobSet
from tfgshare.policies.registry import POLICY_NAMES, get_policy
from tfgshare.policies.tiresias_memo import RunPrefix, WaitPart
from tfgshare.sim.cluster import load_cluster
from tfgshare.sim.config import SimConfig
from tfgshare.sim.engine import simulate

@st.composite
def scenarios(draw):
    nodes = draw(st.integers(1, 3))
    per_node = draw(st.sampled_from([1, 2, 4]))
    memory = draw(st.sampled_from([8192, 16384]))
    sizes = [g for g in (1, 2, 4) if g <= nodes * per_node]
    jobs = [TraceJob(f"j{i}", draw(st.floats(0, 3000, allow_nan=False)),
                     draw(st.sampled_from(sizes)), 0.0, model="toy",
                     batch_size=draw(st.sampled_from([1, 2, 3])),
                     total_steps=draw(st.integers(1, 600)))
             for i in range(draw(st.integers(1, 14)))]
    return f"{nodes}x{per_node}:{memory}", jobs


class FreshToo:
    """Wraps a policy: every round also decides with a fresh memo and compares."""

    def __init__(self, policy):
        self.policy = policy
        self.name = policy.name
        self.rounds = 0

    def __getattr__(self, attr):          # sample_steps, tick_s, new_memo ... of the policy
        return getattr(self.policy, attr)

    def decide(self, now, cluster, jobs, memo=None):
        fresh = self.policy.decide(now, cluster, jobs, self.policy.new_memo())
        reused = self.policy.decide(now, cluster, jobs, memo)
        assert reused == fresh, f"round {self.rounds} at t={now}: memo changed the decision"
        self.rounds += 1
        return reused


class Twice:
    """Wraps a policy whose memo holds history: every round decides twice on the same memo."""

    def __init__(self, policy):
        self.policy = policy
        self.name = policy.name
        self.rounds = 0

    def __getattr__(self, attr):
        return getattr(self.policy, attr)

    def decide(self, now, cluster, jobs, memo=None):
        first = self.policy.decide(now, cluster, jobs, memo)
        again = self.policy.decide(now, cluster, jobs, memo)
        assert first == again, f"round {self.rounds} at t={now}: a repeated call differs"
        self.rounds += 1
        return first


# tiresias's memo is its queues' order, which depends on history as in its
# authors' code (see policies.tiresias): it records what it observed, never
# what it planned, so a repeated call on the same memo decides the same
HISTORY = ("tiresias", "tiresias-promote")

# fgs with short bounds, so promotions, reservations and moves happen in small runs
VARIANTS = [(name, {}) for name in POLICY_NAMES if name not in HISTORY] + [
    ("fgs", {"max_wait_s": 600.0, "promote_floor_s": 30.0, "min_run_s": 30.0,
             "max_reservations": 2}),
    ("gandiva", {"max_tenants": 2}),
    ("sjf", {"sample_on_admission": False}),
    # sharing placements (not fgd: its memo learns the target workload, see share_order)
    ("fifo/best-fit", {}), ("sjf/packing", {}), ("sjf/clustering", {}), ("fifo/dot-product", {}),
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(scenario=scenarios(), variant=st.sampled_from(VARIANTS))
def test_a_fresh_memo_decides_as_a_reused_one(scenario, variant, toy_profiles):
    spec, jobs = scenario
    name, params = variant
    pol = FreshToo(get_policy(name, **params))
    res = simulate(load_cluster(spec), jobs, toy_profiles, pol, SimConfig(tick_s=30.0, seed=2))
    assert pol.rounds > 0
    assert len(res.records) == len(jobs)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(scenario=scenarios(), name=st.sampled_from(HISTORY))
def test_a_history_memo_records_what_it_saw_not_what_it_planned(scenario, name, toy_profiles):
    spec, jobs = scenario
    pol = Twice(get_policy(name, thresholds=(300.0, 900.0)))
    res = simulate(load_cluster(spec), jobs, toy_profiles, pol, SimConfig(seed=2))
    assert pol.rounds > 0
    assert len(res.records) == len(jobs)


class FullWalk:
    """Wraps tiresias: every round also decides by walking every job, on a memo of its own."""

    def __init__(self, policy):
        self.policy = policy
        self.name = policy.name
        self.full = type("Full", (type(policy),), {"incremental": False})(
            thresholds=policy.thresholds)
        self.full_memo = self.full.new_memo()
        self.rounds = 0

    def __getattr__(self, attr):
        return getattr(self.policy, attr)

    def decide(self, now, cluster, jobs, memo=None):
        got = self.policy.decide(now, cluster, jobs, memo)
        want = self.full.decide(now, cluster, list(jobs), self.full_memo)
        assert got == want, f"round {self.rounds} at t={now}: the incremental walk differs"
        assert memo.wake == self.full_memo.wake, f"round {self.rounds}: next wake-up differs"
        self.rounds += 1
        return got


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(scenario=scenarios(), authors_wake=st.booleans())
def test_tiresias_incremental_walk_decides_as_walking_every_job(scenario, authors_wake,
                                                                toy_profiles):
    spec, jobs = scenario
    pol = FullWalk(get_policy("tiresias", thresholds=(60.0, 300.0, 900.0),
                              authors_wake=authors_wake))
    pol.full.authors_wake = authors_wake
    res = simulate(load_cluster(spec), jobs, toy_profiles, pol, SimConfig(seed=2))
    assert pol.rounds > 0
    assert len(res.records) == len(jobs)


class Tight(RunPrefix):
    __slots__ = ()
    slack = 0   # renumber as soon as as many places are left as there are jobs


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("add new drop fit".split()), st.integers(0, 30),
                          st.integers(-2, 40)), max_size=80))
@example([("add", 0, 0), ("add", 1, 0), ("fit", 0, 5), ("drop", 0, 0), ("fit", 0, 0)])
@example([("add", 0, 0), ("add", 1, 0), ("fit", 0, 5), ("drop", 0, 0), ("drop", 1, 0),
          ("new", 2, 0), ("fit", 0, 5), ("add", 0, 0), ("fit", 0, 2)])   # back after a renumber
def test_a_run_part_prefix_finds_what_walking_it_one_by_one_finds(ops):
    """Tiresias's index of a queue's running jobs: the longest run of them, in walk order,
    that leaves GPUs free is the one a walk job by job finds, through jobs leaving, coming
    back to their place, and joining behind (several at once, in any order)."""
    part, keys, live, key = Tight(), {}, {}, 0.0
    for op, n, free in ops:
        jid = f"j{n % 12}"
        if op == "add" and jid not in live:          # back at its place, or new behind all
            keys.setdefault(jid, key := key + 1.0)
            live[jid] = 1 + n % 8
            part.add(jid, (0, 0, keys[jid], jid), live[jid])
        elif op == "new" and jid not in live:
            keys[jid], live[jid] = (key := key + 1.0), 1 + n % 8
            part.add(jid, (0, 0, keys[jid], jid), live[jid])
        elif op == "drop" and jid in live:
            del live[jid]
            part.drop(jid)
        elif op == "fit":
            walk = sorted((keys[j], j) for j in live)
            gpus = count = 0
            for k, j in walk:
                if gpus + live[j] >= free:
                    break
                gpus, count = gpus + live[j], count + 1
            after = walk[count] if count < len(walk) else None
            got = part.fit(free)
            assert got[:2] == (gpus, count)
            assert (got[2] and (got[2][2], got[2][3])) == (after and tuple(after))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([1, 2, 3, 4, 8, 16]), min_size=1, max_size=40),
       st.integers(1, 40))
def test_a_wait_part_starts_what_walking_it_one_by_one_starts(sizes, free):
    """Tiresias's index of a queue's waiting jobs by GPU count: the jobs it starts, and
    the GPUs it leaves, are those of a walk job by job that starts each job whose GPUs
    are still free, passing the others."""
    views = {f"j{i}": JobView(id=f"j{i}", submit_time=0.0, num_gpus=g, state=JobState.QUEUED)
             for i, g in enumerate(sizes)}
    lists = {}
    for i, g in enumerate(sizes):
        lists.setdefault(g, SortedList()).add((0, 1, float(i), f"j{i}"))
    want, left, last = [], free, None
    for i, g in enumerate(sizes):
        if g <= left:
            want.append(f"j{i}")
            left, last = left - g, i
        if left == 0:
            break
    chosen = []
    got_left, got_last = WaitPart(lists, views).fitting(free, chosen)
    assert [v.id for v in chosen] == want
    assert got_left == left
    assert (got_last[3] if got_last else None) == (f"j{last}" if last is not None else None)


def view(jid, state=JobState.QUEUED, submit=0.0):
    return JobView(id=jid, submit_time=submit, num_gpus=1, state=state)


def test_a_jobset_logs_what_changed_and_keeps_the_first_order():
    js = JobSet([view("a"), view("b")])
    start = js.position
    js.put(view("a", JobState.SUSPENDED))
    js.drop("b")
    js.put(view("c"))
    assert js.changed_since(start) == ["a", "b", "c"]
    assert [v.id for v in js] == ["a", "c"] and js.get("a").state is JobState.SUSPENDED
    assert js.seq("a") < js.seq("c")
    frozen = js.frozen()
    js.trim()
    js.put(view("d"))
    assert js.changed_since(start) is None          # trimmed: a memo this far back starts over
    assert [v.id for v in frozen] == ["a", "c"]     # the copy does not see later changes
    assert frozen.changed_since(start) == ["a", "b", "c"]



@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.tuples(st.sampled_from("abcdefg"), st.booleans(),
                                   st.sampled_from(list(JobState))), max_size=12),
                min_size=1, max_size=8))
def test_a_reused_frozen_copy_equals_a_fresh_copy(rounds):
    """The coordinator's copy of its job set, brought up to date from the change log each
    round, is what a whole copy would be: the same views in the same order, the same
    places and the same changes for a memo to follow."""
    js, given = JobSet(), None
    for ops in rounds:
        for jid, put, state in ops:
            if put:
                js.put(view(jid, state))
            else:
                js.drop(jid)
        whole = js.frozen()
        given = js.frozen(reuse=given)
        js.trim()
        assert [(v.id, v.state, whole.seq(v.id)) for v in whole] == \
            [(v.id, v.state, given.seq(v.id)) for v in given]
        assert all(whole.get(v.id) is v for v in given) and len(whole) == len(given)
        assert given.position == whole.position
        assert given.changed_since(whole.position - len(ops)) == \
            whole.changed_since(whole.position - len(ops))
        js.put(view("late"))              # after the copy was taken: not in it
        assert given.get("late") is whole.get("late")
        js.drop("late")


def test_a_frozen_copy_is_not_reused_when_the_log_no_longer_covers_it():
    js = JobSet([view("a")])
    given = js.frozen()
    js.trim()
    js.put(view("b"))
    js.trim()                              # the changes since the copy are forgotten
    js.put(view("c"))
    again = js.frozen(reuse=given)
    assert again is not given and [v.id for v in again] == ["a", "b", "c"]
    assert [v.id for v in given] == ["a"]


def _runner_and_waiter(t0: float = 0.0):
    """One GPU, held since ``t0`` by a long runner (minimum run 300 s: its move cost is
    unmeasured), and a sampled job waiting since ``t0`` with 1,000 s left: its bound is
    max(600, 2 x 1,000) = 2,000 s of waiting."""
    from tfgshare.policies.builders import make_cluster, make_job

    runner = make_job("run", t0, on={"n0:0": 0.98}, memory_mb=15000, total_steps=10 ** 6,
                      last_start=t0)
    waiter = make_job("w", t0, state=JobState.SAMPLED, memory_mb=15000, step_time_s=1.0,
                      total_steps=1000)
    return make_cluster(1, 1, 16000), runner, waiter


def test_fgs_promotion_is_a_timed_event_at_the_bound():
    """A waiting job's promotion time is known in advance, never late, from the memo."""
    cluster, runner, waiter = _runner_and_waiter()
    pol = get_policy("fgs")
    memo = pol.new_memo()
    pol.decide(100.0, cluster, JobSet([runner, waiter]), memo)
    due = memo.next_promotion(100.0)
    assert 2000.0 - 0.01 < due <= 2000.0
    assert not pol.starving(waiter, 1999.999) and pol.starving(waiter, 2000.001)


def test_fgs_wakes_when_a_running_job_passes_its_minimum_run_while_jobs_wait():
    # the runner may be moved from 300 s on: fgs asks to decide then, not at a tick,
    # and at the promotion after it
    cluster, runner, waiter = _runner_and_waiter()
    pol = get_policy("fgs")
    assert pol.tick_s is None and pol.min_run(runner) == 300.0
    memo = pol.new_memo()
    pol.decide(100.0, cluster, JobSet([runner, waiter]), memo)
    assert pol.wake_at(100.0, memo) == 300.0
    pol.decide(300.0, cluster, JobSet([runner, waiter]), memo)
    assert 2000.0 - 0.01 < pol.wake_at(300.0, memo) <= 2000.0   # now only the promotion
    alone = pol.new_memo()   # nothing waits: a minimum run's end changes no decision
    pol.decide(100.0, cluster, JobSet([runner]), alone)
    assert pol.wake_at(100.0, alone) is None


def test_fgs_wakes_at_the_moment_a_job_due_but_not_past_its_bound_passes_it():
    # a million seconds in, the promotion's early margin is about a second: woken
    # then, the job is due but not past its bound, and the next wake is the moment
    # it passes it (not the next microsecond, which a caller would step through)
    t0 = 1e6
    cluster, runner, waiter = _runner_and_waiter(t0)
    pol = get_policy("fgs")
    memo = pol.new_memo()
    jobs = JobSet([runner, waiter])
    pol.decide(t0 + 100.0, cluster, jobs, memo)
    assert pol.wake_at(t0 + 100.0, memo) == t0 + 300.0   # the runner's minimum run ends
    due = memo.next_promotion(t0 + 100.0)
    assert t0 + 2000.0 - 2.0 < due < t0 + 2000.0 - 0.5
    pol.decide(due, cluster, jobs, memo)
    assert not pol.starving(waiter, due)
    again = pol.wake_at(due, memo)
    assert t0 + 2000.0 - 1e-6 <= again <= t0 + 2000.0 + 1e-6


def test_with_no_tick_the_simulator_decides_when_fgs_promotes(toy_profiles):
    # two long jobs that cannot share the GPU: after sampling, one runs for about
    # 2,000 s; the other waits until its wait passes 900 s and is promoted
    jobs = [TraceJob("a", 0.0, 1, 0.0, model="toy", batch_size=3, total_steps=4000),
            TraceJob("b", 5.0, 1, 0.0, model="toy", batch_size=3, total_steps=4000)]
    pol = FreshToo(get_policy("fgs", max_wait_s=900.0, promote_floor_s=60.0))
    times = []
    decide = pol.decide

    def record(now, cluster, views, memo=None):
        times.append(now)
        return decide(now, cluster, views, memo)
    pol.decide = record
    simulate(load_cluster("1x1:8192"), jobs, toy_profiles, pol, SimConfig(tick_s=None, seed=1))
    # no arrival and no run ends between the samplings and ~2,000 s, and the runner's
    # minimum run (its measured move cost over move_share) ends before 100 s: only the promotion
    woken = [t for t in times if 100 < t < 1900]
    assert woken and 900 < woken[0] < 1000, times


def test_fgs_memo_keeps_changes_seen_in_a_round_with_nothing_waiting():
    # the coordinator decides every round, also when no job waits: a GPU taken
    # then must still count when a job waits later (a fresh memo agrees)
    from tfgshare.policies.builders import make_cluster, make_job
    pol = get_policy("fgs")
    c = make_cluster(1, 2)
    jobs = JobSet([make_job("x", on={"n0:0": 0.4}, memory_mb=5000, gpu_util=0.3),
                   make_job("y", submit=5, state=JobState.SAMPLED, memory_mb=5000)])
    memo = pol.new_memo()
    assert [a.job for a in pol.decide(10, c, jobs.frozen(), memo)] == ["y"]   # builds its map
    jobs.trim()
    y_gpu = "n0:1"      # where the cluster ran it in the end
    jobs.put(make_job("y", submit=5, on={y_gpu: 0.4}, memory_mb=5000, gpu_util=0.3))
    assert pol.decide(20, c, jobs.frozen(), memo) == []      # nothing waits: no plan
    jobs.trim()
    jobs.put(make_job("w", submit=30, state=JobState.SAMPLED, memory_mb=10000))
    reused = pol.decide(40, c, jobs.frozen(), memo)
    assert reused == pol.decide(40, c, list(jobs))
    assert not any(isinstance(a, Start) and a.job == "w" and
                   any(f.gpu == y_gpu for f in a.fragments) for a in reused)


class FullSearch:
    """Wraps fgs: every round also decides without its shortcuts, on a memo of its own."""

    def __init__(self, policy):
        self.policy = policy
        self.name = policy.name
        self.full = type("Full", (type(policy),), {"shortcuts": False})(
            **{f.name: getattr(policy, f.name) for f in dataclasses.fields(policy)})
        self.full_memo = self.full.new_memo()
        self.rounds = 0

    def __getattr__(self, attr):
        return getattr(self.policy, attr)

    def decide(self, now, cluster, jobs, memo=None):
        got = self.policy.decide(now, cluster, jobs, memo)
        want = self.full.decide(now, cluster, list(jobs), self.full_memo)
        assert got == want, f"round {self.rounds} at t={now}: a shortcut changed the decision"
        self.rounds += 1
        return got


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(scenario=scenarios(), reservations=st.sampled_from([1, 2]))
def test_fgs_shortcuts_decide_as_the_full_search(scenario, reservations, toy_profiles):
    # short bounds, so promotions, reservations and consolidations happen in small runs
    spec, jobs = scenario
    pol = FullSearch(get_policy("fgs", max_wait_s=600.0, promote_floor_s=30.0, min_run_s=30.0,
                                reserve_horizon_s=120.0, max_reservations=reservations))
    res = simulate(load_cluster(spec), jobs, toy_profiles, pol, SimConfig(tick_s=30.0, seed=2))
    assert pol.rounds > 0
    assert len(res.records) == len(jobs)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), nodes=st.sampled_from(["1x2:8192", "2x2:8192", "1x4:16384"]))
def test_fgs_walk_by_size_bucket_decides_as_the_queue_walk(seed, nodes, toy_profiles):
    # long queues of mixed sizes on a small cluster, so whole buckets get passed over
    import random
    rng = random.Random(seed)
    jobs = [TraceJob(f"j{i}", rng.uniform(0, 4000), 1, 0.0, model="toy",
                     batch_size=rng.choice([1, 2, 3, 3]), total_steps=rng.randint(50, 900))
            for i in range(40)]
    pol = FullSearch(get_policy("fgs", max_wait_s=900.0, promote_floor_s=30.0, min_run_s=30.0))
    res = simulate(load_cluster(nodes), jobs, toy_profiles, pol, SimConfig(tick_s=30.0, seed=2))
    assert len(res.records) == len(jobs)
    assert pol.rounds > 0


def test_fgs_walk_by_size_bucket_passes_over_big_jobs(toy_profiles, monkeypatch):
    from tfgshare.policies.fgs import order
    drops = []
    drop = order.SizedWalk.drop
    monkeypatch.setattr(order.SizedWalk, "drop",
                        lambda self, *a: (drops.append(1), drop(self, *a)))
    # one 8 GB GPU: a few small jobs, then a queue of big ones that cannot share it
    jobs = [TraceJob(f"s{i}", 10.0 * i, 1, 0.0, model="toy", batch_size=1, total_steps=400)
            for i in range(3)]
    jobs += [TraceJob(f"b{i}", 40.0 + i, 1, 0.0, model="toy", batch_size=3, total_steps=300)
             for i in range(20)]
    pol = FullSearch(get_policy("fgs"))
    res = simulate(load_cluster("1x1:8192"), jobs, toy_profiles, pol, SimConfig(tick_s=30.0, seed=2))
    assert len(res.records) == len(jobs)
    assert drops, "no size bucket was passed over: the test no longer exercises the walk"


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), nodes=st.sampled_from(["2x2:8192", "1x4:16384", "2x4:8192"]))
@example(seed=0, nodes="2x4:8192")   # an idle walk kept past a tenant's minimum run differs here
def test_fgs_walk_passes_over_gangs_as_the_queue_walk(seed, nodes, toy_profiles):
    # long queues of gangs and single-GPU jobs: gangs that too few GPUs have room
    # for are passed over (and their buckets dropped) without a search
    import random
    rng = random.Random(seed)
    jobs = [TraceJob(f"j{i}", rng.uniform(0, 3000), rng.choice([1, 2, 2, 4]), 0.0, model="toy",
                     batch_size=rng.choice([1, 2, 3]), total_steps=rng.randint(50, 900))
            for i in range(40)]
    pol = FullSearch(get_policy("fgs", max_wait_s=900.0, promote_floor_s=30.0, min_run_s=30.0))
    res = simulate(load_cluster(nodes), jobs, toy_profiles, pol, SimConfig(tick_s=30.0, seed=2))
    assert len(res.records) == len(jobs)
    assert pol.rounds > 0


def test_fgs_walk_searches_no_gang_that_too_few_gpus_have_room_for(monkeypatch):
    from tfgshare.policies.builders import make_cluster, make_job
    from tfgshare.policies.fgs.best_fit import BestFit
    failed = {True: [], False: []}   # shortcuts -> gangs whose search failed
    place = BestFit.place

    def counted(self, job, sample_only=False, size=None):
        ok = place(self, job, sample_only, size)
        if not ok and job.num_gpus > 1:
            failed[self.round.pol.shortcuts].append(job.id)
        return ok
    monkeypatch.setattr(BestFit, "place", counted)
    # three GPUs nearly full, one with room for one gang member: no 2-GPU gang fits
    running = [make_job(f"x{i}", on={f"n0:{i}": 0.9 if i < 3 else 0.4}, memory_mb=1000,
                        gpu_util=0.2, last_start=95.0) for i in range(4)]
    waiting = [make_job("big", submit=90, state=JobState.SAMPLED, memory_mb=15000,
                        total_steps=10)]
    waiting += [make_job(f"g{i}", submit=90, gpus=2, state=JobState.SAMPLED, memory_mb=4000,
                         gpu_util=0.2, total_steps=100 + i) for i in range(20)]
    waiting += [make_job("small", submit=90, state=JobState.SAMPLED, memory_mb=2000,
                         gpu_util=0.2, total_steps=500)]
    pol = FullSearch(get_policy("fgs"))
    views = JobSet(running + waiting).frozen()
    got = pol.decide(100.0, make_cluster(1, 4), views, pol.new_memo())
    assert [a.job for a in got] == ["small"]
    assert len(failed[False]) == 20, "the full search no longer tries every gang"
    assert failed[True] == []


def test_fgs_consolidation_stops_once_too_few_tries_are_left_for_a_gang(monkeypatch):
    from tfgshare.policies.builders import make_cluster, make_job
    from tfgshare.policies.fgs.consolidate import CONSOLIDATE_TRIES, Consolidate
    tries = {True: 0, False: 0}   # shortcuts -> GPUs a consolidation tried to clear
    clear = Consolidate._clear_by_migration

    def counted(self, *a, **kw):
        tries[self.round.pol.shortcuts] += 1
        return clear(self, *a, **kw)
    monkeypatch.setattr(Consolidate, "_clear_by_migration", counted)
    # 16 GPUs, each with one busy tenant that no other GPU is calm enough to take:
    # there is room in all (total free room), but every try fails
    running = [make_job(f"x{i}", on={f"n{i // 8}:{i % 8}": 0.3}, memory_mb=4000,
                        gpu_util=0.9, last_start=0.0) for i in range(16)]
    gang = make_job("gang", submit=9000, gpus=8, state=JobState.SAMPLED, memory_mb=14000,
                    gpu_util=0.2)
    pol = FullSearch(get_policy("fgs"))
    views = JobSet(running + [gang]).frozen()
    assert pol.decide(9100.0, make_cluster(2, 8), views, pol.new_memo()) == []
    assert tries[False] == CONSOLIDATE_TRIES + 8, "the full search no longer tries them all"
    assert tries[True] == CONSOLIDATE_TRIES + 1   # then 7 tries are left for 8 GPUs


def _two_small_tenants_and_a_big_job():
    """Two GPUs, a small tenant on each started at t=0: the waiting job fits on
    neither, but on one once the other takes its tenant, which may move only after
    its minimum run (min_run_s, 300 s, while no move cost is measured)."""
    from tfgshare.policies.builders import make_job
    running = [make_job(f"x{i}", on={f"n0:{i}": 0.3}, memory_mb=4000, gpu_util=0.2,
                        last_start=0.0) for i in range(2)]
    big = make_job("big", submit=50, state=JobState.SAMPLED, memory_mb=12000, gpu_util=0.2)
    return running, big


def test_fgs_walks_a_quiet_queue_again_only_once_a_tenant_passes_its_minimum_run(monkeypatch):
    from tfgshare.policies.base import Migrate
    from tfgshare.policies.builders import make_cluster
    from tfgshare.policies.fgs.consolidate import Consolidate
    calls = {True: [], False: []}   # shortcuts -> times a consolidation was tried
    consolidate = Consolidate.consolidate

    def counted(self, job):
        calls[self.round.pol.shortcuts].append(self.round.now)
        return consolidate(self, job)
    monkeypatch.setattr(Consolidate, "consolidate", counted)
    running, big = _two_small_tenants_and_a_big_job()
    pol = FullSearch(get_policy("fgs"))
    views = JobSet(running + [big]).frozen()
    memo = pol.new_memo()
    c = make_cluster(1, 2)
    for now in (100.0, 160.0, 220.0, 280.0):   # ticks: nothing changes, nothing moves
        assert pol.decide(now, c, views, memo) == []
    got = pol.decide(300.5, c, views, memo)
    assert [type(a) for a in got] == [Migrate, Start] and got[1].job == "big"
    assert calls[False] == [100.0, 160.0, 220.0, 280.0, 300.5]
    assert calls[True] == [100.0, 300.5]   # the ticks between left the idle walk alone


def test_fgs_walks_a_quiet_queue_again_once_a_tenants_move_cost_is_measured():
    from tfgshare.policies.base import Migrate
    from tfgshare.policies.builders import make_cluster
    # as above, but the tenants' move costs (6 s: a minimum run of 60 s) are
    # measured at t=150, after the walk found nothing to do at t=100
    running, big = _two_small_tenants_and_a_big_job()
    pol = FullSearch(get_policy("fgs"))
    jobs = JobSet(running + [big])
    memo = pol.new_memo()
    c = make_cluster(1, 2)
    assert pol.decide(100.0, c, jobs.frozen(), memo) == []
    jobs.trim()
    for x in running:
        jobs.put(dataclasses.replace(x, move_cost_s=6.0))
    got = pol.decide(150.0, c, jobs.frozen(), memo)
    assert [type(a) for a in got] == [Migrate, Start] and got[1].job == "big"


def test_fgs_memo_keeps_a_gpu_fresh_in_an_index_that_does_not_read_what_its_tenant_reported():
    from tfgshare.policies.builders import make_cluster, make_job
    from tfgshare.policies.fgs.consolidate import MovableIndex
    from tfgshare.policies.fgs.room_index import ClearIndex, RoomIndex
    from tfgshare.policies.freemap import FreeMap
    pol = get_policy("fgs")
    c = make_cluster(1, 2)
    # x may be moved; y waited past its bound before it ran (promoted), so it never is
    x = make_job("x", on={"n0:0": 0.3}, memory_mb=4000, gpu_util=0.2, last_start=0.0,
                 predicted_s=50_000.0)
    y = make_job("y", on={"n0:1": 0.3}, memory_mb=4000, gpu_util=0.2, last_start=0.0,
                 predicted_s=50_000.0, waited_s=200_000.0)
    jobs = JobSet([x, y])
    memo = pol.new_memo()
    assert pol.decide(100.0, c, jobs.frozen(), memo) == []   # nothing waits
    fm = FreeMap(c)
    memo.indexes = {"movable": MovableIndex(pol.room_key()),
                    "room": RoomIndex(pol, (), c),
                    "clear": ClearIndex((), c.gpus, fm.gpus, fm.order)}

    def report(now, jid, **progress):
        jobs.trim()
        jobs.put(dataclasses.replace(jobs.get(jid), **progress))
        pol.decide(now, c, jobs.frozen(), memo)
        stale = {name: index.stale for name, index in memo.indexes.items()}
        for index in memo.indexes.values():
            index.stale = set()
        return stale

    # progress only: no index reads the remaining time of a job it may move, nor
    # that of one it may not beyond the reservation horizon (30 min)
    assert report(200.0, "x", steps_done=100, predicted_remaining_s=49_000.0) == {
        "movable": set(), "room": set(), "clear": set()}
    assert report(210.0, "y", steps_done=100, predicted_remaining_s=49_000.0) == {
        "movable": set(), "room": set(), "clear": set()}
    # y now within the horizon of its end: RoomIndex reads that, the clear costs its
    # end to the second from then on
    assert report(300.0, "y", steps_done=900, predicted_remaining_s=1_000.0) == {
        "movable": set(), "room": {"n0:1"}, "clear": {"n0:1"}}
    assert report(310.0, "y", steps_done=910, predicted_remaining_s=990.0) == {
        "movable": set(), "room": set(), "clear": {"n0:1"}}
    # x's move cost measured: its minimum run changes, which every index reads
    assert report(400.0, "x", move_cost_s=6.0) == {
        "movable": {"n0:0"}, "room": {"n0:0"}, "clear": {"n0:0"}}


class Sizes:
    """Wraps a policy: after each round, how many entries its memo keeps against the jobs."""

    def __init__(self, policy):
        self.policy, self.name, self.seen = policy, policy.name, []

    def __getattr__(self, attr):
        return getattr(self.policy, attr)

    def decide(self, now, cluster, jobs, memo=None):
        out = self.policy.decide(now, cluster, jobs, memo)
        kept = (len(memo.promotions_due) + len(memo.passing) + len(memo.expiries)
                + len(memo.asked_ids))
        self.seen.append((len(memo.tracker.views), kept))
        return out


def test_fgs_memo_keeps_what_the_jobs_present_need_not_every_job_seen(toy_profiles):
    # a long stream of short jobs through four GPUs, a few present at a time: what fgs's memo
    # keeps (its timed-event heaps, the jobs it counted into its target workload) follows
    # the jobs present; a coordinator that runs for days must not keep every job it saw
    jobs = [TraceJob(f"j{i}", 30.0 * i, 1, 0.0, model="toy", batch_size=3, total_steps=150)
            for i in range(1500)]
    pol = Sizes(get_policy("fgs"))
    simulate(load_cluster("1x4:8192"), jobs, toy_profiles, pol, SimConfig(seed=1))
    present = max(n for n, _ in pol.seen)
    assert present < 100, present          # the stream does not pile up: a few at a time
    worst = max(kept - 4 * n for n, kept in pol.seen)
    assert worst <= 3 * 64, (worst, pol.seen[-5:])
