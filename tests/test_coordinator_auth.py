"""CurveZMQ authentication and job ownership, with real sockets on loopback."""

from __future__ import annotations

import os
import stat
import time

import pytest
import zmq.auth

from coordinator_fakes import CoordinatorThread, FakeAgent
from tfgshare import keys
from tfgshare import schema as s
from tfgshare.client.api import AuthFailed, Client, Refused
from tfgshare.coordinator.server import Coordinator, CoordinatorConfig


def secret(keys_dir, name):
    return keys_dir / "issued" / name / f"{name}.key_secret"


@pytest.fixture
def keyed(tmp_path):
    """A keyed coordinator (keys beside its state), users alice and bob, admin root, agent n1/n2."""
    keys_dir = tmp_path / "keys"
    assert keys.main(["--keys-dir", str(keys_dir), "init"]) == 0
    for name, role in (("alice", "user"), ("bob", "user"), ("root", "admin"),
                       ("n1", "agent"), ("n2", "agent")):
        keys.add(keys_dir, name, role)
    ct = CoordinatorThread(tmp_path / "state.db")
    agent = FakeAgent(ct.address, "n1", gpus=((0, 16384), (1, 16384)), key=secret(keys_dir, "n1"))
    assert agent.register().TYPE == "ok"
    clients = {name: Client(ct.address, timeout_s=5, key=str(secret(keys_dir, name)))
               for name in ("alice", "bob", "root")}
    yield ct, agent, clients, keys_dir
    for c in clients.values():
        c.close()
    agent.close()
    ct.close()


def test_key_files_are_private_and_listed(keyed, capsys):
    _, _, _, keys_dir = keyed
    for path in (keys_dir / "coordinator.key_secret", secret(keys_dir, "alice")):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert keys.main(["--keys-dir", str(keys_dir), "list"]) == 0
    out = capsys.readouterr().out
    assert "alice\tuser" in out and "root\tadmin" in out and "n1\tagent" in out
    assert keys.main(["--keys-dir", str(keys_dir), "add-user", "alice"]) == 2
    assert "already registered" in capsys.readouterr().err


def test_user_cannot_touch_another_users_job_but_admin_can(keyed):
    ct, agent, clients, _ = keyed
    (jid,) = clients["alice"].submit([s.JobSpec("lenet")])
    agent.wait_command(s.StartJob, jid)
    before = ct.coord.cluster.jobs[jid].to_record()
    for call in (lambda c: c.cancel(jid), lambda c: c.suspend(jid), lambda c: c.resume(jid),
                 lambda c: c.migrate(jid, "n1:1")):
        with pytest.raises(Refused, match=f"not your job: {jid} belongs to alice") as refused:
            call(clients["bob"])
        assert refused.value.code is s.ErrorCode.FORBIDDEN
    assert ct.coord.cluster.jobs[jid].to_record() == before
    assert clients["bob"].job(jid)["owner"] == "alice"      # status shows the owner
    assert clients["root"].cancel(jid)["state"] == "cancelling"


def test_unknown_and_revoked_keys_are_refused(keyed, tmp_path):
    ct, _, clients, keys_dir = keyed
    _, stranger = zmq.auth.create_certificates(str(tmp_path), "stranger")
    with Client(ct.address, timeout_s=5, key=stranger,
                server_key=str(keys_dir / "coordinator.key")) as c:
        with pytest.raises(Refused, match="unknown key") as refused:
            c.submit([s.JobSpec("lenet")])
        assert refused.value.code is s.ErrorCode.UNKNOWN_KEY
    assert not ct.coord.cluster.jobs
    assert ct.coord.metrics.registry.get_sample_value("tfgshare_bad_frames_total",
                                                      {"reason": "unknown_key"}) >= 1
    clients["alice"].jobs()
    assert keys.main(["--keys-dir", str(keys_dir), "revoke", "alice"]) == 0
    deadline = time.monotonic() + 5
    while True:     # the coordinator re-reads the keys on its next tick
        try:
            clients["alice"].jobs()
        except Refused as exc:
            assert "unknown key" in str(exc) and exc.code is s.ErrorCode.UNKNOWN_KEY
            break
        assert time.monotonic() < deadline, "revoked key still accepted"
        time.sleep(0.05)


def test_another_agent_key_cannot_take_over_a_node(keyed):
    ct, agent, clients, keys_dir = keyed
    (jid,) = clients["alice"].submit([s.JobSpec("lenet")])
    agent.wait_command(s.StartJob, jid)
    node = ct.coord.cluster.nodes["n1"]
    identity = node.identity
    thief = FakeAgent(ct.address, "n1", key=secret(keys_dir, "n2"))
    try:
        reply = thief.register()
        assert reply.TYPE == "error"
        assert "agent key 'n2' may register only node 'n2', not 'n1'" in reply.reason
        assert reply.code is s.ErrorCode.FORBIDDEN   # the agent stops: no retry helps
        assert node.identity == identity and ct.coord.cluster.jobs[jid].node == "n1"
        assert ct.coord.cluster.jobs[jid].state.value in ("sampling", "running")
        # a user key may not speak the agent protocol, an agent key not the client API
        user = FakeAgent(ct.address, "alice", key=secret(keys_dir, "alice"))
        try:
            reply = user.register()
            assert "may not send 'register'" in reply.reason
            assert reply.code is s.ErrorCode.FORBIDDEN
        finally:
            user.close()
        reply = thief.request(s.Submit(jobs=[s.JobSpec("lenet")]))
        assert reply.reason == "an agent key (n2) may not send 'submit'"
        assert reply.code is s.ErrorCode.FORBIDDEN
    finally:
        thief.close()


