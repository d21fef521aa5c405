"""fgs on hand-built clusters: sampling, sizing, shortest-first, aging, moves, caps."""

from dataclasses import replace

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tfgshare.policies.base import JobState, Migrate, Start, Suspend
from tfgshare.policies.builders import make_cluster, make_job
from tfgshare.policies.validate import validate
from tfgshare.policies.registry import get_policy

WHOLE = 1 - 300 / 16000
H = 3600.0


def fgs(**kw):
    return get_policy("fgs", **kw)


def check(pol, now, c, jobs):
    acts = pol.decide(now, c, jobs)
    assert validate(acts, c, jobs, max_tenants=pol.max_cotenants) == []
    assert pol.decide(now, c, list(reversed(jobs))) == acts   # deterministic
    return acts


def test_new_jobs_are_sampled_on_a_best_fit_half_gpu():
    # the former placement, still available with these parameters
    c = make_cluster(1, 2)
    jobs = [make_job("r", on={"n0:1": 0.4}, memory_mb=5000, gpu_util=0.3),
            make_job("new", submit=1)]
    (a,) = check(fgs(sample_on_idle=False, sample_memory_mb=None), 10, c, jobs)
    assert a == Start("new", a.fragments, sample_only=True)
    assert a.fragments[0].gpu == "n0:1" and a.fragments[0].fraction == 0.5


def test_new_jobs_sample_on_an_idle_gpu_when_asked():
    c = make_cluster(1, 2)
    jobs = [make_job("r", on={"n0:1": 0.4}, memory_mb=5000, gpu_util=0.3),
            make_job("new", submit=1)]
    (a,) = check(fgs(sample_on_idle=True, sample_memory_mb=5000), 10, c, jobs)
    assert a == Start("new", a.fragments, sample_only=True)
    assert a.fragments[0].gpu == "n0:0" and a.fragments[0].fraction == pytest.approx(5000 / 16000)
    # best fit instead puts it beside the busy tenant
    (b,) = check(fgs(sample_memory_mb=5000), 10, c, jobs)
    assert b.fragments[0].gpu == "n0:1"


def test_without_an_idle_gpu_sampling_goes_to_the_least_loaded_one():
    c = make_cluster(1, 2)
    jobs = [make_job("busy", on={"n0:0": 0.2}, memory_mb=3000, gpu_util=0.9),
            make_job("light", on={"n0:1": 0.2}, memory_mb=3000, gpu_util=0.2),
            make_job("new", submit=1)]
    (a,) = check(fgs(sample_on_idle=True, sample_memory_mb=6000), 10, c, jobs)
    assert a.sample_only and a.fragments[0].gpu == "n0:1"
    assert a.fragments[0].fraction == pytest.approx(6000 / 16000)


def test_default_sampling_fragment_holds_a_paper_model_on_a_12gb_gpu():
    c = make_cluster(1, 2, memory_mb=12288)
    jobs = [make_job("r", on={"n0:0": 0.01}, memory_mb=100, gpu_util=0.1),
            make_job("s", on={"n0:1": 0.01}, memory_mb=100, gpu_util=0.1),
            make_job("new", submit=1)]
    # no GPU is idle and none has room for the sampling fragment
    assert check(fgs(), 10, c, jobs) == []
    (a,) = check(fgs(), 10, c, jobs[1:])
    f = a.fragments[0]
    assert f.gpu == "n0:0" and f.fraction * 12288 >= 11500   # vgg_16 at batch 64


def test_fragment_is_sized_from_sampled_memory_with_headroom():
    c = make_cluster(1, 1)
    jobs = [make_job("j", state=JobState.SAMPLED, memory_mb=4000)]
    (a,) = check(fgs(headroom=0.25), 10, c, jobs)
    assert not a.sample_only and a.fragments[0].fraction == pytest.approx(5000 / 16000)


def test_shortest_predicted_remaining_first():
    c = make_cluster(1, 1)
    jobs = [make_job("long", submit=0, state=JobState.SAMPLED, memory_mb=9000, total_steps=5000),
            make_job("short", submit=1, state=JobState.SAMPLED, memory_mb=9000, total_steps=50),
            make_job("mid", submit=2, state=JobState.SUSPENDED, memory_mb=9000,
                     predicted_s=100.0, last_start=0, last_wait_start=5)]
    (a,) = check(fgs(), 10, c, jobs)
    assert a.job == "short"


