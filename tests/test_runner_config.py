"""Runner flags and their checks, and the runner's TF-free modules staying TF-free."""

import subprocess
import sys

import pytest

from tfgshare.runner.config import TrainConfig, parse_args
from tfgshare.runner.protocol import EXIT_BAD_INPUT, BadInputError


def test_slim_flag_names_parse_into_config(tmp_path):
    config = parse_args([
        "--model_name", "cifarnet", "--dataset_name", "synthetic", "--batch_size", "8",
        "--max_number_of_steps", "50", "--optimizer", "adam", "--learning_rate", "0.002",
        "--learning_rate_decay_type", "polynomial", "--weight_decay", "0.001",
        "--train_dir", str(tmp_path), "--memory_fraction", "0.25", "--num_gpus", "2",
        "--sample_only", "--job_id", "j7"])
    assert (config.model_name, config.batch_size, config.max_number_of_steps) == ("cifarnet", 8, 50)
    assert (config.optimizer, config.learning_rate) == ("adam", 0.002)
    assert config.learning_rate_decay_type == "polynomial"
    assert (config.memory_fraction, config.num_gpus, config.sample_only) == (0.25, 2, True)
    assert config.job_id == "j7"
    config.check()


def test_to_argv_round_trips(tmp_path):
    config = TrainConfig(train_dir=str(tmp_path), model_name="lenet", batch_size=4,
                         optimizer="momentum", deterministic=True, image_size=32,
                         events_file=str(tmp_path / "e.jsonl"))
    assert parse_args(config.to_argv()) == config


def test_unknown_optimizer_is_rejected_by_the_parser(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        parse_args(["--train_dir", str(tmp_path), "--optimizer", "adagrad"])
    assert exc.value.code == EXIT_BAD_INPUT
    assert "adagrad" in capsys.readouterr().err


@pytest.mark.parametrize("changes, words", [
    ({"model_name": "resnet_v9"}, "unknown model 'resnet_v9'"),
    ({"model_name": "vgg_16", "image_size": 64}, "too small for vgg_16"),
    ({"batch_size": 0}, "--batch_size must be >= 1"),
    ({"memory_fraction": 1.5}, "--memory_fraction must be in (0, 1]"),
    ({"memory_fraction": 0.0}, "--memory_fraction must be in (0, 1]"),
    ({"num_gpus": 0}, "--num_gpus must be >= 1"),
    ({"learning_rate": float("nan")}, "--learning_rate must be a finite number"),
    ({"optimizer": "adagrad"}, "unknown --optimizer 'adagrad'"),
    ({"learning_rate_decay_type": "cosine"}, "learning_rate_decay_type 'cosine'"),
    ({"num_classes": 1}, "--num_classes must be >= 2"),
])
def test_bad_values_name_the_problem(tmp_path, changes, words):
    config = TrainConfig(train_dir=str(tmp_path), **changes)
    with pytest.raises(BadInputError) as exc:
        config.check()
    assert words in str(exc.value)


def test_missing_dataset_dir_is_bad_input(tmp_path):
    config = TrainConfig(train_dir=str(tmp_path / "t"), dataset_dir=str(tmp_path / "nowhere"))
    with pytest.raises(BadInputError, match="nowhere does not exist"):
        config.check()


def test_light_runner_modules_do_not_import_tensorflow():
    code = ("import sys\n"
            "import tfgshare.runner.main, tfgshare.runner.config, tfgshare.runner.timing\n"
            "import tfgshare.runner.events, tfgshare.runner.protocol\n"
            "from tfgshare.runner.config import TrainConfig\n"
            "TrainConfig(train_dir='x').check()\n"
            "bad = [m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'tf_slim')]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


GANG = ["--job_name", "worker", "--ps_hosts", "127.0.0.1:7001",
        "--worker_hosts", "127.0.0.1:7002,127.0.0.1:7003", "--num_ps_tasks", "1",
        "--worker_replicas", "2", "--sync_replicas"]


@pytest.mark.parametrize("change, message", [
    ({"--worker_replicas": "3"}, "--worker_replicas 3 does not match the 2 address"),
    ({"--num_ps_tasks": "2"}, "--num_ps_tasks 2 must be >= 1 and match"),
    ({"--task": "2"}, r"--task 2 is not in 0\.\.1"),
    ({"--job_name": "chief"}, "--job_name must be 'worker' or 'ps'"),
    ({"--worker_hosts": "127.0.0.1:7002,nohost"}, "'nohost' is not host:port"),
    ({"--replicas_to_aggregate": "3"}, "--replicas_to_aggregate 3 must be in"),
    ({"--ps_hosts": "127.0.0.1:7002"}, "name one address twice"),
])
def test_gang_flags_that_do_not_describe_one_cluster_are_refused(tmp_path, change, message):
    argv = list(GANG)
    for flag, value in change.items():
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    config = parse_args(["--train_dir", str(tmp_path), *argv])
    with pytest.raises(BadInputError, match=message):
        config.check()


def test_gang_flags_make_worker_0_the_chief(tmp_path):
    config = parse_args(["--train_dir", str(tmp_path), *GANG, "--task", "0", "--serve_ps"])
    config.check()
    assert config.in_gang and config.is_chief
    other = parse_args(["--train_dir", str(tmp_path), *GANG, "--task", "1"])
    assert other.in_gang and not other.is_chief
    with pytest.raises(BadInputError, match="--serve_ps is for the chief"):
        parse_args(["--train_dir", str(tmp_path), *GANG, "--task", "1", "--serve_ps"]).check()
    with pytest.raises(BadInputError, match="need --job_name"):
        parse_args(["--train_dir", str(tmp_path), "--worker_replicas", "2"]).check()
