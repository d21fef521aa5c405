"""The fakes the tests and benchmarks use send what the real runner sends, no more, no less.

The real runner's events carry exactly the fields of ``protocol.EVENTS``: its
``EventSink`` refuses anything else, and ``test_runner_train`` checks a real
run's events. Here every fake is checked against the same table.
"""

from __future__ import annotations

import sys
from pathlib import Path

from agent_fakes import write_fake_runner
from coordinator_fakes import sample_event
from tfgshare.runner import protocol as rp

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))


def fields(event: dict) -> set[str]:
    """An event's own fields (the sink adds the name, the time and the job id to each)."""
    return set(event) - {"event", "time", "job_id"}


def test_runner_event_table_is_what_the_event_sink_lets_through(tmp_path):
    from tfgshare.runner.events import EventSink
    sink = EventSink(tmp_path / "ev.jsonl", None, "j")
    sink.emit("sample", **sample_event())
    try:
        sink.emit("sample", **sample_event(), gpu_util=0.5)
    except (ValueError, TypeError) as exc:
        assert "gpu_util" in str(exc)
    else:
        raise AssertionError("the runner's event sink let a field it does not send through")


def test_fake_agent_sample_event_has_the_runners_fields():
    assert fields(sample_event()) == set(rp.EVENTS["sample"])


def test_fake_runner_events_have_the_runners_fields(tmp_path):
    import subprocess
    events = tmp_path / "ev.jsonl"
    cmd = write_fake_runner(tmp_path) + [
        "--model_name", "lenet", "--train_dir", str(tmp_path / "t"), "--events_file",
        str(events), "--max_number_of_steps", "10", "--step_time", "0.001", "--sample_only"]
    assert subprocess.run(cmd, timeout=30).returncode == rp.EXIT_SUSPENDED
    seen = list(rp.iter_events(events))
    assert {e["event"] for e in seen} >= {"started", "progress", "sample", "checkpoint",
                                          "suspended"}
    for e in seen:
        assert fields(e) == set(rp.EVENTS[e["event"]]), e


def test_coordinator_benchmark_sample_event_has_the_runners_fields():
    import agent_load
    assert fields(agent_load.sample_event("j1")) == set(rp.EVENTS["sample"])


def test_benchmark_agents_send_what_the_agent_and_its_runners_send():
    """The load generator's agents: each runner event with the runner's fields, in the
    runner's order; the exit codes; a heartbeat with every GPU and every runner."""
    import time
    from tfgshare import schema as s
    from agent_load import SAVE_S, START_S, SimAgents
    agents = SimAgents("tcp://127.0.0.1:9", 1, 2, virtual=False, step_s=0.1)
    sent: list[s.Message] = []
    agents._send = lambda sock, msg: sent.append(msg)
    sock = agents.socks["node0000"]
    spec = s.JobSpec("inception_v3", max_number_of_steps=40)

    def start(attempt, sample_only, gpus=(0,), job="j1"):
        sent.clear()
        agents._on("node0000", sock, s.StartJob(
            job=job, attempt=attempt, spec=spec, train_dir="/ck/j1", sample_only=sample_only,
            fragments=[s.FragmentSpec(i, 0.5) for i in gpus]))
        assert isinstance(sent[0], s.Ok) and sent[0].fields["pid"] > 0
        return time.monotonic()

    def script(until):
        agents.run_due(until)
        out = []
        for m in sent[1:]:
            if isinstance(m, s.JobEvent):
                assert fields(m.event) == set(rp.EVENTS[m.event["event"]]), m.event
                out.append((m.event["event"], m.event.get("step", m.event.get("global_step"))))
            elif isinstance(m, s.JobExit):
                out.append(("exit", m.exit_code))
        return out

    t0 = start(1, sample_only=True)              # a sampling run: 5 warm-up + 20 sampled steps
    assert script(t0 + 100) == [("started", 0), ("start_phases", None), ("progress", 10),
                                ("progress", 20), ("sample", 25), ("checkpoint", 25),
                                ("stop_phases", None), ("suspended", 25), ("exit", 75)]
    t0 = start(2, sample_only=False, gpus=(0, 1))   # resumed from its checkpoint to the end
    agents.run_due(t0 + START_S + 0.25)
    agents.heartbeat("node0000", t0 + START_S + 0.25)
    (beat,) = [m for m in sent if isinstance(m, s.Heartbeat)]
    assert [g.index for g in beat.gpus] == [0, 1] and beat.gpus[0].memory_used_mb > 0
    (tel,) = beat.jobs
    assert tel.job == "j1" and tel.step == 27 and set(tel.gpu_memory_mb) == {0, 1}
    assert all(mb <= 0.5 * 16384 for mb in tel.gpu_memory_mb.values())
    assert [e for e in script(t0 + 100) if e[0] != "heartbeat"] == [
        ("started", 25), ("start_phases", None), ("progress", 30), ("progress", 40),
        ("checkpoint", 40), ("finished", 40), ("exit", 0)]
    assert agents.finished == 1 and not agents.runners
    t0 = start(1, sample_only=False, job="j2")   # asked to suspend: a step and a save later
    agents.run_due(t0 + START_S + 0.35)
    agents._on("node0000", sock, s.SuspendJob(job="j2", attempt=1))
    (save, step), *end = script(time.monotonic() + 0.1 + SAVE_S)[-4:]
    assert save == "checkpoint" and end == [("stop_phases", None), ("suspended", step),
                                            ("exit", 75)]
    start(1, sample_only=False, job="j3")        # two runners share GPU 0: each steps at
    t0 = start(1, sample_only=False, job="j4")   # half its speed
    agents.run_due(t0 + START_S + 0.5)
    assert agents.runners["j3"].step_s == agents.runners["j4"].step_s == 0.2
    agents.close()