@pytest.mark.timeout(120)    # a send that blocks forever fails here, not at the suite's 600 s
def test_client_without_a_key_or_with_the_wrong_coordinator_key_gets_a_clear_error(
        keyed, monkeypatch, tmp_path):
    ct, _, _, keys_dir = keyed
    monkeypatch.delenv("TFGSHARE_KEY", raising=False)
    t0 = time.monotonic()
    with Client(ct.address, timeout_s=10) as c:
        # asked again, too: the failed handshake can leave the socket no connection to queue on
        for _ in range(3):
            with pytest.raises(AuthFailed, match="requires a CurveZMQ key"):
                c.jobs()
    assert time.monotonic() - t0 < 5
    other, _ = zmq.auth.create_certificates(str(tmp_path), "other_coordinator")
    t0 = time.monotonic()
    with Client(ct.address, timeout_s=10, key=str(secret(keys_dir, "alice")),
                server_key=other) as c:
        with pytest.raises(AuthFailed, match="is this coordinator's public key"):
            c.jobs()
    assert time.monotonic() - t0 < 5


def test_open_coordinator_only_on_loopback(tmp_path):
    with pytest.raises(ValueError, match="needs CurveZMQ keys"):
        Coordinator(CoordinatorConfig(state=tmp_path / "s.db", bind="tcp://0.0.0.0:5999"))
    assert keys.is_loopback("tcp://127.0.0.1:5555") and keys.is_loopback(f"ipc://{tmp_path / 'x'}")
    assert not keys.is_loopback("tcp://*:5555") and not keys.is_loopback("tcp://10.0.0.2:1")


def test_agent_without_a_key_stops_with_a_clear_error(keyed, tmp_path, monkeypatch):
    from tfgshare.agent.gpus import VirtualGpus, parse_virtual_gpus
    from tfgshare.agent.node import Agent, AgentConfig
    ct, _, _, _ = keyed
    monkeypatch.delenv("TFGSHARE_KEY", raising=False)
    cfg = AgentConfig(coordinator=ct.address, node="n9", work_dir=tmp_path / "work",
                      register_retry_s=0.1)
    agent = Agent(cfg, VirtualGpus(parse_virtual_gpus("1x16GiB")))
    t0 = time.monotonic()
    assert agent.run(should_stop=lambda: time.monotonic() - t0 > 5) == 1
    assert "secure handshake" in agent.fatal and "n9" not in ct.coord.cluster.nodes


def test_status_command_shows_the_owner(keyed, capsys):
    from tfgshare.cli import main as tfgshare
    ct, agent, clients, keys_dir = keyed
    (jid,) = clients["alice"].submit([s.JobSpec("lenet")])
    key = ["--coordinator", ct.address, "--key", str(secret(keys_dir, "bob"))]
    assert tfgshare(["status", *key]) == 0
    out = capsys.readouterr().out
    assert "OWNER" in out and "alice" in out
    assert tfgshare(["cancel", *key, jid]) == 1
    assert f"not your job: {jid} belongs to alice" in capsys.readouterr().err


def test_a_key_registered_while_the_coordinator_runs_is_known_at_once(tmp_path):
    keys.init(tmp_path)
    registry = keys.Registry(tmp_path)
    out = keys.add(tmp_path, "late", "agent")
    public, _ = zmq.auth.load_certificate(str(out / "late.key"))
    assert registry.get(public.decode()) == keys.Identity("late", "agent")
    assert registry.get("no such key") is None


def test_metrics_port_off_loopback_needs_the_bearer_token_keys_init_made(tmp_path):
    import urllib.error
    import urllib.request
    keys_dir = tmp_path / "keys"
    config = dict(state=tmp_path / "state.db", metrics_port=0, metrics_host="0.0.0.0")
    with pytest.raises(ValueError, match="needs a bearer token: run `tfgshare keys"):
        Coordinator(CoordinatorConfig(**config))
    keys.init(keys_dir)
    token_file = keys_dir / keys.METRICS_TOKEN
    assert stat.S_IMODE(os.stat(token_file).st_mode) == 0o600
    coord = Coordinator(CoordinatorConfig(**config))
    assert coord.metrics_token == token_file.read_text().strip()
    # served here on loopback (tests stay on loopback) with the token the coordinator chose
    port = coord.metrics.serve(0, "127.0.0.1", coord.metrics_token)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        for headers in ({}, {"Authorization": "Bearer wrong"},
                        {"Authorization": coord.metrics_token}):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5)
            assert refused.value.code == 401
        scrape = urllib.request.Request(
            url, headers={"Authorization": f"Bearer {coord.metrics_token}"})
        assert b"tfgshare_jobs" in urllib.request.urlopen(scrape, timeout=5).read()
    finally:
        coord.metrics.close()
        coord.store.close()
    # on loopback (the default host) no token is asked
    assert Coordinator(CoordinatorConfig(tmp_path / "s2.db", metrics_port=0)).metrics_token is None
