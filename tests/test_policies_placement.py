"""Fragment accounting, placement and validation on hand-built clusters."""

import math
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tfgshare.policies.base import Fragment, JobState, Migrate, Start, Suspend
from tfgshare.policies.builders import make_cluster, make_job
from tfgshare.policies.registry import POLICY_NAMES, get_policy
from tfgshare.policies.freemap import FreeMap, best_fit, gang_place
from tfgshare.policies.placement import exclusive_fraction, fraction_for, free_fraction, usage
from tfgshare.policies.placement import GpuUse
from tfgshare.policies.validate import Occupancy, check_actions, validate

R = 300.0 / 16000  # one context reserve as a fraction of a 16 GB GPU


def test_usage_counts_fractions_and_tenants_of_gpu_holders_only():
    c = make_cluster(1, 2)
    jobs = [make_job("a", on={"n0:0": 0.3}), make_job("b", on={"n0:0": 0.2}),
            make_job("s", state=JobState.SUSPENDED)]
    use = usage(c, jobs)
    assert set(use) == {"n0:0"}
    assert use["n0:0"].used == pytest.approx(0.5) and use["n0:0"].tenants == 2
    # room for a third tenant: 1 - 0.5 - 3 reserves
    assert free_fraction(c.gpus[0], use["n0:0"], 300) == pytest.approx(0.5 - 3 * R)
    assert free_fraction(c.gpus[1], None, 300) == pytest.approx(exclusive_fraction(c.gpus[1], 300))


def test_fraction_for_prefers_request_then_sample_then_default():
    g = make_cluster(1, 1).gpus[0]
    assert fraction_for(make_job("a", requested_fraction=0.25, memory_mb=8000), g) == 0.25
    assert fraction_for(make_job("b", memory_mb=4000), g, headroom=0.1) == pytest.approx(0.275)
    assert fraction_for(make_job("c"), g) == pytest.approx(1 - R)      # whole GPU
    assert fraction_for(make_job("d"), g, default=0.5) == 0.5
    assert fraction_for(make_job("e", memory_mb=40000), g) == pytest.approx(1 - R)  # clipped


def test_best_fit_picks_the_tighter_fragment():
    c = make_cluster(1, 3)
    jobs = [make_job("big", on={"n0:0": 0.7}),    # leaves ~0.26 free
            make_job("small", on={"n0:1": 0.4})]  # leaves ~0.56 free
    assert best_fit(c, jobs, 0.2).gpu == "n0:0"
    assert best_fit(c, jobs, 0.3).gpu == "n0:1"
    assert best_fit(c, jobs, 0.9).gpu == "n0:2"
    assert best_fit(c, jobs, 0.99) is None


def test_best_fit_respects_the_cotenant_cap():
    c = make_cluster(1, 2)
    jobs = [make_job("a", on={"n0:0": 0.3}), make_job("b", on={"n0:0": 0.3})]
    assert best_fit(c, jobs, 0.2).gpu == "n0:0"
    assert best_fit(c, jobs, 0.2, max_tenants=2).gpu == "n0:1"


def test_gang_prefers_one_node_and_the_tightest_node():
    c = make_cluster(3, 4)
    # n0 has 1 free GPU, n1 has 2, n2 has 4: a 2-GPU gang fits n1 exactly
    jobs = [make_job("x", on={"n0:0": 0.9, "n0:1": 0.9, "n0:2": 0.9}),
            make_job("y", on={"n1:0": 0.9, "n1:1": 0.9})]
    frags = gang_place(c, jobs, 2, 0.9)
    assert sorted(f.gpu for f in frags) == ["n1:2", "n1:3"]
    frags = gang_place(c, jobs, 4, 0.9)
    assert {f.gpu.split(":")[0] for f in frags} == {"n2"}


def test_gang_spans_fewest_nodes_when_no_node_is_enough():
    c = make_cluster(3, 4)
    jobs = [make_job("x", on={"n0:0": 0.9, "n0:1": 0.9, "n0:2": 0.9}),  # n0: 1 free
            make_job("y", on={"n1:0": 0.9})]                              # n1: 3 free
    frags = gang_place(c, jobs, 6, 0.9)       # n2 (4) + 2 of n1 beats using n0
    nodes = [f.gpu.split(":")[0] for f in frags]
    assert len(set(f.gpu for f in frags)) == 6
    assert sorted(set(nodes)) == ["n1", "n2"] and nodes.count("n2") == 4
    assert gang_place(c, jobs, 9, 0.9) is None


