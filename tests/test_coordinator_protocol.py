"""Bad frames get an error (oversized ones are dropped) and the coordinator keeps serving."""

from __future__ import annotations

import json

import pytest

from coordinator_fakes import CoordinatorThread, FakeAgent
from tfgshare import schema as s
from tfgshare.client.api import Client
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


@pytest.mark.parametrize("data, words", [
    (b"{this is not json", "malformed JSON"),
    (json.dumps({"v": 7, "type": "status", "id": "r1"}).encode(), "unsupported version 7"),
    (json.dumps({"v": 1, "type": "reboot", "id": "r1"}).encode(), "unknown message type"),
    (json.dumps({"v": 1, "type": "status", "id": "r1", "job": 3}).encode(), "expected str"),
    (json.dumps({"v": 1, "type": "heartbeat", "id": "r1", "node": "n1"}).encode(),
     "unauthenticated type 'heartbeat'"),
    (json.dumps({"v": 1, "type": "job_exit", "id": "r1", "node": "n1", "job": "j1",
                 "attempt": 1, "exit_code": 0}).encode(), "unauthenticated type 'job_exit'"),
    (json.dumps({"v": 1, "type": "start_job", "id": "r1", "job": "j1", "attempt": 1,
                 "spec": {"model_name": "vgg_16"}, "fragments": [], "train_dir": "/x"}).encode(),
     "command the coordinator sends"),
])
def test_bad_frame_gets_an_error_and_others_are_still_served(coord, data, words):
    with Client(coord.address) as client:
        reply = ask_raw(client, data)
        assert reply is not None and reply["type"] == "error", reply
        assert words in reply["reason"]
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
        assert isinstance(agent.register(), s.Ok)
        assert isinstance(agent.heartbeat(), s.Ok)
        # an agent may only speak for the node it registered as
        reply = agent.request(s.Heartbeat(node="n2"))
        assert isinstance(reply, s.Error) and "registered as node 'n1'" in reply.reason
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
    finally:
        agent.close()
