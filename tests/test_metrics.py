"""Metrics on hand-made job records and timelines (values computed by hand)."""

import json
import math

import pytest

from tfgshare.metrics import (JobRecord, Timeline, compute_report, format_table, ratios,
                              size_class, table_rows)


def _records():
    return [
        JobRecord("a", 1, submit_time=0, first_start=0, finish_time=10, waited_s=0,
                  predicted_total_s=8, actual_total_s=10),
        JobRecord("b", 1, submit_time=0, first_start=10, finish_time=20, waited_s=10,
                  predicted_total_s=10, actual_total_s=10),
        # queued 10 s, ran, suspended 5 s, ran again: waited 15 s in all
        JobRecord("c", 4, submit_time=5, first_start=15, finish_time=45, waited_s=15,
                  suspends=1, resumes=1, move_cost_s=3),
        JobRecord("d", 16, submit_time=30),  # never finished
    ]


def _timeline():
    # (time, allocated GPUs, effective GPUs, queued jobs, device GPUs, busy GPUs)
    return [(0, 1, 0.5, 1, 0.6, 1), (10, 1, 0.8, 0, 0.9, 2), (20, 0.5, 0.5, 0, 0.5, 1),
            (50, 2, 2, 0, 2, 2)]


def test_jct_statistics_by_hand():
    rep = compute_report(_records(), _timeline(), num_gpus=2)
    assert (rep.jobs, rep.finished) == (4, 3)
    assert rep.jct_mean == pytest.approx((10 + 20 + 40) / 3)
    assert rep.jct_median == 20
    # p95 of [10, 20, 40]: rank 0.95 * 2 = 1.9 -> 20 + 0.9 * 20
    assert rep.jct_p95 == pytest.approx(38)
    assert rep.jct_by_size == {"1": 15, "2-4": 40}
    assert rep.jobs_by_size == {"1": 2, "2-4": 1}


def test_waiting_time_counts_queued_and_suspended_time():
    rep = compute_report(_records(), _timeline(), num_gpus=2)
    assert rep.wait_mean == pytest.approx((0 + 10 + 15) / 3)


def test_allocated_and_effective_utilisation_are_time_averaged_to_last_finish():
    rep = compute_report(_records(), _timeline(), num_gpus=2)
    # run ends at 45: allocated 10*1 + 10*1 + 25*0.5 GPU-s over 45 s on 2 GPUs
    assert rep.util_allocated == pytest.approx(32.5 / 45 / 2)
    assert rep.util_effective == pytest.approx((5 + 8 + 12.5) / 45 / 2)
    assert rep.queue_mean == pytest.approx(10 / 45)
    assert rep.makespan == 45
    # device: 10*0.6 + 10*0.9 + 25*0.5 GPU-s; busy: 10*1 + 10*2 + 25*1 GPU-s
    assert rep.util_device == pytest.approx(27.5 / 45 / 2)
    assert rep.util_device_busy == pytest.approx(27.5 / 55)
    explicit = compute_report(_records(), _timeline(), num_gpus=2, end=20)
    assert explicit.util_allocated == pytest.approx(20 / 20 / 2)


def test_moves_and_prediction_error():
    rep = compute_report(_records(), _timeline(), num_gpus=2)
    assert (rep.suspends, rep.resumes, rep.migrations, rep.move_cost_s) == (1, 1, 0, 3)
    assert rep.pred_error_mean == pytest.approx(0.1)
    assert rep.pred_error_median == pytest.approx(0.1)


def test_ratios_against_baseline_and_table():
    fifo = compute_report(_records(), [(0, 1, 0.5)], num_gpus=2)
    recs = _records()
    for r in recs[:3]:
        r.finish_time = r.submit_time + (r.finish_time - r.submit_time) / 2   # JCTs halved
    better = compute_report(recs, [(0, 2, 1.5)], num_gpus=2)
    rat = ratios(better, fifo)
    assert rat["jct_ratio"] == pytest.approx(2)
    assert rat["util_ratio"] == pytest.approx(2)
    assert rat["eff_util_ratio"] == pytest.approx(3)
    table = format_table({"fifo": fifo, "fgs": better})
    lines = table.splitlines()
    assert lines[0].split()[0] == "policy" and lines[4].startswith("JCT: ")   # the legend
    assert len(format_table({"fifo": fifo, "fgs": better}, legend=False).splitlines()) == 4
    assert lines[3].split()[0] == "fgs" and lines[3].split()[-3:] == ["2.00", "2.00", "3.00"]
    rows = table_rows({"fifo": fifo, "fgs": better})
    assert rows[1]["policy"] == "fgs" and rows[1]["jct_ratio"] == pytest.approx(2)
    assert rows[0]["jct_by_size[1]"] == pytest.approx(15)
    json.dumps(rows)  # plain data


def test_empty_run_and_bad_input():
    rep = compute_report([JobRecord("x", 1, submit_time=0)], [], num_gpus=1)
    assert rep.finished == 0 and math.isnan(rep.jct_mean)
    assert rep.as_dict()["jct_mean"] is None
    with pytest.raises(ValueError, match="num_gpus"):
        compute_report([], [], num_gpus=0)
    with pytest.raises(ValueError, match="before the last"):
        Timeline.from_points([(5, 1, 1), (4, 1, 1)])
    with pytest.raises(ValueError, match="num_gpus"):
        size_class(0)


def test_timeline_point_at_same_time_replaces_last():
    tl = Timeline()
    tl.add(0, 1, 1)
    tl.add(0, 2, 1)
    tl.add(10, 0, 0)
    assert len(tl) == 2
    assert tl.time_average(10)["allocated"] == pytest.approx(2)


def test_job_account_closes_waits_holds_and_moves_as_they_happen():
    from tfgshare.metrics import JobAccount
    a = JobAccount(submit_time=0.0)
    a.begin_wait(0.0)
    a.begin_hold(10.0)                 # queued 10 s
    a.note_prediction(50.0, 14.0)      # predicted after 4 s of running
    a.begin_move(20.0)                 # suspend asked at 20
    a.suspends += 1
    a.end_hold(22.0)                   # saved and gone at 22: the suspend cost 2 s
    a.begin_wait(22.0)
    a.resumes += 1
    a.begin_hold(30.0)                 # suspended 8 s
    a.begin_move(30.0)
    a.end_move(33.0)                   # trains again 3 s after its resume
    a.end_hold(60.0)
    a.end(60.0)
    assert (a.waited_s, a.run_time_s, a.move_cost_s) == (18.0, 42.0, 5.0)
    assert a.first_start == 10.0 and a.actual_after_prediction_s() == 38.0
    rec = JobRecord.of("j", 2, a, now=60.0)
    assert rec.jct == 60.0 and rec.actual_total_s == 38.0 and rec.num_gpus == 2
    # an open account is closed at the moment of the record, the account untouched
    b = JobAccount(submit_time=0.0)
    b.begin_wait(0.0)
    rec = JobRecord.of("k", 1, b, now=7.0, finished=False)
    assert rec.waited_s == 7.0 and rec.jct is None and b.waited_s == 0.0


def test_held_share_counts_the_context_reserve_and_kernel_share_caps_at_one():
    from tfgshare.metrics import held_share, kernel_share
    assert held_share(1 - 300 / 16000, 300, 16000) == pytest.approx(1.0)
    assert held_share(0.25, 400, 16000) == pytest.approx(0.275)
    assert kernel_share([(0.5, 0.8), (0.3, 0.5)]) == pytest.approx(0.55)
    assert kernel_share([(0.9, 0.9), (0.9, 0.9)]) == 1.0
    assert kernel_share([]) == 0.0