def test_free_map_take_and_release_update_room():
    c = make_cluster(1, 1)
    fm = FreeMap(c)
    fm.take([("n0:0", 0.5)])
    assert fm.free("n0:0") == pytest.approx(0.5 - 2 * R) and fm.tenants("n0:0") == 1
    assert fm.best_fit(0.49) is None
    fm.release([Fragment("n0:0", 0.5)])
    assert fm.best_fit(0.9) == ("n0:0", 0.9)


def test_down_nodes_are_not_used():
    c = make_cluster(2, 1, down=("n0",))
    assert best_fit(c, [], 0.5).gpu == "n1:0"


def test_validate_accepts_a_plan_that_fits():
    c = make_cluster(1, 2)
    jobs = [make_job("r", on={"n0:0": 0.6}), make_job("q")]
    acts = [Suspend("r"), Start("q", (Fragment("n0:0", 0.9),))]
    assert validate(acts, c, jobs) == []


def test_validate_catches_overcommit():
    c = make_cluster(1, 1)
    jobs = [make_job("r", on={"n0:0": 0.6}), make_job("q")]
    errs = validate([Start("q", (Fragment("n0:0", 0.4),))], c, jobs)
    assert len(errs) == 1 and "does not fit on n0:0" in errs[0] and "Start q" in errs[0]


def test_validate_catches_duplicates_and_bad_states():
    c = make_cluster(1, 2)
    jobs = [make_job("q", gpus=2), make_job("r", on={"n0:1": 0.3}),
            make_job("s", state=JobState.SAMPLING, on={"n0:1": 0.1})]
    f0 = Fragment("n0:0", 0.3)
    errs = validate([Start("q", (f0, f0)), Start("q", (f0, f0)), Start("r", (f0,)),
                     Suspend("s"), Migrate("zz", (f0,)), Start("q2", ())], c, jobs)
    text = "\n".join(errs)
    assert "two fragments on one GPU" in text
    assert "more than one action" in text
    assert "Start r: job is running, not waiting" in text
    assert "busy (sampling)" in text
    assert "unknown or finished job 'zz'" in text
    errs = validate([Start("q", (f0, Fragment("n9:0", 0.3)))], c, jobs)
    assert any("unknown GPU 'n9:0'" in e for e in errs)
    errs = validate([Start("q", (f0,))], c, jobs)
    assert any("1 fragments for a 2-GPU job" in e for e in errs)


def test_one_check_takes_the_callers_moves_in_flight_as_data():
    # the coordinator's view: "r" (0.6 on n0:0) has been asked to stop and its runner is
    # exiting; "u" waits to be re-adopted after a restart; "h" waits, held by its user
    c = make_cluster(1, 2)
    jobs = {j.id: j for j in [make_job("r", state=JobState.SUSPENDING, on={"n0:0": 0.6}),
                              make_job("q"), make_job("u", on={"n0:1": 0.2}), make_job("h")]}
    whole = Fragment("n0:0", 0.9)
    held = {"n0:0": GpuUse(0.6, 1), "n0:1": GpuUse(0.2, 1)}
    live = Occupancy(held, exiting={"n0:0": GpuUse(0.6, 1)}, unadopted=frozenset({"u"}),
                     pinned=frozenset({"h"}), shown={"r": "cancelling"})
    out = check_actions([Start("q", (whole,)), Suspend("u"), Start("h", (Fragment("n0:1", 0.1),)),
                         Suspend("r")], c, jobs, live)
    assert out.deferred == [Start("q", (whole,))] and out.ok == []   # once r's runner exits
    assert [(a.job, reason) for a, reason, _ in out.refused] == [
        ("u", "not_adopted"), ("h", "not_waiting"), ("r", "not_running")]
    assert "job is busy (cancelling), not running" in out.refused[2][2]
    # without the runner exiting (the simulator's data), the start has no room at all
    out = check_actions([Start("q", (whole,))], c, jobs, Occupancy(held))
    assert [reason for _, reason, _ in out.refused] == ["no_room"]


