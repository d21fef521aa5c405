"""Predictions of the co-location a job runs in once newcomers stop sampling.

A just-sampled job is predicted from its step alone, the sharing beside the
sampling runs still to come and, after them, the co-location it is placed in
(``ColocationForecast.after_sampling``): the co-tenants the policy's packing
puts on its compute unit and, on virtual GPUs, the spare runners its node's
starts set importing TensorFlow on any core (every start hands one over and
starts another), measured beside sampling runs and scaled to the starts
expected while it runs. Before, it was predicted alone after the sampling: on
the 20-job batch the jobs sampled last ran 1.4-1.7x their step alone, one per
virtual GPU, while the other virtual GPU of the node ran the next jobs
(docs/benchmarks.md, issue 8).
"""

from __future__ import annotations

import pytest

from tfgshare import schema as s
from tfgshare.coordinator.server import Coordinator, CoordinatorConfig
from tfgshare.policies.base import Fragment, JobState, Policy, Start
from tfgshare.policies.fgs import Fgs
from tfgshare.policies.fifo import Fifo
from tfgshare.policies.prediction import (ColocationForecast, packed_tenants,
                                          start_spill_s)

from test_coordinator_accounts import MEMORY_MB, RESERVE_MB, LiveRun
from test_prediction_colocation import LENET_100, SAMPLE_FIELDS
from test_prediction_prior import RESUME


def test_packing_follows_the_policys_rule():
    fgs = Fgs()   # defaults: at most 4 tenants, no tenant slowed past 1.5x
    # two busy jobs would time-share a unit 2x: the packing keeps a busy job alone
    assert packed_tenants(1.0, 1.0, waiting=10, units=2, policy=fgs) == 0
    # light jobs fit together: 3 beside it (4 in all), when enough jobs wait ...
    assert packed_tenants(0.3, 0.3, waiting=10, units=2, policy=fgs) == 3
    # ... and no more than the waiting jobs spread over the units
    assert packed_tenants(0.3, 0.3, waiting=2, units=2, policy=fgs) == 1
    assert packed_tenants(0.3, 0.3, waiting=0, units=2, policy=fgs) == 0
    # a policy that does not share GPUs puts none beside it
    assert packed_tenants(0.3, 0.3, waiting=10, units=2, policy=Fifo()) == 0


def test_start_spill_is_runnable_seconds_per_start():
    # one process runnable per core beside a 12 s sampling window with 3 starts on its node
    assert start_spill_s(1.0, 12.0, 3) == pytest.approx(4.0)
    assert start_spill_s(None, 12.0, 3) is None      # not measured (GPUs, the simulator)
    assert start_spill_s(1.0, 12.0, 0) is None


def test_after_sampling_counts_the_starts_its_node_makes_while_it_runs():
    f = ColocationForecast()
    fgs = Fgs()
    # nothing measured (GPUs, the simulator) and a busy job alone on its unit: alone
    assert f.after_sampling(1.0, 20.0, 10, 2, 2, 20.0, fgs) == 1.0
    f.note_spill(start_spill_s(1.0, 12.0, 3), 1.0)   # 4 runnable-seconds a core per start
    # each unit starts a job every 20 s (the waiting jobs' runs, as this one's), its
    # own start included: 2 starts in its 20 s, 0.4 runnable on its core
    assert f.after_sampling(1.0, 20.0, 10, 2, 2, 20.0, fgs) == pytest.approx(1.4)
    # a shorter run sees the same starts per second (its own start is one of them)
    assert f.after_sampling(1.0, 10.0, 10, 2, 2, 20.0, fgs) == pytest.approx(1.4)
    # nothing left waiting: its own start (the spare it took is replaced) only
    assert f.after_sampling(1.0, 20.0, 0, 2, 2, 20.0, fgs) == pytest.approx(1.2)
    # no more than what was measured beside the sampling runs (1 a core)
    assert f.after_sampling(1.0, 2.0, 10, 2, 2, 2.0, fgs) == pytest.approx(2.0)
    # the load from outside is already in its step (outside_now): taken relative to it
    f.note_outside(2.0)
    assert f.after_sampling(1.0, 20.0, 10, 2, 2, 20.0, fgs) == pytest.approx(2.4 / 2.0)


