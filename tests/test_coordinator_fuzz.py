"""Bad input never hurts anyone else: random and mutated frames against a running coordinator.

A keyed coordinator runs in a thread with one agent (n1) and two jobs of alice's.
Hypothesis makes a few thousand frames and the test throws them at it from bob (a user), from an agent
key that registered no node (n2) and from an unknown key: random bytes, random
JSON, deep nesting, huge strings, wrong versions, unknown types, mutated valid
frames and valid messages from the wrong peer. Then the coordinator must still
answer, no stored job may have changed, the agent's node is still its own, and
its memory has stayed within a bound.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time

import psutil
import zmq
import zmq.auth
from hypothesis import HealthCheck, given, settings, strategies as st

from coordinator_fakes import CoordinatorThread, FakeAgent
from tfgshare import keys
from tfgshare import schema as s
from tfgshare.client.api import Client
from tfgshare.coordinator.logs import log

# batches of up to 8 frames: a few seconds; more with TFGSHARE_FUZZ_EXAMPLES=2000
EXAMPLES = int(os.environ.get("TFGSHARE_FUZZ_EXAMPLES", "150"))
RSS_BOUND_MB = 64


def _stored_jobs(state) -> dict[str, str]:
    db = sqlite3.connect(f"file:{state}?mode=ro", uri=True)
    try:
        return dict(db.execute("SELECT id, data FROM jobs"))
    finally:
        db.close()


# ---- frames ----------------------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=5),
    max_leaves=30)
_names = st.sampled_from(["j1", "j2", "j99", "", "n1", "n2", "x" * 300])


def _valid_messages(jobs: list[str]) -> st.SearchStrategy:
    """Well-formed messages that this sender has no right to send or that name others' things."""
    job = st.sampled_from(jobs + ["j99"])
    attempt = st.integers(0, 5)
    return st.one_of(
        st.builds(s.CancelRequest, job=job), st.builds(s.SuspendRequest, job=job),
        st.builds(s.ResumeRequest, job=job),
        st.builds(s.MigrateRequest, job=job, to=st.sampled_from(["n1:0", "n1:1", "n2:0", "x"])),
        st.builds(s.Status, job=st.none() | job, limit=st.none() | st.integers(1, 5)),
        st.builds(s.Logs, job=job, tail=st.none() | st.integers(0, 3)),
        st.builds(s.Nodes), st.builds(s.MetricsRequest, since_round=st.integers(0, 10**6)),
        st.builds(s.Register, node=st.sampled_from(["n1", "n3"]),
                  gpus=st.just([s.GpuInfo(0, "fake", 1024)])),
        st.builds(s.Heartbeat, node=st.just("n1"),
                  jobs=st.lists(st.builds(s.JobTelemetry, job=job, step=st.integers(0, 10**6)),
                                max_size=2)),
        st.builds(s.JobEvent, node=st.just("n1"), job=job, attempt=attempt,
                  event=st.fixed_dictionaries({"event": st.sampled_from(
                      ["progress", "sample", "finished", "error", "x"])})),
        st.builds(s.JobExit, node=st.just("n1"), job=job, attempt=attempt,
                  exit_code=st.sampled_from([0, 1, 2, 75, -9])),
        st.builds(s.StartJob, job=job, attempt=attempt, spec=st.just(s.JobSpec("lenet")),
                  fragments=st.just([s.FragmentSpec(0, 0.5)]), train_dir=st.just("x")),
        st.builds(s.KillJob, job=job),
        st.builds(s.Ok, id=st.text(max_size=12)), st.builds(s.Error, reason=st.text(max_size=9)),
    ).map(s.encode)


def _mutate(data: bytes, how: int, where: int, byte: int) -> bytes:
    if not data:
        return data
    i = where % len(data)
    if how == 0:
        return data[:i]                                   # truncated
    if how == 1:
        return data[:i] + bytes([byte]) + data[i + 1:]    # one byte changed
    if how == 2:
        return data[:i] + data[i:] * 3                    # a stretch repeated
    obj = json.loads(data)
    if how == 3:
        obj["v"] = [2, "1", None, True, 1.0][byte % 5]    # wrong version
    elif how == 4:
        obj["type"] = ["launch", "", 7, "OK", "register "][byte % 5]   # unknown type
    else:
        key = sorted(obj)[byte % len(obj)]
        obj[key] = [None, -1, 10**30, "x" * 70000, [[[]]], {"a": {}}][byte % 6]
    return json.dumps(obj).encode()


