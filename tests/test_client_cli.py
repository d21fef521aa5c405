"""The tfgshare client commands against a coordinator with a fake agent."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_helpers import fake_cluster, run
from tfgshare.client import commands as cli
from tfgshare.client.api import Client
from tfgshare import schema as s

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def cluster(tmp_path):
    with fake_cluster(tmp_path) as both:
        yield both


def unused_address() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{sock.getsockname()[1]}"


@pytest.mark.parametrize("command", [["status"], ["nodes"], ["logs", "j1"], ["cancel", "j1"],
                                     ["submit", "vgg_16"], ["watch", "--once"]])
def test_unreachable_coordinator_gets_a_clear_message_not_a_hang(capsys, command):
    t0 = time.monotonic()
    code, out, err = run(capsys, command[0], "--coordinator", unused_address(), *command[1:])
    assert code == 1
    assert "no answer from the coordinator" in err and "is it running?" in err
    assert time.monotonic() - t0 < 5   # bounded by the 1 s request timeout, not a hang


def test_parse_submit_maps_slim_flags_and_checks_the_others():
    (spec,) = cli.parse_submit(["inception_v3", "--batch_size", "16", "--max_number_of_steps=200",
                                "--num_gpus", "2", "--memory_fraction", "0.25",
                                "--learning_rate", "0.01", "--log_every_n_steps", "5",
                                "--deterministic"])
    assert (spec.model_name, spec.batch_size, spec.max_number_of_steps) == ("inception_v3", 16, 200)
    assert spec.num_gpus == 2 and spec.memory_fraction == 0.25 and spec.learning_rate == 0.01
    assert spec.extra == ["--log_every_n_steps", "5", "--deterministic"]
    assert cli.parse_submit(["vgg_16", "--memory_fraction", "auto"])[0].memory_fraction == "auto"


@pytest.mark.parametrize("argv, words", [
    (["submit"], "needs a model name"),
    (["submit", "nosuchnet"], "nosuchnet"),
    (["submit", "vgg_16", "--memory_fraction", "1.5"], "must be in (0, 1]"),
    (["submit", "vgg_16", "--memory_fraction", "0"], "must be in (0, 1]"),
    (["submit", "vgg_16", "--memory_fraction", "lots"], "number in (0, 1] or auto"),
    (["submit", "vgg_16", "--batch_size", "big"], "--batch_size must be int"),
    (["submit", "vgg_16", "--num_gpus", "0"], "num_gpus must be >= 1"),
    (["submit", "vgg_16", "stray"], "unexpected argument 'stray'"),
])
def test_bad_submit_arguments_fail_before_sending(capsys, argv, words):
    code, _, err = run(capsys, *argv, "--coordinator", unused_address())
    assert code == 2 and words in err


def test_submit_from_yaml_and_bad_yaml(capsys, cluster, tmp_path):
    ct, agent = cluster
    good = tmp_path / "jobs.yaml"
    good.write_text("- model: inception_v3\n  batch_size: 8\n  max_number_of_steps: 20\n"
                    "- model_name: vgg_16\n  memory_fraction: 0.5\n  extra: ['--seed', '1']\n")
    code, out, _ = run(capsys, "submit", "--coordinator", ct.address, "-f", str(good))
    assert code == 0 and out.split() == ["j1", "inception_v3", "j2", "vgg_16"]
    job = ct.coord.cluster.jobs["j2"]
    assert job.spec.memory_fraction == 0.5 and job.spec.extra == ["--seed", "1"]

    bad = tmp_path / "bad.yaml"
    bad.write_text("- model: inception_v3\n- model: vgg_16\n  batch_sise: 8\n")
    code, _, err = run(capsys, "submit", "--coordinator", ct.address, "-f", str(bad))
    assert code == 2 and "bad.yaml, line 3: job 2: unknown field(s) batch_sise" in err
    bad.write_text("jobs:\n  - model: lenet\n    batch_size: 8\n    extra: [--model_name, vgg_16]\n")
    code, _, err = run(capsys, "submit", "--coordinator", ct.address, "-f", str(bad))
    assert code == 2 and "bad.yaml, line 4: job 1: runner flag --model_name would override" in err
    bad.write_text("- !!python/object/apply:os.system ['true']\n")
    code, _, err = run(capsys, "submit", "--coordinator", ct.address, "-f", str(bad))
    assert code == 2 and "not valid YAML" in err and "line 1" in err
    bad.write_text("- model: nosuchnet\n")
    code, _, err = run(capsys, "submit", "--coordinator", ct.address, "-f", str(bad))
    assert code == 2 and "nosuchnet" in err
    bad.write_text("{{{")
    code, _, err = run(capsys, "submit", "--coordinator", ct.address, "-f", str(bad))
    assert code == 2 and "not valid YAML" in err
    code, _, err = run(capsys, "submit", "--coordinator", ct.address, "-f", str(tmp_path / "no"))
    assert code == 2 and "cannot read" in err
    assert len(ct.coord.cluster.jobs) == 2


@pytest.mark.parametrize("flags, words", [
    (["--model_name", "vgg_16"], "runner flag --model_name would override the job's validated "
                                 "field model_name"),
    (["--clone_on_cpu"], "unknown runner flag --clone_on_cpu"),
    (["--train_dir", "/etc"], "--train_dir is set by the agent"),
])
def test_submit_refuses_flags_that_override_fields_or_are_unknown(capsys, cluster, flags, words):
    ct, _ = cluster
    code, _, err = run(capsys, "submit", "--coordinator", ct.address, "lenet", *flags)
    assert code == 2 and words in err
    # the coordinator checks too: the wire is untrusted
    frame = json.dumps({"v": 1, "type": "submit", "id": "r1",
                        "jobs": [{"model_name": "lenet", "extra": flags}]}).encode()
    with Client(ct.address, timeout_s=5) as client:
        client.send_raw(frame)
        reply = s.decode(client.recv_raw())
    assert isinstance(reply, s.Error) and words in reply.reason and reply.id == "r1"
    assert reply.code is s.ErrorCode.INVALID
    assert not ct.coord.cluster.jobs


def test_refused_submit_exits_1_with_the_reason(capsys, cluster):
    ct, _ = cluster
    code, _, err = run(capsys, "submit", "--coordinator", ct.address, "vgg_16", "--num_gpus", "4")
    assert code == 1 and "refused" in err and "the cluster's nodes have 2 in all" in err


def test_status_watch_nodes_logs_and_job_commands(capsys, cluster):
    ct, agent = cluster
    addr = ["--coordinator", ct.address]
    code, out, _ = run(capsys, "submit", *addr, "inception_v3", "--max_number_of_steps", "40",
                       "--memory_fraction", "0.5")
    assert code == 0 and out.startswith("j1")
    agent.wait_command(s.StartJob, "j1")
    agent.event("j1", "progress", step=10, loss=1.0, step_time_s=0.1, images_per_sec=1.0,
                predicted_remaining_s=3.0)

    code, out, _ = run(capsys, "status", *addr)
    assert code == 0 and "j1" in out and "running" in out and "10/40" in out
    code, out, _ = run(capsys, "status", *addr, "j1")
    assert code == 0 and "inception_v3" in out and "steps" in out and "10/40" in out
    code, out, _ = run(capsys, "status", *addr, "--report")
    assert code == 0 and "JCT" in out and "j1" in out
    code, out, _ = run(capsys, "watch", *addr, "--once")
    assert code == 0 and "j1" in out and "10/40" in out
    code, out, _ = run(capsys, "nodes", *addr)
    assert code == 0 and "n1:0" in out and "n1:1" in out and "held" in out
    assert "j1" in out
    code, out, _ = run(capsys, "logs", *addr, "j1")
    assert code == 0 and "submitted inception_v3" in out and "progress step=10" in out
    code, _, err = run(capsys, "logs", *addr, "j7")
    assert code == 1 and "no job 'j7'" in err

    other = "n1:1" if ct.coord.cluster.jobs["j1"].fragments[0].gpu == "n1:0" else "n1:0"
    code, out, _ = run(capsys, "migrate", *addr, "j1", "--to", other)
    assert code == 0 and "j1: migrating" in out
    agent.wait_command(s.SuspendJob, "j1")
    agent.exit("j1", 75)
    agent.wait_command(s.StartJob, "j1")
    code, out, _ = run(capsys, "suspend", *addr, "j1")
    assert code == 0 and "j1: suspending" in out
    agent.wait_command(s.SuspendJob, "j1")
    agent.exit("j1", 75)
    code, out, _ = run(capsys, "resume", *addr, "j1")
    # what the coordinator answered after it acted, not the state before the resume
    assert code == 0 and out == ("j1: resume requested; now suspended (released; the "
                                 "scheduler places it when there is room)\n")
    agent.wait_command(s.StartJob, "j1")
    code, out, _ = run(capsys, "cancel", *addr, "j1")
    assert code == 0 and "j1: cancelling" in out


def test_watch_returns_once_every_job_is_done(capsys, cluster):
    ct, agent = cluster
    (jid,) = ct_submit(ct)
    agent.wait_command(s.StartJob, jid)
    agent.exit(jid, 0)
    code, out, _ = run(capsys, "watch", "--coordinator", ct.address, "--interval", "0.05")
    assert code == 0 and jid in out and "finished" in out


def ct_submit(ct) -> list[str]:
    from tfgshare.client.api import Client
    with Client(ct.address) as c:
        return c.submit([s.JobSpec("alexnet_v2", max_number_of_steps=5)])


def test_coordinator_and_client_never_import_tensorflow(tmp_path):
    script = f"""
