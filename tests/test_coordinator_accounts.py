"""One job account on both sides: a live run and a simulated run of one scenario agree.

The live side is the real coordinator driven in this thread on a settable
clock, its agent messages sent as a node agent sends them (the runner's events
at the times the simulator's model gives them); the simulated side is the
simulator. Both run the same scripted policy on one GPU. Also: state files of
the format before the account still load.
"""

from __future__ import annotations

import json
import sqlite3
import time

import pytest

from philly.jobs import TraceJob
from tfgshare import schema as s
from tfgshare.coordinator.cluster import LiveJob
from tfgshare.coordinator.exporter import job_record, run_report
from tfgshare.coordinator.server import Coordinator, CoordinatorConfig
from tfgshare.metrics import JobRecord, Timeline, compute_report
from tfgshare.policies.base import Fragment, JobState, Policy, Start, Suspend
from tfgshare.sim.cluster import load_cluster
from tfgshare.sim.config import SimConfig
from tfgshare.sim.engine import simulate
from tfgshare.sim.profiles import load_profiles

MEMORY_MB = 24576
RESERVE_MB = 300.0
STEP, STARTUP, UTIL = 1.0, 10.0, 0.6
PARAMS = 1_000_000
CKPT_MB = PARAMS * 8 / 2**20
SAVE = 2.0                       # checkpoint save = restore, seconds
PROFILE = f"""
models:
  lenet:
    params: {PARAMS}
    startup_s: {STARTUP}
    batches:
      32: {{step_time_s: {STEP}, memory_mb: 1000, gpu_util: {UTIL}}}
"""
WHOLE = (Fragment("n0:0", 1 - RESERVE_MB / MEMORY_MB),)   # the GPU less the context reserve
A_STEPS, B_STEPS, B_ARRIVES = 100, 10, 50.0
DEVICE_READ = UTIL               # what the agent's telemetry reads while a job trains alone


class Script(Policy):
    """The same decisions on both sides, from the job states alone."""

    name = "script"

    def decide(self, now, cluster, jobs):
        by = {j.id: j for j in jobs}
        a, b = by.get("j1"), by.get("j2")      # the coordinator's ids, in submit order
        acts = []
        if a is not None and a.state is JobState.QUEUED:
            acts.append(Start("j1", WHOLE, sample_only=True))
        elif a is not None and a.state is JobState.SAMPLED:
            acts.append(Start("j1", WHOLE))
        if b is not None and b.state is JobState.QUEUED:
            if a is not None and a.state is JobState.RUNNING:
                acts.append(Suspend("j1"))
            acts.append(Start("j2", WHOLE))       # live: refused until a's runner is gone
        elif b is None and a is not None and a.state is JobState.SUSPENDED:
            acts.append(Start("j1", WHOLE))
        return acts


class LiveRun:
    """The coordinator in this thread on a clock the test sets; one fake node agent."""

    AGENT, CLIENT = b"agent", b"client"

    def __init__(self, tmp_path) -> None:
        self.now = 0.0
        self.coord = Coordinator(
            CoordinatorConfig(state=tmp_path / "state.db", node_timeout=1e9,
                              reserve_mb=RESERVE_MB),
            policy=Script(), clock=lambda: self.now)
        self.attempts: dict[str, int] = {}
        self.commands: list[s.Message] = []
        self.send(self.AGENT, s.Register(node="n0", gpus=[s.GpuInfo(0, "virtual", MEMORY_MB,
                                                                    True)]))

    def send(self, peer: bytes, msg: s.Message) -> s.Message | None:
        """Handle one frame as the event loop does; keep the commands, ack them; the reply."""
        self.coord.handle([peer], s.encode(msg))
        return self._flush()

    def _flush(self) -> s.Message | None:
        self.coord.step()
        out, self.coord._out = self.coord._out, []     # what the loop would send now
        reply = None
        for _envelope, m in out:
            if isinstance(m, (s.Ok, s.Error)):
                reply = m
                continue
            self.commands.append(m)
            if isinstance(m, s.StartJob):
                self.attempts[m.job] = m.attempt
            self.coord.handle([self.AGENT], s.encode(s.reply_ok(m)))
        if out:
            self.coord.step()
            self.coord._out.clear()
        return reply

    def at(self, t: float) -> None:
        """Move the clock to ``t``."""
        self.now = t

    def round(self) -> None:
        """A scheduling round, then the usage point of this moment."""
        self.coord.schedule(self.now)
        self._flush()
        self.coord.tick(self.now)
        self._flush()

    def submit(self, spec: s.JobSpec) -> str:
        return self.send(self.CLIENT, s.Submit(jobs=[spec])).fields["job_ids"][0]

    def event(self, job: str, name: str, held_s: float = 0.0, **fields) -> None:
        """A runner event, written ``held_s`` before now (its agent held it that long)."""
        self.send(self.AGENT, s.JobEvent(node="n0", job=job, attempt=self.attempts[job],
                                         event={"event": name, "time": self.now - held_s,
                                                **fields}, held_s=held_s))

    def exit(self, job: str, code: int) -> None:
        self.send(self.AGENT, s.JobExit(node="n0", job=job, attempt=self.attempts[job],
                                        exit_code=code))

    def telemetry(self, util: float, *running: str) -> None:
        """A heartbeat: the GPU's utilisation and the runners on it."""
        self.send(self.AGENT, s.Heartbeat(node="n0", gpus=[s.GpuTelemetry(0, util, 1000.0)],
                                          jobs=[s.JobTelemetry(j, 0, {0: 1000.0})
                                                for j in running]))


