"""Bad frames get an error (oversized ones are dropped) and the coordinator keeps serving."""

from __future__ import annotations

import json
import logging
import time

import pytest

from coordinator_fakes import CoordinatorThread, FakeAgent
from tfgshare import schema as s
from tfgshare.client.api import Client
from tfgshare.coordinator.logs import Throttled
from tfgshare.policies.registry import get_policy


@pytest.fixture
def coord(tmp_path):
    ct = CoordinatorThread(tmp_path / "state.db", policy=get_policy("fifo"))
    yield ct
    ct.close()


def ask_raw(client: Client, data: bytes) -> dict | None:
    client.send_raw(data)
    reply = client.recv_raw(timeout_s=2.0)
    return None if reply is None else json.loads(reply)


def still_serving(address: str) -> bool:
    with Client(address, timeout_s=3.0) as other:
        return other.jobs() == []


@pytest.mark.parametrize("data, words, code", [
    (b"{this is not json", "malformed JSON", "bad_frame"),
    (json.dumps({"v": 7, "type": "status", "id": "r1"}).encode(), "unsupported version 7",
     "bad_frame"),
    (json.dumps({"v": 1, "type": "reboot", "id": "r1"}).encode(), "unknown message type",
     "bad_frame"),
    (json.dumps({"v": 1, "type": "status", "id": "r1", "job": 3}).encode(), "expected str",
     "invalid"),
    (json.dumps({"v": 1, "type": "heartbeat", "id": "r1", "node": "n1"}).encode(),
     "unauthenticated type 'heartbeat'", "not_registered"),
    (json.dumps({"v": 1, "type": "job_exit", "id": "r1", "node": "n1", "job": "j1",
                 "attempt": 1, "exit_code": 0}).encode(), "unauthenticated type 'job_exit'",
     "not_registered"),
    (json.dumps({"v": 1, "type": "start_job", "id": "r1", "job": "j1", "attempt": 1,
                 "spec": {"model_name": "vgg_16"}, "fragments": [], "train_dir": "/x"}).encode(),
     "command the coordinator sends", "unsupported"),
])
def test_bad_frame_gets_an_error_and_others_are_still_served(coord, data, words, code):
    with Client(coord.address) as client:
        reply = ask_raw(client, data)
        assert reply is not None and reply["type"] == "error", reply
        assert words in reply["reason"] and reply["code"] == code
        if b'"id": "r1"' in data:
            assert reply["id"] == "r1"
        # the same client is still served too
        assert client.jobs() == []
    assert still_serving(coord.address)


def test_oversized_frame_is_dropped_and_others_are_still_served(coord):
    with Client(coord.address) as client:
        big = json.dumps({"v": 1, "type": "logs", "id": "big",
                          "job": "x" * (s.MAX_MESSAGE_BYTES + 10)}).encode()
        assert ask_raw(client, big) is None
    assert still_serving(coord.address)


def test_an_agent_must_register_before_it_reports(coord):
    agent = FakeAgent(coord.address, "n1")
    try:
        reply = agent.request(s.Heartbeat(node="n1"))
        assert isinstance(reply, s.Error) and "unauthenticated" in reply.reason
        assert reply.code is s.ErrorCode.NOT_REGISTERED
        assert isinstance(agent.register(), s.Ok)
        assert isinstance(agent.heartbeat(), s.Ok)
        # an agent may only speak for the node it registered as
        reply = agent.request(s.Heartbeat(node="n2"))
        assert isinstance(reply, s.Error) and "registered as node 'n1'" in reply.reason
        assert reply.code is s.ErrorCode.NOT_REGISTERED   # the agent re-joins on it
    finally:
        agent.close()