import sys, threading
sys.path.insert(0, {str(REPO / 'tests')!r})
from coordinator_fakes import CoordinatorThread, FakeAgent
from tfgshare.client import commands as client_cli
from tfgshare import cli
import tfgshare.coordinator.server
from tfgshare.client.api import Client
from tfgshare import schema as s
ct = CoordinatorThread({str(tmp_path / 'state.db')!r})   # the default policy
agent = FakeAgent(ct.address, "n1")
agent.register()
with Client(ct.address) as c:
    c.submit([s.JobSpec("inception_v3")])
assert client_cli.status(["--coordinator", ct.address]) == 0
assert client_cli.nodes(["--coordinator", ct.address]) == 0
ct.close()
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "tf_slim", "keras"))
print("LOADED", loaded)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         cwd=REPO, timeout=120, env={"PYTHONPATH": str(REPO), "PATH": ""})
    assert out.returncode == 0, out.stderr
    assert "LOADED []" in out.stdout


def test_status_active_hides_done_jobs_and_counts_states(capsys, cluster):
    ct, agent = cluster
    done, running = ct_submit(ct) + ct_submit(ct)
    agent.wait_command(s.StartJob, done)
    agent.exit(done, 0)
    agent.wait_command(s.StartJob, running)
    code, out, _ = run(capsys, "status", "--coordinator", ct.address, "--active")
    assert code == 0 and running in out and f"{done} " not in out
    assert "all jobs on the coordinator: 1 finished, 1 running" in out   # the table: 1
    code, out, _ = run(capsys, "status", "--coordinator", ct.address)
    assert done in out and running in out