def live_run(tmp_path) -> tuple[dict[str, JobRecord], dict, LiveRun]:
    """The scenario live: the runner's events at the times the simulator's model gives."""
    run = LiveRun(tmp_path)
    spec = dict(model_name="lenet", batch_size=32)
    a = run.submit(s.JobSpec(max_number_of_steps=A_STEPS, **spec))
    run.round()                                                # a: sample on the GPU
    assert isinstance(run.commands[-1], s.StartJob) and run.commands[-1].sample_only
    t = STARTUP
    run.at(t)
    run.event(a, "started", global_step=0, restored=False, device="cpu",
              memory_fraction=WHOLE[0].fraction)
    run.telemetry(DEVICE_READ, a)                              # a samples alone
    run.round()
    sampled = 10                                # 10 % of 100 steps: 2 warm-up, 8 sampled
    run.at(t + sampled * STEP)
    run.event(a, "sample", warmup_steps=2, sampled_steps=8, step_time_mean_s=STEP,
              step_time_std_s=0.0, images_per_sec=32.0, peak_memory_mb=1000.0,
              memory_source="process_rss_peak", predicted_remaining_s=(A_STEPS - sampled) * STEP,
              predicted_total_s=A_STEPS * STEP, window_start=t + 2 * STEP, cpu_util=UTIL)
    run.event(a, "progress", step=sampled, loss=1.0, step_time_s=STEP, images_per_sec=32.0,
              predicted_remaining_s=(A_STEPS - sampled) * STEP)
    t += sampled * STEP + SAVE                                 # its checkpoint, then it exits
    run.at(t)
    run.event(a, "checkpoint", step=sampled, path="ckpt", seconds=SAVE, size_mb=CKPT_MB)
    run.event(a, "suspended", step=sampled)
    run.exit(a, 75)
    run.telemetry(0.0)
    run.round()                                                # a: started for good
    t += STARTUP + SAVE                                        # start-up and restore
    run.at(t)
    run.event(a, "started", global_step=sampled, restored=True, device="cpu",
              memory_fraction=WHOLE[0].fraction)
    run.telemetry(DEVICE_READ, a)
    run.round()
    run.at(B_ARRIVES)
    done_a = sampled + (B_ARRIVES - t) / STEP
    b = run.submit(s.JobSpec(max_number_of_steps=B_STEPS, **spec))
    assert b == "j2"
    run.round()                                                # suspend a; b must wait
    assert isinstance(run.commands[-1], s.SuspendJob)
    t = B_ARRIVES + SAVE
    run.at(t)
    run.event(a, "suspended", step=int(done_a))
    run.exit(a, 75)
    run.telemetry(0.0)
    run.round()                                                # b starts
    t += STARTUP
    run.at(t)
    run.event(b, "started", global_step=0, restored=False, device="cpu",
              memory_fraction=WHOLE[0].fraction)
    run.telemetry(DEVICE_READ, b)
    run.round()
    t += B_STEPS * STEP
    run.at(t)
    run.event(b, "finished", step=B_STEPS, loss=1.0)
    run.exit(b, 0)
    run.telemetry(0.0)
    run.round()                                                # a resumes
    t += STARTUP + SAVE
    run.at(t)
    run.event(a, "started", global_step=int(done_a), restored=True, device="cpu",
              memory_fraction=WHOLE[0].fraction)
    run.telemetry(DEVICE_READ, a)
    run.round()
    t += (A_STEPS - done_a) * STEP
    run.at(t)
    run.event(a, "finished", step=A_STEPS, loss=1.0)
    run.exit(a, 0)
    run.round()
    jobs = run.coord.cluster.jobs
    records = {j: job_record(job, t) for j, job in jobs.items()}
    summary = run_report(run.coord.cluster, run.coord.metrics, "script", t)["summary"]
    return records, summary, run