def test_a_move_frees_its_room_for_the_whole_list():
    # fgs may list a migration before the move that clears its target
    c = make_cluster(1, 2)
    jobs = [make_job("a", on={"n0:0": 0.5}), make_job("b", on={"n0:1": 0.9})]
    acts = [Migrate("a", (Fragment("n0:1", 0.5),)), Migrate("b", (Fragment("n0:0", 0.9),))]
    assert validate(acts, c, jobs) == []
    acts = [Migrate("a", (Fragment("n0:1", 0.5),))]   # nothing frees n0:1
    assert any("does not fit on n0:1" in e for e in validate(acts, c, jobs))
    acts = [Migrate("a", (Fragment("n0:0", 0.2),))]
    assert any("a GPU it already holds" in e for e in validate(acts, c, jobs))


def test_validate_checks_cotenant_cap_and_down_nodes():
    c = make_cluster(2, 1, down=("n1",))
    jobs = [make_job("a", on={"n0:0": 0.2}), make_job("b")]
    errs = validate([Start("b", (Fragment("n0:0", 0.2),))], c, jobs, max_tenants=1)
    assert any("2 tenants" in e for e in errs)
    errs = validate([Start("b", (Fragment("n1:0", 0.2),))], c, jobs)
    assert any("down node n1" in e for e in errs)


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_a_job_spanning_nodes_uses_only_nodes_that_take_gang_members(name):
    c = replace(make_cluster(nodes=3, gpus_per_node=1), gang_nodes=frozenset({"n0", "n2"}))
    job = make_job("big", gpus=2, memory_mb=2000.0)
    starts = [a for a in get_policy(name).decide(0.0, c, [job]) if isinstance(a, Start)]
    assert starts, f"{name} did not start the 2-GPU job"
    assert {f.gpu.split(":")[0] for f in starts[0].fragments} == {"n0", "n2"}
    closed = replace(c, gang_nodes=frozenset({"n0"}))
    assert not [a for a in get_policy(name).decide(0.0, closed, [job]) if isinstance(a, Start)]


@given(st.lists(st.tuples(st.integers(0, 5), st.sampled_from([0.1, 0.2, 0.3, 0.05, 0.15]),
                          st.booleans()), max_size=40))
def test_total_free_is_the_exact_sum_whatever_the_order_of_changes(steps):
    c = make_cluster(2, 3)
    fm = FreeMap(c, [], max_tenants=4)
    fm.total_free()   # kept up to date from here on
    held: list[tuple[str, float]] = []
    for i, f, release in steps:
        if release and held:
            fm.release([held.pop(i % len(held))])
        else:
            gid = c.gpus[i].id
            if fm.free(gid) >= f:
                fm.take([(gid, f)])
                held.append((gid, f))
    empty = [free_fraction(g, None, c.reserve_mb) for g in c.gpus]
    gains = [x for g, e in zip(c.gpus, empty) if g.id in fm.use
             for x in (max(0.0, fm.free(g.id)), -e)]
    want = math.fsum([sum(empty)] + gains)
    assert fm.total_free() == want
    assert FreeMap(c, [], max_tenants=4, use=fm.use).total_free() == want   # built afresh


@given(st.lists(st.tuples(st.integers(0, 5), st.sampled_from([0.1, 0.2, 0.3, 0.05, 0.45]),
                          st.sampled_from([0.2, 0.5, 1.0])), max_size=30),
       st.integers(1, 7), st.sampled_from([None, 0, 5, 12, 20]),
       st.floats(0.0, 1.0, allow_nan=False))
def test_kth_free_says_whether_k_gpus_fit_as_count_fitting_does(takes, k, band, f):
    # the walk passes over a k-GPU gang by kth_free; gang_place's first check is count_fitting
    from tfgshare.policies.fgs.order import BANDS
    from tfgshare.policies.interference import room_for
    from tfgshare.policies.placement import EPS

    def bands(u):
        room = room_for(u.tenants, u.util, 1.5, 0.05)
        return -1 if room < 0 else (BANDS if room >= 1.0 else int(room * BANDS))
    c = make_cluster(2, 3)
    fm = FreeMap(c, [], max_tenants=4, band=bands, empty_band=BANDS)
    for i, frac, util in takes:
        gid = c.gpus[i].id
        if fm.free(gid) >= frac:
            fm.take([(gid, frac)], util)
        assert (fm.count_fitting(f, band) >= k) == (fm.kth_free(k, band) >= f - EPS)
    copy = fm.copy()   # a copy's answers are its own once either changes
    copy.take([(c.gpus[0].id, 0.01)], 0.1)
    assert (copy.count_fitting(f, band) >= k) == (copy.kth_free(k, band) >= f - EPS)
    assert (fm.count_fitting(f, band) >= k) == (fm.kth_free(k, band) >= f - EPS)


