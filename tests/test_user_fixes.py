"""What a new user tripped on (issue 31), each checked as the user sees it: the command's
output, its exit code, the files left behind."""

from __future__ import annotations

import threading
import time

import pytest

from cli_helpers import fake_cluster, run
from coordinator_fakes import CoordinatorThread, FakeAgent
from tfgshare import keys, paths
from tfgshare import schema as s
from tfgshare.cli import main as tfgshare
from tfgshare.policies.registry import get_policy


@pytest.fixture
def cluster(tmp_path):
    with fake_cluster(tmp_path, gpus=((0, 16384),)) as both:
        yield both


# ---- messages -------------------------------------------------------------------


@pytest.mark.parametrize("flags, said", [
    (["--batch_size", "0"], "batch_size must be >= 1"),
    (["--optimizer", "adamw"], "optimizer: invalid value 'adamw'"),
    (["--seed", "x"], "runner flag --seed 'x': expected int, got str"),
])
def test_submit_errors_say_tfgshare_submit_once(capsys, flags, said):
    code, out, err = run(capsys, "submit", "lenet", *flags)
    assert code == 2 and out == ""
    assert err == f"tfgshare submit: {said}\n"          # not "tfgshare submit: submit: ..."


@pytest.mark.parametrize("flags, said", [
    (["--learning_rate", "nan"], "learning_rate must be a finite number, got nan"),
    (["--learning_rate", "inf"], "learning_rate must be a finite number, got inf"),
    (["--weight_decay", "-inf"], "weight_decay must be a finite number, got -inf"),
    (["--momentum", "nan"], "runner flag --momentum 'nan': must be a finite number"),
    (["--end_learning_rate", "1e999"], "runner flag --end_learning_rate '1e999': must be a "
                                       "finite number"),
    (["--memory_fraction", "nan"], "--memory_fraction must be a finite number"),
])
def test_nan_and_infinity_are_called_what_they_are(capsys, flags, said):
    code, _, err = run(capsys, "submit", "lenet", *flags)
    assert code == 2 and said in err and ">=" not in err


def test_nan_in_a_job_file_names_the_line(capsys, tmp_path):
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("- model: lenet\n  learning_rate: .nan\n")
    code, _, err = run(capsys, "submit", "-f", str(jobs))
    assert code == 2
    assert err == ("tfgshare submit: jobs.yaml, line 2: job 1: learning_rate must be a "
                   "finite number, got nan\n")


def test_a_wrong_role_is_told_with_the_right_article(tmp_path):
    keys_dir = tmp_path / "keys"
    keys.init(keys_dir)
    keys.add(keys_dir, "n1", "agent")
    keys.add(keys_dir, "root", "admin")
    keys.add(keys_dir, "bob", "user")
    ct = CoordinatorThread(tmp_path / "state.db")
    agent = FakeAgent(ct.address, "n1", key=keys_dir / "issued" / "n1" / "n1.key_secret")
    admin = FakeAgent(ct.address, "root", key=keys_dir / "issued" / "root" / "root.key_secret")
    user = FakeAgent(ct.address, "bob", key=keys_dir / "issued" / "bob" / "bob.key_secret")
    try:
        assert user.register().reason == "a user key (bob) may not send 'register'"
        assert (agent.request(s.Submit(jobs=[s.JobSpec("lenet")])).reason
                == "an agent key (n1) may not send 'submit'")
        assert admin.register().reason == "an admin key (root) may not send 'register'"
    finally:
        agent.close()
        admin.close()
        user.close()
        ct.close()


def test_keys_revoke_says_what_it_deleted(capsys, tmp_path):
    keys_dir = tmp_path / "keys"
    assert keys.main(["--keys-dir", str(keys_dir), "init"]) == 0
    assert keys.main(["--keys-dir", str(keys_dir), "add-user", "alice"]) == 0
    capsys.readouterr()
    issued = keys_dir / "issued" / "alice"
    assert keys.main(["--keys-dir", str(keys_dir), "revoke", "alice"]) == 0
    out = capsys.readouterr().out
    assert out == (f"revoked alice: deleted {keys_dir / 'registered' / 'alice.key'} and the "
                   f"key pair issued to it, {issued} (alice.key, alice.key_secret, "
                   "coordinator.key)\n")
    assert not issued.exists() and not (keys_dir / "registered" / "alice.key").exists()