@pytest.mark.parametrize("command", ["coordinator", "agent"])
def test_the_old_token_flag_is_an_error_that_points_to_keys(capsys, tmp_path, command):
    from tfgshare.agent.node import main as agent_main
    from tfgshare.coordinator.server import main as coordinator_main
    main = coordinator_main if command == "coordinator" else agent_main
    with pytest.raises(SystemExit) as exit_:
        main(["--state", str(tmp_path / "s.db"), "--token", "sesame"] if command ==
             "coordinator" else ["--node", "n1", "--token", "sesame"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--token was removed" in err and "tfgshare keys init" in err
    assert not (tmp_path / "s.db").exists()


def test_register_refuses_duplicate_gpus(coord):
    agent = FakeAgent(coord.address, "n1", gpus=((0, 100), (0, 100)))
    try:
        reply = agent.register()
        assert isinstance(reply, s.Error) and "duplicate GPU indices" in reply.reason
        assert reply.code is s.ErrorCode.INVALID
    finally:
        agent.close()


def test_a_flood_of_junk_frames_is_counted_in_full_and_logged_a_line_per_reason(coord, caplog):
    """Each bad frame is counted by reason; the log holds one line per reason per interval,
    and the ones held back are told (with their number) once the interval has passed."""
    caplog.set_level(logging.WARNING, logger="tfgshare.coordinator")
    now = [1000.0]
    coord.coord.bad_frames.log.clock = lambda: now[0]   # frozen: the flood is one interval
    junk = {"malformed_json": b"{junk",
            "bad_version": json.dumps({"v": 7, "type": "status", "id": "r"}).encode(),
            "bad_type": json.dumps({"v": 1, "type": "reboot", "id": "r"}).encode(),
            "invalid_field": json.dumps({"v": 1, "type": "status", "id": "r",
                                         "job": 3}).encode()}
    each = 500
    registry = coord.coord.metrics.registry

    def counted(reason: str) -> float:
        return registry.get_sample_value("tfgshare_bad_frames_total", {"reason": reason})

    with Client(coord.address) as client:
        for _ in range(each):
            for data in junk.values():
                client.send_raw(data)
        deadline = time.monotonic() + 60
        while (sum(counted(r) for r in junk) < each * len(junk)
               and time.monotonic() < deadline):
            time.sleep(0.05)
        assert {r: counted(r) for r in junk} == {r: each for r in junk}
        assert counted("too_large") == 0 and counted("unknown_key") == 0   # shown at 0
        assert client.jobs() == []                  # the flooding client is still served
    assert still_serving(coord.address)
    lines = [r.getMessage() for r in caplog.records if "bad frame" in r.getMessage()]
    assert len(lines) == len(junk), lines           # one per reason, not one per frame
    now[0] += 11.0                                  # the interval passes: the next tick tells
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and sum("held back" in r.getMessage()
                                              for r in caplog.records) < len(junk):
        time.sleep(0.05)
    held = {r.args[1]: r.args[0] for r in caplog.records if "held back" in r.getMessage()}
    assert held == {r: each - 1 for r in junk}


def test_the_bad_frame_log_is_bounded_per_reason_and_tells_what_it_held_back(caplog):
    caplog.set_level(logging.WARNING, logger="tfgshare.coordinator")
    now = [0.0]
    log = Throttled(every_s=10.0, clock=lambda: now[0])
    for t in range(100):                            # 100 s of 10 frames a second, 2 reasons
        for i in range(10):
            now[0] = t + i / 10
            log.warning("a", "frame %d", i)
            log.warning("b", "frame %d", i)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 20                         # one per reason per 10 s
    assert lines[:2] == ["frame 0", "frame 0"]
    assert lines[2] == "frame 0 (and 99 more a lines held back over 10 s)"
    log.flush()                                     # within the interval: nothing yet
    assert len(caplog.records) == 20
    now[0] = 100.0                                  # 10 s after the last lines
    log.flush()
    assert [r.getMessage() for r in caplog.records[20:]] == [
        "99 more a lines held back over 10 s", "99 more b lines held back over 10 s"]


def test_every_request_type_has_its_handler_and_commands_and_replies_have_none(tmp_path):
    from tfgshare.coordinator.config import CoordinatorConfig
    from tfgshare.coordinator.server import Coordinator

    coord = Coordinator(CoordinatorConfig(state=tmp_path / "s.db"))
    requests = set(s.MESSAGES) - set(s.REPLY_TYPES) - set(s.COMMAND_TYPES)
    assert set(coord.handlers) == requests
    # a client request is answered by its handler: nodes of an empty cluster
    coord.handle([b"peer"], s.encode(s.Nodes()))
    (_, reply), = coord._out
    assert reply.TYPE == "ok" and reply.fields["nodes"] == []
    coord.store.close()