def _two_bands(u):
    return 0 if u.util >= 1.0 else 1


def _two_band_map(c, takes):
    """A FreeMap in two bands by utilisation (idle GPUs in a third) after these
    (GPU index, fraction, utilisation) takes, each that fits."""
    fm = FreeMap(c, [], max_tenants=4, band=_two_bands, empty_band=2)
    for i, frac, util in takes:
        if fm.free(c.gpus[i].id) >= frac:
            fm.take([(c.gpus[i].id, frac)], util)
    return fm


@given(st.lists(st.tuples(st.integers(0, 5), st.sampled_from([0.1, 0.3, 0.45]),
                          st.sampled_from([0.2, 1.0])), max_size=12),
       st.lists(st.tuples(st.integers(0, 5), st.sampled_from([0.05, 0.2, 0.5]),
                          st.sampled_from([0.2, 0.5, 1.0]), st.booleans()), max_size=12))
def test_planning_on_a_copy_leaves_the_map_copied_as_it_was(before, plan):
    # fgs plans each round on a copy of the map it keeps between rounds
    c = make_cluster(2, 3)
    fm = _two_band_map(c, before)

    def answers(m):
        return ([(g.id, m.free(g.id), m.tenants(g.id)) for g in c.gpus], m.total_free(),
                m.best_fit(0.1), m.gang_place(2, 0.2), m.max_free(), set(m.closed))
    was = answers(fm)
    plan_on = fm.copy()
    for i, frac, util, close in plan:
        gid = c.gpus[i].id
        if close:
            plan_on.close([gid])
        elif plan_on.free(gid) >= frac:
            plan_on.take([(gid, frac)], util)
    assert answers(fm) == was
    # and the copy answers as a map built afresh with its tenants would
    fresh = FreeMap(c, [], max_tenants=4, use=plan_on.use, band=_two_bands, empty_band=2)
    fresh.close(plan_on.closed)
    assert answers(plan_on)[:5] == answers(fresh)[:5]


@given(st.lists(st.tuples(st.integers(0, 11), st.sampled_from([0.1, 0.3, 0.45]),
                          st.sampled_from([0.2, 0.6, 1.0])), max_size=20),
       st.integers(2, 4), st.sampled_from([0.05, 0.2, 0.5]), st.sampled_from([None, 0, 1]),
       st.sets(st.integers(0, 11), max_size=4))
def test_a_gang_searched_over_several_bands_goes_to_the_node_with_fewest_fitting(
        takes, k, f, band, refused):
    # the rule gang_place documents: of the nodes where k GPUs fit, the one with the
    # fewest that fit, ties to the node whose first fitting GPU in the search (bands in
    # order, tightest first) comes first in the cluster; its first k GPUs in that order
    c = make_cluster(3, 4)
    fm = _two_band_map(c, takes)
    no = {c.gpus[i].id for i in refused}

    def ok(gid):
        return gid not in no
    scan = sorted((g for g in c.gpus if fm.free(g.id) >= f - 1e-9 and fm.tenants(g.id) < 4
                   and (ok(g.id) if band is None else (fm._band.get(g.id, 2) >= band and (
                       fm._band.get(g.id, 2) > band or ok(g.id))))),
                  key=lambda g: (fm._band.get(g.id, 2), fm.free(g.id), c.gpus.index(g)))
    by_node = {}
    for g in scan:
        by_node.setdefault(g.node, []).append(g.id)
    whole = [ids for ids in by_node.values() if len(ids) >= k]
    got = fm.gang_place(k, f, ok, min_band=band)
    if whole and len(fm._searched(band)) == 1:
        # one group searched: the scan may stop soon after the first node collects k
        # (gang_place's lookahead), so the node is one where k fit, its first k taken
        first = {ids[0]: ids for ids in whole}
        assert got is not None and got[0][0] in first
        assert got == [(gid, f) for gid in first[got[0][0]][:k]]
    elif whole:
        index = {g.id: i for i, g in enumerate(c.gpus)}
        want = min(whole, key=lambda ids: (len(ids), index[ids[0]]))
        assert got == [(gid, f) for gid in want[:k]]
    else:
        nodes = {g.id: g.node for g in c.gpus}
        assert got is None or len({nodes[gid] for gid, _ in got}) > 1