def test_a_missing_key_file_is_reported_as_not_found(capsys, tmp_path):
    missing = tmp_path / "nowhere" / "alice.key_secret"
    code, _, err = run(capsys, "status", "--key", str(missing))
    assert code == 1
    assert f"your secret key file {missing} was not found" in err
    assert "Invalid certificate" not in err
    keys_dir = tmp_path / "keys"
    keys.init(keys_dir)
    key = keys.add(keys_dir, "alice", "user") / "alice.key_secret"
    (key.parent / "coordinator.key").unlink()
    code, _, err = run(capsys, "status", "--key", str(key))
    assert code == 1
    assert f"the coordinator's public key file {key.parent / 'coordinator.key'} was not found" \
        in err and "--server-key" in err


# ---- watch to a pipe or a file ----------------------------------------------------


def test_watch_to_a_pipe_prints_a_plain_table_each_refresh(capsys, cluster):
    ct, agent = cluster
    code, out, _ = run(capsys, "submit", "--coordinator", ct.address, "lenet",
                       "--max_number_of_steps", "40", "--memory_fraction", "0.5")
    assert code == 0
    agent.wait_command(s.StartJob, "j1")
    agent.event("j1", "progress", step=10, loss=1.0, step_time_s=0.1, images_per_sec=1.0,
                predicted_remaining_s=3.0)

    def finish_later():
        time.sleep(1.0)       # a few refreshes at 0.1 s while it runs
        agent.exit("j1", 0)
    done = threading.Thread(target=finish_later)
    done.start()
    try:   # capsys: stdout is not a terminal, as with `tfgshare watch | tee` or `> file`
        code, out, _ = run(capsys, "watch", "--coordinator", ct.address, "--interval", "0.1")
    finally:
        done.join()
    assert code == 0
    tables = out.split("job(s)\n")[1:]
    assert len(tables) >= 3, out                    # one table per refresh, not one at the end
    assert "running" in tables[0] and "25%" in tables[0] and "10/40" in tables[0]
    assert "finished" in tables[-1]
    assert "\x1b[" not in out and "━" not in out   # plain text: no cursor moves, no bars


# ---- dataset dirs refused at submit, by the agents' own rule ---------------------------


def test_dataset_dir_outside_the_data_roots_is_refused_at_submit(capsys, cluster, tmp_path):
    ct, _ = cluster
    code, out, err = run(capsys, "submit", "--coordinator", ct.address, "lenet",
                         "--dataset_dir", "/etc")
    assert code == 1 and out == ""
    assert "tfgshare submit: refused: lenet: dataset_dir /etc is outside the allowed roots" in err
    assert str(paths.shared_dir() / "data") in err and "--data-root" in err
    assert not ct.coord.cluster.jobs
    code, _, err = run(capsys, "submit", "--coordinator", ct.address, "lenet",
                       "--dataset_dir", "data/flowers")
    assert code == 2 and "dataset_dir data/flowers must be an absolute path" in err
    # an agent that told its data roots at registration: those are the rule
    data = tmp_path / "datasets"
    (data / "flowers").mkdir(parents=True)
    other = FakeAgent(ct.address, "n2")
    try:
        reply = other.request(s.Register(node="n2", gpus=other.gpus, data_roots=[str(data)]))
        assert reply.TYPE == "ok"
        code, out, _ = run(capsys, "submit", "--coordinator", ct.address, "lenet",
                           "--dataset_dir", str(data / "flowers"))
        assert code == 0 and out.startswith("j1")
        jobs = tmp_path / "jobs.yaml"
        jobs.write_text(f"- model: lenet\n  dataset_dir: {data}/../elsewhere\n")
        code, _, err = run(capsys, "submit", "--coordinator", ct.address, "-f", str(jobs))
        assert code == 1 and f"dataset_dir {data}/../elsewhere is outside the allowed " \
                             f"roots ({data})" in err
    finally:
        other.close()


