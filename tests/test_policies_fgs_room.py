"""fgs's kept clear costs (``room_index.ClearIndex``) pick what pricing every GPU picks."""

import math

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from philly.jobs import TraceJob
from tfgshare.policies.fgs import make_room, room_index
from tfgshare.policies.fgs.records import ClearCost, ClearStep, ClearSteps, GpuCost
from tfgshare.policies.fgs.step_table import StepTable
from tfgshare.policies.base import GPU, ClusterSnapshot
from tfgshare.policies.registry import get_policy
from tfgshare.sim.cluster import load_cluster
from tfgshare.sim.config import SimConfig
from tfgshare.sim.engine import simulate

def _as_moves(picked):
    """A pick with each tenant as (id, fragments, utilisation): what moving it reads."""
    if picked is None:
        return None
    return [(*c[:4], [(h.id, h.fragments, make_room.util_of(h)) for h in c[4]]) for c in picked]


@pytest.fixture
def checked(monkeypatch):
    """Every kept pick is compared with the plain scan of the same round; counts what was kept."""
    seen = {"picks": 0, "kept": 0, "gangs": 0, "timed": 0, "retimed": 0, "merged": 0,
            "left_timed": 0}
    kept, start = make_room.MakeRoom.cheapest_from_index, room_index.ClearIndex.start_steps
    retimed, steps_now = make_room.retimed, make_room.MakeRoom.steps_now

    def both(self, k, need, util):
        got = kept(self, k, need, util)
        want = self.cheapest(k, need, util)
        # the tenants to move as what a move reads of them (a kept cost may hold an
        # older view of a tenant: one that differs only in what the clear cost never reads)
        assert _as_moves(got) == _as_moves(want), (
            f"t={self.round.now}: kept costs picked {got}, the scan {want}")
        seen["picks"] += 1
        seen["gangs"] += k > 1
        seen["timed"] += bool(self.round.memo.indexes["clear"].steps[k].clocks)
        # a gang's pick that merged timed GPUs' costs (kept apart) with the sorted ones
        seen["merged"] += k > 1 and bool(self.round.memo.indexes["clear"].current.loose)
        return got

    def counted(self, k):
        got = start(self, k)
        seen["kept"] += len(self.up) - len(got[1])   # steps not worked out anew
        return got

    def counted_retimed(*args):
        got = retimed(*args)
        seen["retimed"] += got is not None   # steps brought to now, not worked out anew
        return got

    def counted_steps_now(self, gang_steps, redo_steps, k, expired_only=False):
        timed = [g for g in gang_steps.clocks if g not in redo_steps]
        got = steps_now(self, gang_steps, redo_steps, k, expired_only)
        # timed GPUs a 1-GPU read left as they were (none of their tenants past its
        # minimum run), read only if no GPU is cleared now
        seen["left_timed"] += len(set(timed) - got - redo_steps) if expired_only else 0
        return got

    monkeypatch.setattr(make_room.MakeRoom, "cheapest_from_index", both)
    monkeypatch.setattr(make_room.MakeRoom, "steps_now", counted_steps_now)
    monkeypatch.setattr(make_room, "retimed", counted_retimed)
    monkeypatch.setattr(room_index.ClearIndex, "start_steps", counted)
    return seen


@st.composite
def runs(draw):
    nodes = draw(st.integers(1, 3))
    per_node = draw(st.sampled_from([2, 4]))
    sizes = [g for g in (1, 2, 4) if g <= nodes * per_node]
    jobs = [TraceJob(f"j{i}", draw(st.floats(0, 2000, allow_nan=False)),
                     draw(st.sampled_from(sizes)), 0.0, model="toy",
                     batch_size=draw(st.sampled_from([1, 2, 3])),
                     total_steps=draw(st.integers(50, 900)))
             for i in range(draw(st.integers(4, 24)))]
    return f"{nodes}x{per_node}:{draw(st.sampled_from([8192, 16384]))}", jobs


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(run=runs())
def test_kept_clear_costs_pick_what_the_scan_of_every_gpu_picks(run, toy_profiles, checked):
    # short bounds: promoted jobs, tenants inside their minimum run and reservations come soon
    spec, jobs = run
    pol = get_policy("fgs", max_wait_s=600.0, promote_floor_s=30.0, min_run_s=120.0,
                     reserve_horizon_s=300.0)
    res = simulate(load_cluster(spec), jobs, toy_profiles, pol, SimConfig(tick_s=30.0, seed=2))
    assert len(res.records) == len(jobs)