def test_promotion_wait_is_when_starving_begins():
    """The bound the prediction's forecast reads is the one ``starving`` applies."""
    pol = fgs(max_wait_ratio=2, max_wait_s=4 * H, promote_floor_s=600)
    for steps in (100, 10_000, 10 ** 6):               # under the floor, the ratio, the cap
        job = make_job("j", submit=0, state=JobState.SAMPLED, memory_mb=1000,
                       total_steps=steps)
        bound = pol.promotion_wait_s(job, job.predicted_remaining_s)
        assert not pol.starving(job, bound - 1)
        assert pol.starving(job, bound + 1)
    assert pol.promotion_wait_s(job, 100.0) == 600       # the floor
    assert pol.promotion_wait_s(job, 1000.0) == 2000     # twice the prediction


def test_starving_bounds_floor_ratio_and_absolute():
    pol = fgs(max_wait_ratio=2, max_wait_s=4 * H, promote_floor_s=600)
    short = make_job("s", submit=0, state=JobState.SAMPLED, memory_mb=1000, total_steps=100)
    assert not pol.starving(short, 500)           # 10 s job, but under the floor
    assert pol.starving(short, 601)
    big = make_job("b", submit=0, state=JobState.SAMPLED, memory_mb=1000,
                   total_steps=10 ** 6)               # ~28 h predicted
    assert not pol.starving(big, 3 * H)
    assert pol.starving(big, 4 * H + 1)
    resumed = make_job("r", submit=0, state=JobState.SUSPENDED, memory_mb=1000,
                       predicted_s=H, waited_s=H, last_start=2 * H, last_wait_start=3 * H)
    assert not pol.starving(resumed, 3 * H + 0.5 * H)   # 1.5 h in all
    assert pol.starving(resumed, 3 * H + 1.01 * H)      # 2.01 h > 2 x 1 h


def _crowded(now_started):
    """Two GPUs with a small job each; a starving 2-GPU job and a small newcomer wait."""
    c = make_cluster(1, 2)
    jobs = [make_job("a", submit=10, on={"n0:0": 0.3}, memory_mb=4000, gpu_util=0.3,
                     last_start=now_started),
            make_job("b", submit=11, on={"n0:1": 0.3}, memory_mb=4000, gpu_util=0.3,
                     last_start=now_started),
            make_job("big", submit=0, gpus=2, state=JobState.SAMPLED, memory_mb=15000,
                     total_steps=10 ** 6),
            make_job("small", submit=5 * H, state=JobState.SAMPLED, memory_mb=2000,
                     gpu_util=0.2, total_steps=10)]
    return c, jobs


def test_starving_large_job_gets_a_reservation_while_small_jobs_are_young():
    c, jobs = _crowded(now_started=5 * H - 100)
    pol = fgs(min_run_s=300, max_wait_s=4 * H)
    assert pol.starving(jobs[2], 5 * H)
    assert check(pol, 5 * H, c, jobs) == []        # "small" would fit, but GPUs are reserved
    # without the aging bound the small job backfills at once
    (a,) = check(fgs(max_wait_s=100 * H, max_wait_ratio=100), 5 * H, c, jobs)
    assert a.job == "small"


def test_starving_large_job_suspends_small_jobs_after_min_run_time():
    c, jobs = _crowded(now_started=5 * H - 400)
    acts = check(fgs(min_run_s=300, max_wait_s=4 * H), 5 * H, c, jobs)
    assert acts[:2] == [Suspend("a"), Suspend("b")]
    assert acts[2].job == "big" and {f.gpu for f in acts[2].fragments} == {"n0:0", "n0:1"}
    assert acts[2].fragments[0].fraction == pytest.approx(WHOLE)
    assert len(acts) == 3


def test_promoted_job_moves_a_small_job_when_there_is_room_elsewhere():
    c = make_cluster(1, 2)
    jobs = [make_job("a", submit=1, on={"n0:0": 0.3}, memory_mb=4000, gpu_util=0.3,
                     last_start=0),
            make_job("b", submit=2, on={"n0:1": 0.5}, memory_mb=7000, gpu_util=0.3,
                     last_start=0),
            make_job("p", submit=0, state=JobState.SAMPLED, memory_mb=12000, total_steps=10 ** 6)]
    acts = check(fgs(max_wait_s=4 * H), 5 * H, c, jobs)
    assert acts[0] == Migrate("a", acts[0].fragments) and acts[0].fragments[0].gpu == "n0:1"
    assert acts[1].job == "p" and acts[1].fragments[0].gpu == "n0:0"


