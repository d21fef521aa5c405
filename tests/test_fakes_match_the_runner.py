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
    import bench_coordinator
    assert fields(bench_coordinator.sample_event("j1")) == set(rp.EVENTS["sample"])