def test_the_kept_costs_are_read_and_cover_gangs_and_waits_that_fall(toy_profiles, checked):
    # a queue that outgrows 2 nodes: promoted 1-, 2- and 4-GPU jobs retry round after round
    jobs = [TraceJob(f"j{i}", 7.0 * i, (1, 2, 1, 4)[i % 4], 0.0, model="toy",
                     batch_size=(1, 2, 3)[i % 3], total_steps=300 + 37 * (i % 11))
            for i in range(60)]
    pol = get_policy("fgs", max_wait_s=600.0, promote_floor_s=30.0, min_run_s=120.0,
                     reserve_horizon_s=300.0)
    res = simulate(load_cluster("2x4:16384"), jobs, toy_profiles, pol,
                   SimConfig(tick_s=30.0, seed=2))
    assert len(res.records) == len(jobs)
    assert checked["picks"] > 20 and checked["gangs"] > 0 and checked["timed"] > 0
    assert checked["retimed"] > 0, "no timed GPU's steps were brought to a later time"
    assert checked["merged"] > 0, "no gang's pick merged timed GPUs' costs"
    assert checked["kept"] > checked["picks"], "costs were priced again, not kept"
    assert checked["left_timed"] > 0, "every timed GPU was brought to now for a 1-GPU read"


@st.composite
def cost_updates(draw):
    nodes, per = draw(st.integers(1, 4)), draw(st.sampled_from([1, 2, 4]))
    gpus = tuple(GPU(f"n{i}:{j}", f"n{i}", j, 16384) for i in range(nodes) for j in range(per))
    some = st.builds(ClearCost, st.sampled_from([0.0, 0.0, 1.0, 5.0, math.inf]),
                     st.integers(0, 2), st.just(()))
    cost = st.one_of(st.none(), some, some)   # (wait, moves, tenants) or None: not clearable
    rounds = draw(st.lists(st.dictionaries(st.sampled_from([g.id for g in gpus]),
                                           st.tuples(cost, st.booleans())),
                           min_size=1, max_size=6))
    gang = draw(st.one_of(st.none(), st.frozensets(st.sampled_from([f"n{i}" for i in
                                                                    range(nodes)]))))
    return gpus, rounds, draw(st.integers(2, max(2, len(gpus)))), gang   # a gang


@settings(max_examples=300, deadline=None)
@given(case=cost_updates())
def test_kept_costs_timed_apart_pick_what_sorting_every_cost_picks(case):
    # each round changes some GPUs' costs, timed (kept out of the sorted lists) or not
    gpus, rounds, n, gang = case
    up = {g.id: g for g in gpus}
    order = {g.id: i for i, g in enumerate(gpus)}
    cluster = ClusterSnapshot(gpus, gang_nodes=gang)
    index = room_index.ClearIndex((), gpus, up, order)
    now = {gid: None for gid in up}
    for i, changes in enumerate(rounds):
        index.start(n, ("job",))
        now.update((gid, c) for gid, (c, _) in changes.items())
        if i == 0:
            index.fill(now.items(), {gid for gid, (_, timed) in changes.items() if timed})
        else:
            for gid, (c, timed) in changes.items():
                index.put(gid, c, timed)
        scan = [GpuCost(c.wait_s, c.moves, order[gid], gid, c.tenants)   # cheapest's scan
                for gid, c in now.items() if c is not None]
        assert index.pick(n, cluster) == make_room._pick_gpus(scan, n, up, cluster)