def sim_run(tmp_path):
    path = tmp_path / "lenet.yaml"
    path.write_text(PROFILE)
    jobs = [TraceJob("j1", 0.0, 1, float(A_STEPS), model="lenet", batch_size=32,
                     total_steps=A_STEPS),
            TraceJob("j2", B_ARRIVES, 1, float(B_STEPS), model="lenet", batch_size=32,
                     total_steps=B_STEPS)]
    config = SimConfig(storage_mb_s=CKPT_MB / SAVE, step_noise=0.0, memory_noise=0.0,
                       tick_s=None, check=True)
    res = simulate(load_cluster(f"1x1:{MEMORY_MB}"), jobs, load_profiles(path), Script(),
                   config)
    return {r.id: r for r in res.records}, res.report


def test_live_and_simulated_runs_fill_the_same_record_with_the_same_meaning(tmp_path):
    live, summary, _run = live_run(tmp_path)
    sim, report = sim_run(tmp_path)
    assert all(type(r) is JobRecord for r in [*live.values(), *sim.values()])
    for name in ("j1", "j2"):
        lv, sm = live[name], sim[name]
        assert (lv.suspends, lv.resumes, lv.migrations) == (sm.suspends, sm.resumes,
                                                            sm.migrations)
        assert lv.finish_time == pytest.approx(sm.finish_time)
        assert lv.move_cost_s == pytest.approx(sm.move_cost_s)
        # live predictions count the final save, which the simulator does not model,
        # and a resume's checkpoint read (as long as the save), which its prior leaves out
        assert lv.predicted_total_s == (None if sm.predicted_total_s is None
                                        else sm.predicted_total_s + 2 * SAVE)
        # the one difference is the models': the simulator frees a suspended job's
        # fragment at the request, the live runner holds it until its save is done
        assert lv.waited_s == pytest.approx(sm.waited_s, abs=SAVE + 1e-6)
    a = sim["j1"]
    assert (a.suspends, a.resumes) == (1, 1)
    assert a.move_cost_s == pytest.approx(SAVE + STARTUP + SAVE)   # save; start-up + restore
    # predicted when the sampling run has exited: 90 steps and one more start-up
    assert a.predicted_total_s == pytest.approx(90 * STEP + STARTUP)
    assert live["j1"].waited_s == pytest.approx(sim["j1"].waited_s - SAVE)
    assert live["j1"].actual_total_s == pytest.approx(sim["j1"].actual_total_s + SAVE)
    # the same placements hold the same memory; the same training the same compute
    assert summary["util_allocated"] == pytest.approx(report.util_allocated)
    assert report.util_allocated == pytest.approx(1.0)    # the GPU held throughout, whole
    trained = 7 + 21 + 10 + 74                             # seconds someone trained
    assert report.util_effective == pytest.approx(UTIL * trained / 158)
    assert summary["util_effective"] == pytest.approx(report.util_effective)
    # device utilisation: live from the agent's telemetry, which reads a busy GPU
    # while a's runner ends its step and saves (50-52 s); simulated = effective
    assert summary["util_device"] == pytest.approx(DEVICE_READ * (trained + SAVE) / 158)
    assert report.util_device == pytest.approx(report.util_effective)
    assert summary["util_device_busy"] == pytest.approx(summary["util_device"])
    assert (summary["suspends"], summary["resumes"]) == (report.suspends, report.resumes)


# ---- the state file format from before the one account --------------------------