def test_remaining_s_runs_the_rest_at_the_placed_co_location():
    f = ColocationForecast()
    # no sampling left: its start, then all its steps at 1.4x its step alone
    assert f.remaining_s(90, 0.2, 3.0, 0, 2, lambda left: 0.0,
                         after=1.4) == pytest.approx(3.0 + 90 * 0.2 * 1.4)
    f.note_sampling(20.0)
    f.note_sharing(2.0)
    # promoted at once beside 2 x 20 s of sampling runs (2x), 1.4x after them
    shared = 40.0 - 3.0
    assert f.remaining_s(300, 0.2, 3.0, 4, 2, lambda left: 0.0, after=1.4) == \
        pytest.approx(3.0 + shared + (300 - shared / 0.4) * 0.2 * 1.4)


class SampleTwo(Policy):
    """Samples j1 and j2 at once, one on each virtual GPU of the node; j3 waits."""

    name = "sample-two"

    def decide(self, now, cluster, jobs):
        by = {j.id: j for j in jobs}
        acts = []
        for job, gpu in (("j1", "n0:0"), ("j2", "n0:1")):
            if job in by and by[job].state is JobState.QUEUED:
                acts.append(Start(job, (Fragment(gpu, 0.3),), sample_only=True))
        return acts


class TwoGpuRun(LiveRun):
    """``LiveRun`` with one node of two one-core virtual GPUs (as the 20-job bench)."""

    def __init__(self, tmp_path) -> None:
        self.now = 0.0
        self.coord = Coordinator(
            CoordinatorConfig(state=tmp_path / "state.db", node_timeout=1e9,
                              reserve_mb=RESERVE_MB),
            policy=SampleTwo(), clock=lambda: self.now)
        self.attempts: dict[str, int] = {}
        self.commands: list[s.Message] = []
        self.send(self.AGENT, s.Register(node="n0", gpus=[
            s.GpuInfo(0, "virtual", MEMORY_MB, True), s.GpuInfo(1, "virtual", MEMORY_MB, True)]))


def test_live_prediction_counts_the_node_starts_while_it_runs(tmp_path):
    """j1 and j2 sample at once on the two virtual GPUs of one node, 0.5 s a step alone,
    each beside one process of the cluster per core (the spares importing TensorFlow
    that their two starts set off). j3 waits to sample. j1 is then predicted at its
    step alone slowed by the spill of its node's starts while it runs: 1 runnable a
    core for 14 s over 2 starts is 7 runnable-seconds per start; over its 47.36 s run
    (its 2.36 s resume, ``test_prediction_prior.RESUME``, and 90 steps of 0.5 s) its own
    start and the other unit's next start, 2/47.36 starts a second, 0.30 runnable on its
    core. Before: 2 + 90 x 0.5 = 47 s."""
    run = TwoGpuRun(tmp_path)
    ids = [run.submit(s.JobSpec(**LENET_100)) for _ in range(3)]
    run.round()
    assert run.attempts == {ids[0]: 1, ids[1]: 1}
    run.at(4.0)
    for job in ids[:2]:
        run.event(job, "started", global_step=0, restored=False, device="cpu",
                  memory_fraction=0.3)
        run.event(job, "start_phases", start_s=1.0, graph_s=2.0, graph_source="built",
                  restore_s=0.0, restored_from=None, first_step_s=1.0)
    run.at(14.0)
    for job in ids[:2]:
        run.event(job, "sample", step_time_mean_s=1.0, predicted_remaining_s=90.0,
                  predicted_total_s=100.0, window_start=6.0, cpu_wait_s=8 * 0.5,
                  cpu_run_s=8 * 0.5, cluster_runnable=1.0, **SAMPLE_FIELDS)
        run.event(job, "checkpoint", step=10, path="ckpt", seconds=0.5, size_mb=10.0)
        run.event(job, "suspended", step=10)
    forecast = run.coord.cluster.forecast
    assert forecast.spill == [pytest.approx(7.0), pytest.approx(7.0)]
    run.at(15.0)
    run.exit(ids[0], 75)
    run.round()
    job = run.coord.cluster.jobs[ids[0]]
    assert job.solo_step_s == pytest.approx(0.5)
    assert forecast.outside_now() == pytest.approx(1.0)
    run_s = RESUME + 90 * 0.5
    assert job.after_sampling == pytest.approx(1.0 + 7.0 * 2 / run_s)
    # (+ its final save, as long as its sampling run's: 0.5 s)
    assert job.predicted_total_s == pytest.approx(
        RESUME + 90 * 0.5 * (1.0 + 7.0 * 2 / run_s) + 0.5)