def test_the_agent_refuses_by_the_same_rule_and_tells_its_roots(tmp_path):
    from tfgshare.agent import node
    assert node.confine is paths.confine
    with pytest.raises(ValueError, match="outside the allowed roots"):
        paths.confine("/etc", paths.data_roots(None, tmp_path), "dataset dir")
    assert paths.data_roots([tmp_path], "/ckpt") == [tmp_path]
    assert paths.data_roots(None, "/ckpt") == [paths.shared_dir() / "data", paths.Path("/ckpt")]


# ---- runner flags as YAML keys ------------------------------------------------------


def test_runner_flags_are_keys_in_a_job_file(capsys, cluster, tmp_path):
    ct, _ = cluster
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("- model: lenet\n  seed: 7\n  deterministic: true\n  momentum: 0.9\n"
                    "- model: lenet\n  deterministic: false\n  extra: [--log_every_n_steps, '5']\n")
    code, out, err = run(capsys, "submit", "--coordinator", ct.address, "-f", str(jobs))
    assert code == 0, err
    assert out.split() == ["j1", "lenet", "j2", "lenet"]
    assert ct.coord.cluster.jobs["j1"].spec.extra == ["--seed", "7", "--deterministic",
                                                      "--momentum", "0.9"]
    assert ct.coord.cluster.jobs["j2"].spec.extra == ["--log_every_n_steps", "5",
                                                      "--nodeterministic"]
    # range-checked as the flag is, with the key's line
    jobs.write_text("- model: lenet\n  batch_size: 8\n  seed: -3\n")
    code, _, err = run(capsys, "submit", "--coordinator", ct.address, "-f", str(jobs))
    assert code == 2
    assert err == ("tfgshare submit: jobs.yaml, line 3: job 1: runner flag --seed '-3': "
                   "expected int >= 0\n")
    jobs.write_text("- model: lenet\n  deterministic: 3\n")
    code, _, err = run(capsys, "submit", "--coordinator", ct.address, "-f", str(jobs))
    assert code == 2 and "runner flag --deterministic is true or false, got 3" in err
    jobs.write_text("- model: lenet\n  seed: 7\n  extra: [--seed, '8']\n")
    code, _, err = run(capsys, "submit", "--coordinator", ct.address, "-f", str(jobs))
    assert code == 2 and "runner flag --seed is given twice" in err
    assert len(ct.coord.cluster.jobs) == 2