def _frames(jobs: list[str]) -> st.SearchStrategy:
    valid = _valid_messages(jobs)
    deep = st.integers(1, 300_000).map(
        lambda n: b'{"v":1,"id":"d","type":"job_event","node":"n1","job":"j1","attempt":1,'
                  b'"event":{"e":' + b"[" * n + b"]" * n + b"}}")
    huge = st.integers(1, 2_000_000).map(
        lambda n: json.dumps({"v": 1, "type": "logs", "job": "x" * n}).encode())
    return st.one_of(
        st.binary(max_size=300), _json.map(lambda v: json.dumps(v).encode()),
        st.dictionaries(st.sampled_from(["v", "type", "id", "job", "jobs", "node"]), _json)
        .map(lambda v: json.dumps(v).encode()),
        deep, huge, valid,
        st.builds(_mutate, valid, st.integers(0, 5), st.integers(0, 10**6), st.integers(0, 255)))


def _harmless(frame: bytes) -> bool:
    """False for the few frames that are rightful requests: a submit (any user may),
    and n2 registering its own node."""
    try:
        msg = s.decode(frame)
    except s.SchemaError:
        return True
    return not (isinstance(msg, s.Submit) or (isinstance(msg, s.Register) and msg.node == "n2"))


# ---- the test -----------------------------------------------------------------------


def test_fuzzed_frames_change_nothing_and_the_coordinator_keeps_answering(tmp_path):
    keys_dir = tmp_path / "keys"
    keys.init(keys_dir)
    for name, role in (("alice", "user"), ("bob", "user"), ("n1", "agent"), ("n2", "agent")):
        keys.add(keys_dir, name, role)
    secret = {n: keys_dir / "issued" / n / f"{n}.key_secret" for n in ("alice", "bob", "n1", "n2")}
    ct = CoordinatorThread(tmp_path / "state.db", node_timeout=600.0)
    agent = FakeAgent(ct.address, "n1", gpus=((0, 16384), (1, 16384)), key=secret["n1"])
    alice = Client(ct.address, timeout_s=5, key=str(secret["alice"]))
    ctx = zmq.Context()
    senders = []
    try:
        assert agent.register().TYPE == "ok"
        jobs = alice.submit([s.JobSpec("lenet", max_number_of_steps=100),
                             s.JobSpec("cifarnet", max_number_of_steps=100)])
        for jid in jobs:                       # both sampling on n1, then quiet
            agent.wait_command(s.StartJob, jid)
        agent.pump(0.5)
        time.sleep(0.3)
        before = _stored_jobs(tmp_path / "state.db")
        identity = ct.coord.cluster.nodes["n1"].identity

        _, stranger = zmq.auth.create_certificates(str(tmp_path), "stranger")
        for key in (secret["bob"], secret["n2"], stranger):
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            keys.secure_client(sock, (key, keys_dir / "coordinator.key"))
            sock.connect(ct.address)
            senders.append(sock)

        def drain():
            for sock in senders:
                while sock.poll(0):
                    sock.recv()

        # the frames first (hypothesis's own memory is not the coordinator's)
        frames: list[tuple[int, bytes]] = []

        @settings(max_examples=EXAMPLES, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(st.lists(st.tuples(st.integers(0, 2), _frames(jobs)), min_size=1, max_size=8))
        def collect(batch):
            frames.extend((who, f) for who, f in batch if _harmless(f))

        collect()
        assert len(frames) > 300

        proc = psutil.Process()
        quiet, log.level = log.level, logging.ERROR   # no thousands of captured warnings
        try:
            rss0 = proc.memory_info().rss
            for k in range(0, len(frames), 8):
                for who, frame in frames[k:k + 8]:
                    senders[who].send(frame)
                drain()
            time.sleep(0.5)
            drain()
        finally:
            log.level = quiet

        # it still answers, promptly
        t0 = time.monotonic()
        assert [j["id"] for j in alice.jobs()] == jobs
        assert time.monotonic() - t0 < 2
        # no stored job changed, the node is still n1's agent's, nothing piled up
        assert _stored_jobs(tmp_path / "state.db") == before
        assert set(ct.coord.cluster.nodes) == {"n1"}
        assert ct.coord.cluster.nodes["n1"].identity == identity
        assert list(ct.coord.peers.values()) == ["n1"]
        grew_mb = (proc.memory_info().rss - rss0) / 2**20
        print(f"{len(frames)} frames, memory grew by {grew_mb:.1f} MiB")
        assert grew_mb < RSS_BOUND_MB, f"memory grew by {grew_mb:.0f} MiB"
    finally:
        for sock in senders:
            sock.close(0)
        ctx.term()
        alice.close()
        agent.close()
        ct.close()
