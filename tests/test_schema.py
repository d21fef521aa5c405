"""The wire schema: every message survives a round trip; bad frames say why."""

from __future__ import annotations

import json

import pytest

from tfgshare import schema as s

EXAMPLES = [
    s.Register(node="n1", gpus=[s.GpuInfo(0, "virtual", 16384, True)],
               jobs=[s.RunningJob("j1", 4242, 17, 2)]),
    s.Heartbeat(node="n1", gpus=[s.GpuTelemetry(0, 0.5, 1200.0)],
                jobs=[s.JobTelemetry("j1", 18, {0: 900.0, 1: 450.5})]),
    s.JobEvent(node="n1", job="j1", attempt=2,
               event={"event": "progress", "time": 1.5, "step": 3, "loss": 2.0}),
    s.JobExit(node="n1", job="j1", attempt=2, exit_code=75, reason="suspended"),
    s.StartJob(job="j1", attempt=3, spec=s.JobSpec("alexnet_v2", memory_fraction=0.25,
                                                   extra=["--log_every_n_steps", "5"]),
               fragments=[s.FragmentSpec(0, 0.25), s.FragmentSpec(1, 0.25)],
               train_dir="/ckpt/j1", sample_only=True),
    s.SuspendJob(job="j1", attempt=3),
    s.CancelJob(job="j1", attempt=3),
    s.AdoptJob(job="j1", attempt=4),
    s.KillJob(job="j1"),
    s.Submit(jobs=[s.JobSpec("inception_v3"), s.JobSpec("vgg_16", num_gpus=2)]),
    s.Status(), s.Status(job="j1"), s.Nodes(), s.Logs(job="j1", tail=10),
    s.CancelRequest(job="j1"), s.SuspendRequest(job="j1"), s.ResumeRequest(job="j1"),
    s.MigrateRequest(job="j1", to="n1:1"), s.MetricsRequest(),
    s.Ok(id="abc", fields={"job_ids": ["j1"]}), s.Error(id="abc", reason="no"),
]


@pytest.mark.parametrize("msg", EXAMPLES, ids=lambda m: m.TYPE)
def test_round_trip(msg):
    data = s.encode(msg)
    obj = json.loads(data)
    assert obj["v"] == s.VERSION and obj["type"] == msg.TYPE and obj["id"] == msg.id
    assert s.decode(data) == msg


def test_every_type_has_an_example_and_a_role():
    assert {m.TYPE for m in EXAMPLES} == set(s.MESSAGES)
    roles = s.AGENT_TYPES | s.COMMAND_TYPES | s.CLIENT_TYPES | s.REPLY_TYPES | {"register"}
    assert roles == set(s.MESSAGES)


def test_ok_fields_are_flat_and_int_keys_come_back():
    obj = json.loads(s.encode(s.reply_ok("r1", job_ids=["a", "b"])))
    assert obj == {"v": 1, "type": "ok", "id": "r1", "job_ids": ["a", "b"]}
    hb = s.decode(s.encode(s.Heartbeat(node="n", jobs=[s.JobTelemetry("j", 1, {3: 7.0})])))
    assert hb.jobs[0].gpu_memory_mb == {3: 7.0}


def _frame(**fields) -> bytes:
    return json.dumps({"v": 1, "id": "x", **fields}).encode()