@st.composite
def step_tables(draw):
    """GPUs of two memory sizes, each idle or with tenants to move in order (their steps)."""
    waits = st.sampled_from([0.0, -0.0, 1.0, 2.0, 5.0, 5.0, math.inf])
    room = st.sampled_from([-math.inf, 0.0, 0.35, 0.5, 1.0, 1.0, math.inf])
    free = st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0])
    crowded = st.sampled_from([0.0, 0.1, 0.25])   # before any move: the job seldom fits
    gpus = []
    for _ in range(draw(st.integers(1, 12))):
        if draw(st.integers(0, 3)) == 0:
            gpus.append(ClearSteps(draw(free), 0, None, ()))
            continue
        tenants, wait, moves = draw(st.integers(1, 5)), 0.0, []
        for i in range(draw(st.integers(0, tenants))):
            wait = max(wait, draw(waits))
            moves.append(ClearStep(draw(free), tenants - i - 1, draw(room), wait, i + 1, []))
        gpus.append(ClearSteps(draw(crowded), tenants, draw(room), tuple(moves)))
    memory = [draw(st.sampled_from([8192, 16384])) for _ in gpus]
    big = st.sampled_from([0.1, 0.25, 0.5, 0.75, 0.9, 1.0])
    fractions = {8192: draw(big), 16384: draw(big)}
    return gpus, memory, fractions, draw(room), draw(st.integers(1, 4))


_TIE = ([ClearSteps(0.0, 3, 0.0, (ClearStep(0.1, 2, 0.0, 1.0, 1, []),
                                   ClearStep(0.5, 1, 1.0, 1.0, 2, []))),
         ClearSteps(0.0, 3, 0.0, (ClearStep(0.5, 2, 1.0, 1.0, 1, []),))],
        [8192, 8192], {8192: 0.5, 16384: 0.5}, 0.5, 4)   # the same wait: fewer moves first


@settings(max_examples=500, deadline=None)
@example(case=_TIE)
@given(case=step_tables())
def test_the_step_table_picks_what_pricing_each_gpu_picks(case):
    # a 1-GPU job: the first GPU one move clears now, else the cheapest (wait, moves, order)
    gpus, memory, fractions, util, cap = case
    table = StepTable(len(gpus) + 1, memory + [8192])   # the last row: a GPU never put
    for row, steps in enumerate(gpus):
        table.put(row, ClearSteps(1.0, 9, 0.0, tuple(steps.moves) * 2))   # put over
        table.put(row, steps)
    costs, up = [], {}
    for row, steps in enumerate(gpus):   # ``cheapest``'s scan
        up[f"g{row}"] = GPU(f"g{row}", "n", row, memory[row])
        c = room_index.clear_cost_from(steps, fractions[memory[row]], util, cap)
        if c is not None:
            costs.append(GpuCost(c.wait_s, c.moves, row, f"g{row}", c.tenants))
            if c.wait_s == 0 and c.moves <= 1:
                break
    want = make_room._pick_gpus(costs, 1, up, ClusterSnapshot(tuple(up.values())))
    assert table.cheapest(fractions, util, cap) == (want[0].order if want else None)


def test_a_one_gpu_read_brings_to_now_the_gpus_whose_tenant_passed_its_minimum_run(
        toy_profiles, checked):
    # 1-GPU jobs only, more than the 8 GPUs hold: promoted jobs are read round after round
    # while tenants pass their minimum run; here a GPU that a tenant has just passed it on
    # is the first that one move clears now (a read that left it as it was picks another)
    jobs = [TraceJob(f"j{i}", 10.0 * i, 1, 0.0, model="toy", batch_size=(1, 2, 3)[i % 3],
                     total_steps=100 + 40 * (i % 5)) for i in range(40)]
    pol = get_policy("fgs", max_wait_s=300.0, promote_floor_s=20.0, min_run_s=120.0,
                     reserve_horizon_s=300.0)
    res = simulate(load_cluster("1x8:16384"), jobs, toy_profiles, pol,
                   SimConfig(tick_s=10.0, seed=3))
    assert len(res.records) == len(jobs)
    assert checked["picks"] > 0 and checked["left_timed"] > 0
