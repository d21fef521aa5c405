"""The forecast's kept window of the oldest jobs answers exactly as a fresh scan does."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from tfgshare import schema as s
from tfgshare.coordinator import measures
from tfgshare.coordinator.server import Coordinator, CoordinatorConfig
from tfgshare.coordinator.window import WaitingWindow
from tfgshare.policies.base import JobState, SampleRecord
from tfgshare.policies.forecast import waiting_beside
from tfgshare.policies.prediction import AHEAD_SCAN

SAMPLE = SampleRecord(step_time_s=0.2, peak_memory_mb=3000.0, co_tenants=0, gpu_util=0.5)


@dataclass(eq=False)
class Job:
    """What the window and the scan read of a job."""

    id: str
    seq: int
    state: JobState = JobState.QUEUED
    sample: SampleRecord | None = None
    predicted_remaining_s: float | None = None


def test_kept_window_equals_a_scan_through_random_changes():
    rng = random.Random(7)
    active: dict[str, Job] = {}
    window = WaitingWindow(active)
    seq = 0

    def add() -> None:
        nonlocal seq
        seq += 1
        job = active[f"j{seq}"] = Job(f"j{seq}", seq)
        window.note(job)

    for _ in range(AHEAD_SCAN + 200):
        add()
    states = [JobState.QUEUED, JobState.SAMPLED, JobState.SUSPENDED, JobState.RUNNING,
              JobState.SAMPLING]
    for step in range(4000):
        jobs = list(active.values())
        job = jobs[min(len(jobs) - 1, int(rng.expovariate(1 / 600)))]   # mostly the oldest
        if rng.random() < 0.2:                        # or about the window's last one
            job = jobs[AHEAD_SCAN - 1 + rng.randint(-1, 1)]
        what = rng.random()
        if what < 0.3:
            job.state = rng.choice(states)
        elif what < 0.5:
            job.sample = SAMPLE
        elif what < 0.8:   # a prediction, sometimes the same value again, sometimes none
            job.predicted_remaining_s = rng.choice(
                [None, job.predicted_remaining_s, rng.uniform(1, 1e4) / 3])
        elif what < 0.9:
            del active[job.id]
            job.state = JobState.FINISHED
        else:
            add()
            job = jobs[-1]
        window.note(job)
        for probe in rng.sample(list(active.values()), 3):
            assert window.read(probe) == waiting_beside(active.values(), probe,
                                                        measures.run_left_s), step


def test_a_live_coordinator_reads_the_window_as_a_scan_would(tmp_path, monkeypatch):
    """Sampling runs end while jobs start, finish and progress, with more active jobs
    than the window holds: every read the forecast makes equals a fresh scan."""
    coord = Coordinator(CoordinatorConfig(state=tmp_path / "s.db", policy="fgs"))
    cluster, reads = coord.cluster, []
    read = cluster.window.read

    def checked(job):
        got = read(job)
        assert got == waiting_beside(cluster.active.values(), job, measures.run_left_s)
        reads.append(got)
        return got

    monkeypatch.setattr(cluster.window, "read", checked)

    def send(peer: bytes, msg: s.Message) -> None:
        coord.handle([peer], s.encode(msg))

    def turn() -> list[tuple[bytes, s.Message]]:
        coord.step()
        out = [(e[0], m) for e, m in coord._out if not isinstance(m, (s.Ok, s.Error))]
        coord._out.clear()
        return out

    for n in range(4):
        send(f"p{n}".encode(), s.Register(node=f"n{n}", gpus=[
            s.GpuInfo(i, "V100", 16384, False) for i in range(4)]))
    send(b"client", s.Submit(jobs=[s.JobSpec("inception_v3", max_number_of_steps=100)]
                             * (AHEAD_SCAN + 300)))
    turn()
    rng, running = random.Random(3), {}
    for _ in range(60):
        coord.schedule(time.time())
        for peer, m in turn():
            node = coord.peers[peer]
            if isinstance(m, s.StartJob) and m.sample_only:
                send(peer, s.JobEvent(node=node, job=m.job, attempt=m.attempt, event={
                    "event": "sample", "time": time.time(), "warmup_steps": 5,
                    "sampled_steps": 20, "step_time_mean_s": rng.uniform(0.1, 0.5),
                    "step_time_std_s": 0.0, "images_per_sec": 10.0, "peak_memory_mb": 3000.0,
                    "memory_source": "gpu_allocator_peak", "predicted_remaining_s": 20.0,
                    "predicted_total_s": 25.0, "window_start": time.time() - 4.0,
                    "cpu_util": 0.5, "cpu_wait_s": 0.0, "cpu_run_s": 1.0,
                    "cluster_runnable": 0.0}))
                send(peer, s.JobExit(node=node, job=m.job, attempt=m.attempt, exit_code=75))
            elif isinstance(m, s.StartJob):
                running[m.job] = (peer, node, m.attempt)
        for job in rng.sample(sorted(running), min(3, len(running))):
            peer, node, attempt = running.pop(job)
            send(peer, s.JobEvent(node=node, job=job, attempt=attempt, event={
                "event": "progress", "time": time.time(), "step": 50, "loss": 1.0,
                "step_time_s": 0.3, "images_per_sec": 10.0, "predicted_remaining_s": 15.0}))
            send(peer, s.JobExit(node=node, job=job, attempt=attempt,
                                 exit_code=0 if rng.random() < 0.7 else 75))
        turn()
    assert len(reads) > 100 and len(cluster.active) > AHEAD_SCAN