OLD_RECORD = json.loads(
    '{"id": "j1", "seq": 1, "spec": {"model_name": "lenet", "name": "", "dataset_name": '
    '"synthetic", "dataset_dir": null, "batch_size": 32, "max_number_of_steps": 100, '
    '"optimizer": null, "learning_rate": null, "learning_rate_decay_type": null, '
    '"weight_decay": null, "image_size": null, "num_classes": null, "num_gpus": 1, '
    '"memory_fraction": "auto", "priority": 0, "extra": []}, "submit_time": 100.0, '
    '"state": "suspended", "attempt": 2, "node": null, "fragments": [], "sample_only": false, '
    '"steps_done": 40, "sample": {"step_time_s": 0.1, "peak_memory_mb": 500.0, "gpu_util": '
    '0.7, "co_tenants": 0}, "predicted_remaining_s": 6.0, "predicted_total_s": 9.0, '
    '"run_at_prediction_s": 1.5, "pinned": false, "cancel_requested": false, "migrate_to": '
    'null, "move_started": null, "first_start": 101.0, "finish_time": null, "last_start": '
    'null, "run_time_s": 5.0, "attained_service_s": 5.0, "waited_s": 3.0, "last_wait_start": '
    '110.0, "suspends": 1, "resumes": 0, "migrations": 0, "move_cost_s": 0.5, "retries": 0, '
    '"reason": "suspended to its checkpoint"}')


def test_a_job_record_of_the_old_format_loads_with_its_account():
    job = LiveJob.from_record(OLD_RECORD)
    assert job.state is JobState.SUSPENDED and job.steps_done == 40
    assert (job.submit_time, job.first_start, job.waited_s, job.last_wait_start) == (
        100.0, 101.0, 3.0, 110.0)
    assert (job.suspends, job.move_cost_s, job.predicted_total_s) == (1, 0.5, 9.0)
    assert job.waited_until(120.0) == 13.0 and job.run_until(120.0) == 5.0
    again = LiveJob.from_record(json.loads(json.dumps(job.to_record())))
    assert again.to_record() == job.to_record()


def test_an_old_state_file_with_a_four_column_timeline_loads(tmp_path):
    path = tmp_path / "state.db"
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE jobs (id TEXT PRIMARY KEY, seq INTEGER NOT NULL, data TEXT NOT NULL);"
        "CREATE TABLE timeline (time REAL, allocated REAL, effective REAL, queued REAL);")
    db.execute("INSERT INTO jobs VALUES (?, ?, ?)", ("j1", 1, json.dumps(OLD_RECORD)))
    db.executemany("INSERT INTO timeline VALUES (?, ?, ?, ?)",
                   [(100.0, 0.0, 0.0, 1.0), (101.0, 1.0, 0.5, 0.0)])
    db.commit()
    db.close()
    coord = Coordinator(CoordinatorConfig(state=path, node_timeout=1e9), clock=lambda: 200.0)
    try:
        assert coord.cluster.jobs["j1"].suspends == 1
        tl = coord.metrics.timeline
        assert list(tl.times) == [100.0, 101.0] and list(tl.device) == [0.0, 0.0]
        coord.tick(200.0)           # new points carry device utilisation and busy GPUs
        assert len(coord.store.load_timeline()[-1]) == 6
        rep = compute_report([job_record(coord.cluster.jobs["j1"], 200.0)],
                             Timeline.from_points(coord.store.load_timeline()), 1, end=200.0)
        assert rep.jobs == 1 and rep.util_allocated == pytest.approx(99 / 100)
    finally:
        coord.store.close()


def test_the_usage_pass_is_spaced_by_its_own_cost(tmp_path, monkeypatch):
    """A tick adds a timeline point each second while the pass is cheap; a pass that takes
    c seconds runs again only c / USAGE_SHARE later (a big cluster's loop stays free)."""
    t = [1000.0]
    coord = Coordinator(CoordinatorConfig(state=tmp_path / "state.db", node_timeout=1e9),
                        clock=lambda: t[0])
    try:
        for _ in range(3):
            t[0] += 1.0
            coord.tick(t[0])
        assert list(coord.metrics.timeline.times)[-3:] == [1001.0, 1002.0, 1003.0]
        update = coord.life.metrics.update

        def slow_update(*args):
            time.sleep(0.02)               # at least 1 s of the loop at USAGE_SHARE 0.02
            return update(*args)
        monkeypatch.setattr(coord.life.metrics, "update", slow_update)
        for _ in range(5):
            t[0] += 0.2
            coord.tick(t[0])
        assert list(coord.metrics.timeline.times)[-1] == pytest.approx(1003.2)
        t[0] += 5.0
        coord.tick(t[0])
        assert list(coord.metrics.timeline.times)[-1] == pytest.approx(1009.0)
    finally:
        coord.store.close()