def test_a_job_still_to_sample_is_promoted_and_room_is_made_for_its_sampling():
    # no GPU has room for the sampling fragment: without promotion the wide job
    # waits for as long as small jobs keep the GPUs (tests/test_sim_properties)
    c = make_cluster(1, 2)
    jobs = [make_job("a", submit=1, on={"n0:0": 0.5}, memory_mb=4000, gpu_util=0.3,
                     last_start=0),
            make_job("b", submit=2, on={"n0:1": 0.5}, memory_mb=4000, gpu_util=0.3,
                     last_start=0),
            make_job("wide", submit=0, gpus=2)]
    pol = fgs(max_wait_s=4 * H)
    assert check(pol, 3 * H, c, jobs) == []
    acts = check(pol, 5 * H, c, jobs)
    assert acts[:2] == [Suspend("a"), Suspend("b")]
    assert acts[2] == Start("wide", acts[2].fragments, sample_only=True) and len(acts) == 3
    assert sorted(f.gpu for f in acts[2].fragments) == ["n0:0", "n0:1"]


def _split():
    """Two GPUs, each 0.45 used; a 0.6 job fits in the total free room but on neither."""
    c = make_cluster(1, 2)
    jobs = [make_job("x", submit=1, on={"n0:0": 0.45}, memory_mb=6000, gpu_util=0.4,
                     last_start=0),
            make_job("y", submit=2, on={"n0:1": 0.45}, memory_mb=6000, gpu_util=0.4,
                     last_start=0),
            make_job("w", submit=3, state=JobState.SAMPLED, requested_fraction=0.6,
                     memory_mb=8000, gpu_util=0.4, total_steps=100)]
    return c, jobs


def test_consolidates_fragments_by_migration():
    c, jobs = _split()
    acts = check(fgs(), 500, c, jobs)      # w waited under the promotion floor
    assert len(acts) == 2
    m, s = acts
    assert isinstance(m, Migrate) and s.job == "w"
    assert m.fragments[0].gpu != s.fragments[0].gpu
    assert s.fragments[0].fraction == 0.6


def test_no_consolidation_when_off_or_tenants_just_started():
    c, jobs = _split()
    assert check(fgs(defrag=False), 500, c, jobs) == []
    assert check(fgs(min_run_s=2000), 500, c, jobs) == []
    # once w is promoted (waited past the floor, 100 x its 10 s), it makes room anyway
    acts = check(fgs(defrag=False), 1000, c, jobs)
    assert [type(a) for a in acts] == [Migrate, Start]


def test_cotenant_cap_and_slowdown_cap():
    c = make_cluster(1, 1)
    two = [make_job("a", on={"n0:0": 0.1}, memory_mb=1000, gpu_util=0.1),
           make_job("b", on={"n0:0": 0.1}, memory_mb=1000, gpu_util=0.1)]
    new = make_job("n", submit=1, state=JobState.SAMPLED, memory_mb=1000, gpu_util=0.1)
    assert [a.job for a in check(fgs(), 10, c, two + [new])] == ["n"]
    assert check(fgs(max_cotenants=2), 10, c, two + [new]) == []
    hot = [make_job("h", on={"n0:0": 0.3}, memory_mb=4000, gpu_util=0.9)]
    warm = make_job("w", submit=1, state=JobState.SAMPLED, memory_mb=4000, gpu_util=0.9)
    assert check(fgs(), 10, c, hot + [warm]) == []                   # 1.8 x 1.05 > 1.5
    assert len(check(fgs(slowdown_cap=2.0), 10, c, hot + [warm])) == 1


def test_busy_jobs_are_left_alone_and_bad_params_are_named():
    c = make_cluster(1, 1)
    jobs = [make_job("s", state=JobState.SAMPLING, on={"n0:0": 0.5}),
            make_job("p", submit=0, state=JobState.SAMPLED, memory_mb=15000, total_steps=10 ** 6)]
    acts = check(fgs(max_wait_s=4 * H), 10 * H, c, jobs)
    assert all(a.job != "s" for a in acts) and acts == []
    with pytest.raises(ValueError, match="slowdown_cap must be >= 1"):
        fgs(slowdown_cap=0.5)


def test_multi_gpu_job_is_packed_on_one_node():
    c = make_cluster(2, 2)
    jobs = [make_job("r", on={"n0:0": 0.3}, memory_mb=4000, gpu_util=0.2),
            make_job("g", submit=1, gpus=2, state=JobState.SAMPLED, memory_mb=4000,
                     gpu_util=0.2)]
    (a,) = check(fgs(), 10, c, jobs)
    assert [f.gpu for f in a.fragments] in (["n0:0", "n0:1"], ["n0:1", "n0:0"])


def test_every_threshold_is_a_named_parameter():
    from tfgshare.policies.registry import policy_params
    params = policy_params("fgs")
    for name in ("sample_steps", "headroom", "max_wait_ratio", "max_wait_s", "max_cotenants",
                 "slowdown_cap", "min_run_s", "defrag"):
        assert name in params
    assert fgs(max_cotenants=2).max_cotenants == 2