def _by_room(m):
    """The used up GPUs of ``m`` as (free, order, GPU), most free room first, then order."""
    return sorted(((m.free(g), m.order[g], g) for g in m.use if g in m.gpus),
                  key=lambda k: (-k[0], k[1]))


@given(st.lists(st.tuples(st.integers(0, 5), st.sampled_from([0.1, 0.3, 0.45]),
                          st.booleans()), max_size=16),
       st.lists(st.tuples(st.integers(0, 5), st.sampled_from([0.05, 0.2, 0.5]),
                          st.sampled_from(["take", "release", "close"])), max_size=12))
def test_the_used_gpus_by_free_room_are_kept_on_the_map_and_read_by_its_copies(before, plan):
    # fgs keeps the map between rounds (changed by set_use) and plans each round on a copy
    c = make_cluster(2, 3)
    base = FreeMap(c, [], max_tenants=4, rank_used=True)
    held: list[tuple[str, float]] = []
    for n, (i, frac, release) in enumerate(before):
        if release and held:
            base.release([held.pop(i % len(held))])
        elif base.free(c.gpus[i].id) >= frac:
            base.take([(c.gpus[i].id, frac)])
            held.append((c.gpus[i].id, frac))
        if n % 3 == 2:   # read between rounds of changes
            assert list(base.most_free_used()) == _by_room(base)
    assert list(base.most_free_used()) == _by_room(base)
    was = _by_room(base)
    copy = base.copy()
    for i, frac, what in plan:
        gid = c.gpus[i].id
        if what == "close":
            copy.close([gid])
        elif what == "release" and copy.tenants(gid):
            copy.release([(gid, frac)])
        elif what == "take" and copy.free(gid) >= frac:
            copy.take([(gid, frac)])
    want = _by_room(copy)
    got = copy.most_free_used()
    copy.take([(c.gpus[0].id, 0.01)])   # a change after the call is not read
    assert list(got) == want
    assert list(base.most_free_used()) == was
    fresh = FreeMap(c, [], max_tenants=4, use=copy.use, rank_used=True)
    assert list(fresh.most_free_used()) == _by_room(copy)
    assert FreeMap(c, [], max_tenants=4).most_free_used() is None   # not asked to rank


@given(st.lists(st.tuples(st.integers(0, 5), st.sampled_from([0.1, 0.2, 0.3]),
                          st.sampled_from([0.1, 0.3, 0.5 + 1e-10, 0.45, 0.7, 1.0])), max_size=20),
       st.sampled_from([0.0, 0.3, 0.5, 0.55, 0.7, 1.0, 1.2]), st.sampled_from([0.05, 0.2]),
       st.sets(st.integers(0, 5), max_size=2))
def test_a_search_skipping_the_bands_below_the_one_under_a_tenants_finds_what_asking_all_does(
        takes, u, frac, own):
    # fgs moves a victim to the tightest GPU that stays calm beside it (``MakeRoom.relocate``):
    # below the band under its search band no GPU is calm (a band is 1/BANDS wide, far
    # more than EPS), but in that band one within EPS is (room 0.5 - 1e-10 for u = 0.5)
    from tfgshare.policies.fgs.fit import room_band
    from tfgshare.policies.fgs.order import BANDS, search_band
    from tfgshare.policies.placement import EPS

    def band(use):   # utilisation room: what the tenants leave of one GPU's
        return room_band(1.0 - use.util)
    c = make_cluster(2, 3)
    fm = FreeMap(c, [], max_tenants=4, band=band, empty_band=BANDS)
    for i, f, util in takes:
        if fm.free(c.gpus[i].id) >= f:
            fm.take([(c.gpus[i].id, f)], util)

    def calm(gid):
        use = fm.use.get(gid)
        return use is None or u <= 1.0 - use.util + EPS
    own = {c.gpus[i].id for i in own}
    everywhere = fm.best_fit(frac, own, calm)
    assert fm.best_fit(frac, own, calm, skip_below=search_band(u) - 1) == everywhere