@pytest.mark.parametrize("data, words", [
    (b"{not json", "malformed JSON"),
    (b"\xff\xfe", "malformed JSON"),
    (b"[1, 2]", "JSON object"),
    (json.dumps({"type": "nodes"}).encode(), "missing version"),
    (json.dumps({"v": 2, "type": "nodes"}).encode(), "unsupported version 2"),
    (_frame(type="launch_missiles"), "unknown message type 'launch_missiles'"),
    (_frame(), "'type'"),
    (_frame(type="logs"), "missing field 'job'"),
    (_frame(type="logs", job="a", colour="red"), "unknown field(s) colour"),
    (_frame(type="logs", job=5), "logs.job: expected str, got int"),
    (_frame(type="submit", jobs=[{"model_name": "vgg_16", "batch_size": "big"}]),
     "submit.jobs[0].batch_size: expected int"),
    (_frame(type="submit", jobs=[{"model_name": "vgg_16", "memory_fraction": 1.5}]),
     "memory_fraction must be in (0, 1]"),
    (_frame(type="submit", jobs=[{"model_name": "vgg_16", "memory_fraction": 0}]),
     "memory_fraction must be in (0, 1]"),
    (_frame(type="submit", jobs=[{"model_name": "vgg_16", "memory_fraction": "half"}]),
     "'auto'"),
    (_frame(type="submit", jobs=[{"model_name": "vgg_16", "num_gpus": 0}]),
     "num_gpus must be >= 1"),
    (_frame(type="heartbeat", node="n", jobs=[{"job": "j", "gpu_memory_mb": {"x": 1}}]),
     "is not an integer"),
    (_frame(type="job_exit", node="n", job="j", attempt=True, exit_code=0),
     "attempt: expected int, got bool"),
])
def test_bad_frames_name_the_problem(data, words):
    with pytest.raises(s.SchemaError) as err:
        s.decode(data)
    assert words in str(err.value)


def test_oversized_frame_is_refused():
    big = _frame(type="logs", job="x" * s.MAX_MESSAGE_BYTES)
    with pytest.raises(s.SchemaError, match="exceeds"):
        s.decode(big)


def test_runner_args_carry_only_set_flags():
    spec = s.JobSpec("resnet_v1_50", batch_size=8, max_number_of_steps=20,
                     learning_rate=0.1, extra=["--log_every_n_steps", "1"])
    args = spec.runner_args()
    assert args[:4] == ["--log_every_n_steps", "1", "--model_name", "resnet_v1_50"]
    assert args[args.index("--batch_size") + 1] == "8"
    assert args[args.index("--learning_rate") + 1] == "0.1"
    assert "--optimizer" not in args
    assert spec.requested_fraction is None
    assert s.JobSpec("vgg_16", memory_fraction=0.3).requested_fraction == 0.3


from hypothesis import given, strategies as st  # noqa: E402

_text = st.text(max_size=20)
_specs = st.builds(
    s.JobSpec, model_name=st.text(min_size=1, max_size=20), name=_text,
    batch_size=st.integers(1, 4096), max_number_of_steps=st.integers(1, 10**9),
    learning_rate=st.none() | st.floats(0, 10, allow_nan=False),
    image_size=st.none() | st.integers(1, 2048), num_gpus=st.integers(1, 64),
    memory_fraction=st.just("auto") | st.floats(0.001, 1.0),
    priority=st.integers(-10, 10),
    extra=st.lists(st.sampled_from([["--log_every_n_steps", "5"], ["--deterministic"],
                                    ["--momentum=0.5"], ["--seed", "7"]]),
                   max_size=4, unique_by=lambda f: f[0][:6]).map(lambda fs: sum(fs, [])))


@given(st.lists(_specs, min_size=1, max_size=5))
def test_any_valid_submit_round_trips(specs):
    msg = s.Submit(jobs=specs)
    assert s.decode(s.encode(msg)) == msg


def _submit(**spec) -> bytes:
    return _frame(type="submit", jobs=[{"model_name": "lenet", **spec}])