def test_submit_help_documents_runner_flags_and_job_file_keys(capsys):
    with pytest.raises(SystemExit) as exit_:
        tfgshare(["submit", "--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0
    for flag in s.RUNNER_FLAGS:
        assert flag in out
    assert "seed: 7" in out and "extra: [--seed, '7']" in out and "--data-root" in out


# ---- migrate re-sizes the fraction from the job's memory ------------------------------


def test_migrate_keeps_the_memory_not_the_fraction(capsys, tmp_path):
    # fgs samples a job, then sizes its fragment from the sampled peak (the case)
    ct = CoordinatorThread(tmp_path / "state.db", policy=get_policy("fgs"), node_timeout=1e6)
    big = FakeAgent(ct.address, "big", gpus=((0, 16384),))
    small = FakeAgent(ct.address, "small", gpus=((0, 8192),))
    tiny = FakeAgent(ct.address, "tiny", gpus=((0, 1024),))
    addr = ["--coordinator", ct.address]
    try:
        big.register()
        code, _, _ = run(capsys, "submit", *addr, "lenet", "--max_number_of_steps", "100000")
        assert code == 0
        assert big.wait_command(s.StartJob, "j1").sample_only
        big.sample("j1", peak_mb=856.4)         # 942 MiB with the 10 % headroom
        start = big.wait_command(s.StartJob, "j1")
        held_mb = start.fragments[0].fraction * 16384
        assert held_mb == pytest.approx(942, abs=1)
        small.register()
        tiny.register()

        code, _, err = run(capsys, "migrate", *addr, "j1", "--to", "tiny:0")
        assert code == 1
        assert ("job j1 needs 942 MiB per GPU (what it holds now on big:0); tiny:0 "
                "(virtual, 1024 MiB) can give a job at most 724 MiB") in err

        code, out, _ = run(capsys, "migrate", *addr, "j1", "--to", "small:0")
        assert code == 0
        assert out == "j1: migrating (to small:0 fraction 0.115 = 942 MiB)\n"
        big.wait_command(s.SuspendJob, "j1")
        big.exit("j1", 75)
        moved = small.wait_command(s.StartJob, "j1")
        assert moved.fragments[0].fraction * 8192 == pytest.approx(held_mb)   # was 471 MiB
    finally:
        for a in (big, small, tiny):
            a.close()
        ct.close()


def test_migrate_of_a_waiting_job_refuses_a_gpu_below_its_measured_memory(capsys, tmp_path):
    ct = CoordinatorThread(tmp_path / "state.db", policy=get_policy("fifo"))
    big = FakeAgent(ct.address, "big", gpus=((0, 16384),))
    tiny = FakeAgent(ct.address, "tiny", gpus=((0, 1024),))
    addr = ["--coordinator", ct.address]
    try:
        big.register()
        run(capsys, "submit", *addr, "lenet", "--max_number_of_steps", "1000")
        big.wait_command(s.StartJob, "j1")
        big.sample("j1", peak_mb=856.4, exit=False)    # 942 MiB with the 10 % headroom
        assert run(capsys, "suspend", *addr, "j1")[0] == 0
        big.wait_command(s.SuspendJob, "j1")
        big.exit("j1", 75)
        tiny.register()
        code, _, err = run(capsys, "migrate", *addr, "j1", "--to", "tiny:0")
        assert code == 1 and "job j1 needs 942 MiB per GPU (its measured peak memory plus " \
                             "10 %); tiny:0 (virtual, 1024 MiB) can give a job at most 724 MiB" \
            in err
    finally:
        big.close()
        tiny.close()
        ct.close()


def test_cancel_takes_many_jobs_and_says_which_it_could_not(capsys, cluster):
    ct, agent = cluster
    addr = ["--coordinator", ct.address]
    for _ in range(3):
        run(capsys, "submit", *addr, "lenet", "--max_number_of_steps", "100")
    agent.wait_command(s.StartJob, "j1")          # one GPU: j2 and j3 wait
    code, out, err = run(capsys, "cancel", *addr, "j2", "j9", "j3")
    assert code == 1
    assert "j2: cancelled" in out and "j3: cancelled" in out
    assert "j9" in err and "refused" in err
    assert ct.coord.cluster.jobs["j1"].state.value == "running"


def test_a_replay_stopped_before_its_end_leaves_no_job_behind(capsys, cluster):
    """``run_schedule`` (replay's and four-models' driver) stopped by its timeout or a
    signal cancels the jobs it submitted that have not ended."""
    import os
    import signal
    import threading

    from tfgshare.client.api import Client
    from tfgshare.repro.live import run_schedule

    ct, agent = cluster
    specs = [s.JobSpec("lenet", max_number_of_steps=100) for _ in range(2)]
    with Client(ct.address, timeout_s=5.0) as client:
        run = run_schedule(client, [(0.0, spec) for spec in specs], timeout_s=1.0, quiet=True)
        assert run.timed_out
        assert client.job("j2")["state"] == "cancelled"     # it was waiting
        agent.wait_command(s.CancelJob, "j1")                # it was running
        said = capsys.readouterr().err
        assert "timeout: cancelled 2 unfinished jobs of the 2 it submitted (j1, j2)" in said

        threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM)).start()
        with pytest.raises(KeyboardInterrupt):
            run_schedule(client, [(0.0, specs[0])], timeout_s=60.0, quiet=True)
        assert client.job("j3")["state"] == "cancelled"
        said = capsys.readouterr().err
        assert "stopped: cancelled 1 unfinished job of the 1 it submitted (j3)" in said


def test_ctrl_c_ends_a_command_with_one_line_and_no_traceback(capsys, monkeypatch):
    from tfgshare import cli

    monkeypatch.setitem(cli.COMMANDS, "replay", ("test_user_fixes:_interrupted", "x"))
    code, out, err = run(capsys, "replay")
    assert code == 130 and err == "tfgshare replay: interrupted\n"


def _interrupted(argv):
    raise KeyboardInterrupt
