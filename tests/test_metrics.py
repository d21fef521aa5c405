"""Metrics on hand-made job records and timelines (values computed by hand)."""

import json
import math

import pytest

from tfgshare.metrics import (JobRecord, Timeline, compute_report, format_table, ratios,
                              size_class, table_rows)


def _records():
    return [
        JobRecord("a", 1, submit=0, first_start=0, finish=10, waited_s=0,
                  predicted_total_s=8, actual_total_s=10),
        JobRecord("b", 1, submit=0, first_start=10, finish=20, waited_s=10,
                  predicted_total_s=10, actual_total_s=10),
        # queued 10 s, ran, suspended 5 s, ran again: waited 15 s in all
        JobRecord("c", 4, submit=5, first_start=15, finish=45, waited_s=15,
                  suspends=1, resumes=1, move_cost_s=3),
        JobRecord("d", 16, submit=30),  # never finished
    ]


def _timeline():
    # (time, allocated GPUs, effective GPUs, queued jobs)
    return [(0, 1, 0.5, 1), (10, 1, 0.8, 0), (20, 0.5, 0.5, 0), (50, 2, 2, 0)]


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
        r.finish = r.submit + (r.finish - r.submit) / 2   # every JCT halved
    better = compute_report(recs, [(0, 2, 1.5)], num_gpus=2)
    rat = ratios(better, fifo)
    assert rat["jct_ratio"] == pytest.approx(2)
    assert rat["util_ratio"] == pytest.approx(2)
    assert rat["eff_util_ratio"] == pytest.approx(3)
    table = format_table({"fifo": fifo, "fgs": better})
    lines = table.splitlines()
    assert lines[0].split()[0] == "policy" and len(lines) == 4
    assert lines[3].split()[0] == "fgs" and lines[3].split()[-3:] == ["2.00", "2.00", "3.00"]
    rows = table_rows({"fifo": fifo, "fgs": better})
    assert rows[1]["policy"] == "fgs" and rows[1]["jct_ratio"] == pytest.approx(2)
    assert rows[0]["jct_by_size[1]"] == pytest.approx(15)
    json.dumps(rows)  # plain data


def test_empty_run_and_bad_input():
    rep = compute_report([JobRecord("x", 1, submit=0)], [], num_gpus=1)
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
    assert tl.time_average(10)[0] == pytest.approx(2)