@pytest.mark.parametrize("extra, words", [
    (["--model_name", "vgg_16"], "--model_name would override the job's validated field "
                                 "model_name"),
    (["--batch_size=4096"], "--batch_size would override"),
    (["--train_image_size", "64"], "field image_size"),
    (["--train_dir", "/etc"], "--train_dir is set by the agent"),
    (["--clone_on_cpu"], "unknown runner flag --clone_on_cpu"),
    (["--log_every_n_steps", "0"], "--log_every_n_steps '0': expected int >= 1"),
    (["--momentum", "lots"], "--momentum 'lots'"),
    (["--seed", "1", "--seed", "2"], "--seed is given twice"),
    (["--warmup_steps"], "--warmup_steps needs a value"),
])
def test_runner_flags_that_would_override_fields_or_are_unknown_are_refused(extra, words):
    with pytest.raises(s.SchemaError) as err:
        s.decode(_submit(extra=extra))
    assert words in str(err.value) and "submit.jobs[0]" in str(err.value)
    with pytest.raises(s.SchemaError, match="runner flag"):
        s.JobSpec("lenet", extra=extra)


def test_allowed_runner_flags_are_runner_flags_with_the_runner_s_choices():
    import dataclasses
    import typing
    from tfgshare.runner import config
    names = {f.name for f in dataclasses.fields(config.TrainConfig)}
    assert set(s.RUNNER_FLAGS) <= names
    assert set(s.FIELD_FLAGS) - {"train_image_size"} <= names
    assert s.AGENT_FLAGS <= names
    assert names == set(s.RUNNER_FLAGS) | set(s.FIELD_FLAGS) - {"train_image_size"} | s.AGENT_FLAGS
    assert typing.get_args(s.Optimizer) == config.OPTIMIZERS
    assert typing.get_args(s.DecayType) == config.DECAY_TYPES


def test_checked_flags_parse_in_the_runner_and_fields_win(tmp_path):
    from tfgshare.runner.config import parse_args
    spec = s.JobSpec("lenet", batch_size=8, extra=["--log_every_n_steps", "5", "--deterministic",
                                                    "--momentum=0.5"])
    config = parse_args(spec.runner_args() + ["--train_dir", str(tmp_path)])
    assert (config.log_every_n_steps, config.deterministic, config.momentum) == (5, True, 0.5)
    assert config.batch_size == 8 and config.model_name == "lenet"


def test_bad_utf8_inside_a_field_is_a_schema_error():
    frame = b'{"v":1,"type":"logs","id":"x","job":"\xff\xfe"}'
    with pytest.raises(s.SchemaError, match="malformed JSON"):
        s.decode(frame)
    assert s.request_id(frame) == "x"


def test_a_gang_member_carries_its_cluster_and_becomes_runner_flags():
    from tfgshare.schema import (GangMember, JobSpec, PortRange, Register, SchemaError,
                                 StartJob, decode, encode)

    member = GangMember(task=0, ps_hosts=["127.0.0.1:47000"],
                        worker_hosts=["127.0.0.1:47001", "127.0.0.1:47002"])
    start = decode(encode(StartJob(job="j1", attempt=1, spec=JobSpec(model_name="lenet"),
                                   fragments=[], train_dir="/c/j1", gang=member)))
    assert start.gang.runner_args() == [
        "--job_name", "worker", "--task", "0", "--ps_hosts", "127.0.0.1:47000",
        "--worker_hosts", "127.0.0.1:47001,127.0.0.1:47002", "--num_ps_tasks", "1",
        "--worker_replicas", "2", "--sync_replicas", "--serve_ps"]
    with pytest.raises(SchemaError, match="register.ports: port range 9-3 is empty"):
        decode(b'{"type":"register","v":1,"node":"a","gpus":[],"ports":{"first":9,"last":3}}')
    with pytest.raises(SchemaError, match="worker_hosts"):
        decode(encode(StartJob(job="j1", attempt=1, spec=JobSpec(model_name="lenet"),
                               fragments=[], train_dir="/c/j1",
                               gang=GangMember(task=0, ps_hosts=["h:1"],
                                               worker_hosts=["h:2", "no port"]))))
    assert decode(encode(Register(node="a", gpus=[], address="10.0.0.7",
                                  ports=PortRange(47000, 47999)))).ports.last == 47999
    with pytest.raises(SchemaError, match="set by the agent"):
        JobSpec(model_name="lenet", extra=["--worker_hosts", "h:1"])