def test_jobs_that_were_starved_themselves_are_not_evicted():
    c, jobs = _crowded(now_started=5 * H - 400)
    jobs = [replace(j, waited_s=10 * H) if j.id in ("a", "b") else j for j in jobs]
    acts = check(fgs(min_run_s=300, max_wait_s=4 * H), 5 * H, c, jobs)
    assert not any(isinstance(a, (Suspend, Migrate)) for a in acts)


def test_far_reservations_leave_gpus_to_others():
    c, jobs = _crowded(now_started=5 * H - 100)     # a, b movable only in 200 s
    assert check(fgs(min_run_s=300, max_wait_s=4 * H), 5 * H, c, jobs) == []
    acts = check(fgs(min_run_s=300, max_wait_s=4 * H, reserve_horizon_s=100), 5 * H, c, jobs)
    assert [a.job for a in acts] == ["small"]


@pytest.mark.parametrize("shortcuts", [False, True])
def test_a_failed_consolidation_leaves_the_free_room_as_it_was_to_the_bit(shortcuts,
                                                                          monkeypatch):
    from tfgshare.policies.fgs.consolidate import Consolidate
    from tfgshare.policies.fgs.fit import RoundState
    from tfgshare.policies.fgs.policy import Fgs
    monkeypatch.setattr(Fgs, "shortcuts", shortcuts)
    c = make_cluster(1, 3)
    # n0:0: a small settled tenant and one that just started (may not move), so
    # moving the small one alone does not make room; n0:1 and n0:2: one big tenant
    # each, which fits nowhere else
    jobs = [make_job("a", submit=1, on={"n0:0": 0.07}, memory_mb=1000, gpu_util=0.2,
                     last_start=0),
            make_job("b", submit=2, on={"n0:0": 0.6}, memory_mb=9000, gpu_util=0.2,
                     last_start=450),
            make_job("c", submit=3, on={"n0:1": 0.65}, memory_mb=9500, gpu_util=0.2,
                     last_start=0),
            make_job("d", submit=4, on={"n0:2": 0.65}, memory_mb=9500, gpu_util=0.2,
                     last_start=0),
            make_job("w", submit=5, state=JobState.SAMPLED, requested_fraction=0.45,
                     memory_mb=6000, gpu_util=0.2, total_steps=100)]
    pol = fgs()
    memo = pol.new_memo()
    memo.sync(jobs)   # the tenants of each GPU, as decide() has them
    r = RoundState(pol, 500, c, jobs, memo=memo)
    before = (dict(r.free.use), {g: r.free.free(g) for g in r.free.gpus}, r.free.total_free())
    moved = []
    take = r.take
    r.take = lambda jid, util, placed: (moved.append(jid), take(jid, util, placed))
    Consolidate(r).consolidate(jobs[-1])
    # the full search tries to move a, then gives up; with its shortcuts it sees
    # that even without a, n0:0 would not have room (b may not move yet)
    assert moved == ([] if shortcuts else ["a"]) and r.actions == []
    assert (r.free.use, {g: r.free.free(g) for g in r.free.gpus}, r.free.total_free()) == before


@given(st.lists(st.sampled_from([0.0, 1e-17, 2e-17, 0.25, 0.25, 0.5, 0.7500000000000001, 0.75]),
                min_size=1, max_size=12),
       st.sampled_from([1.0, 0.5, 0.75]), st.sets(st.integers(0, 11)),
       st.sets(st.integers(0, 11), max_size=3))
@example([0.5, 0.0, 2e-17], 1.0, {1, 2}, set())   # g2 has more room, g1 comes first
def test_consolidation_tries_gpus_nearest_to_fitting_first_from_the_ranked_map(
        frees, f, movable, closed):
    # the used GPUs come most free room first; the tries go by (f - free, cluster order),
    # and f - free can tie for different free room (1.0 - 1e-17 == 1.0 - 2e-17)
    from tfgshare.policies.fgs.consolidate import Consolidate
    gids = [f"g{i}" for i in range(len(frees))]
    ranked = sorted(((x, i, g) for i, (x, g) in enumerate(zip(frees, gids))),
                    key=lambda k: (-k[0], k[1]))
    movable, closed = {f"g{i}" for i in movable}, {f"g{i}" for i in closed}
    want = [g for _, _, g in sorted((f - x, i, g) for x, i, g in ranked
                                    if g in movable and g not in closed and g != "g0")]
    got = Consolidate._by_room_short(iter(ranked), f, movable, closed, ["g0"])
    assert list(got) == want
