"""A training job's settings: TF-Slim's flag names, parsed and checked without TensorFlow.

The agent builds a ``TrainConfig`` (or its ``to_argv``) to start a runner; the
runner parses the same flags back. ``check`` rejects bad input before any
TensorFlow import, so a typo fails in milliseconds.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

from tfgshare import sampling
from tfgshare.runner.protocol import BadInputError

OPTIMIZERS = ("sgd", "momentum", "rmsprop", "adam")
DECAY_TYPES = ("fixed", "exponential", "polynomial")


@dataclass
class TrainConfig:
    """Everything one training job needs; field names are the command-line flags."""

    train_dir: str
    model_name: str = "lenet"
    dataset_name: str = "synthetic"
    dataset_split_name: str = "train"
    dataset_dir: str | None = None
    num_classes: int | None = None        # synthetic data only: classes to draw
    image_size: int | None = None         # None: the net's default size
    batch_size: int = 32                  # per GPU (per tower), as in TF-Slim
    max_number_of_steps: int = 1000
    optimizer: str = "rmsprop"
    learning_rate: float = 0.01
    learning_rate_decay_type: str = "exponential"
    learning_rate_decay_factor: float = 0.94
    num_epochs_per_decay: float = 2.0
    end_learning_rate: float = 0.0001
    weight_decay: float = 0.00004
    momentum: float = 0.9
    rmsprop_decay: float = 0.9
    rmsprop_momentum: float = 0.9
    opt_epsilon: float = 1.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    label_smoothing: float = 0.0
    memory_fraction: float = 1.0
    num_gpus: int = 1
    seed: int = 0
    deterministic: bool = False           # TF op determinism (exact resume on GPU too)
    intra_op_threads: int = 0             # 0: TensorFlow's default
    inter_op_threads: int = 0
    warmup_steps: int = sampling.WARMUP_STEPS
    num_sample_steps: int = sampling.SAMPLE_STEPS
    max_sample_share: float = sampling.MAX_SHARE   # sampling's most share of the steps
    sample_only: bool = False
    save_interval_steps: int = 0          # 0: off
    save_interval_secs: float = 600.0     # 0: off
    max_to_keep: int = 3
    log_every_n_steps: int = 10
    events_file: str | None = None
    job_id: str | None = None
    epoch: int = 0                        # the attempt number (fences checkpoints; 0: none)
    # between-graph replication across processes (TF-Slim's flags; see runner.replicas)
    job_name: str = ""                    # "worker" or "ps" in a gang; "": one process
    task: int = 0                         # this process's index in its job (worker 0: chief)
    ps_hosts: str = ""                    # host:port,... of the parameter servers
    worker_hosts: str = ""                # host:port,... of the workers
    num_ps_tasks: int = 0
    worker_replicas: int = 1
    sync_replicas: bool = False
    replicas_to_aggregate: int = 0        # 0: worker_replicas
    serve_ps: bool = False                # the chief also serves the ps tasks in-process

    @property
    def in_gang(self) -> bool:
        """Whether this run is one member of a gang (between-graph replication)."""
        return bool(self.job_name)

    @property
    def is_chief(self) -> bool:
        """Whether this run owns the checkpoint (worker 0, or a run on its own)."""
        return not self.job_name or (self.job_name == "worker" and self.task == 0)

    def check(self) -> None:
        """Raise BadInputError naming the first flag that cannot work."""
        from slim_models import nets_factory

        try:
            nets_factory.check_model(self.model_name, self.image_size)
        except ValueError as exc:
            raise BadInputError(str(exc)) from None
        positive = ("batch_size", "max_number_of_steps", "num_gpus", "max_to_keep",
                    "log_every_n_steps")
        non_negative = ("warmup_steps", "num_sample_steps", "save_interval_steps",
                        "intra_op_threads", "inter_op_threads", "seed", "epoch")
        for name in positive:
            if getattr(self, name) < 1:
                raise BadInputError(f"--{name} must be >= 1, got {getattr(self, name)}")
        for name in non_negative:
            if getattr(self, name) < 0:
                raise BadInputError(f"--{name} must be >= 0, got {getattr(self, name)}")
        if self.num_classes is not None and self.num_classes < 2:
            raise BadInputError(f"--num_classes must be >= 2, got {self.num_classes}")
        if not 0.0 < self.memory_fraction <= 1.0:
            raise BadInputError(f"--memory_fraction must be in (0, 1], got {self.memory_fraction}")
        if not 0.0 < self.max_sample_share <= 1.0:
            raise BadInputError(
                f"--max_sample_share must be in (0, 1], got {self.max_sample_share}")
        for name in ("learning_rate", "weight_decay", "save_interval_secs", "end_learning_rate"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise BadInputError(f"--{name} must be a finite number >= 0, got {value}")
        if self.optimizer not in OPTIMIZERS:
            raise BadInputError(
                f"unknown --optimizer {self.optimizer!r}; valid: {', '.join(OPTIMIZERS)}")
        if self.learning_rate_decay_type not in DECAY_TYPES:
            raise BadInputError(f"unknown --learning_rate_decay_type "
                                f"{self.learning_rate_decay_type!r}; valid: {', '.join(DECAY_TYPES)}")
        if self.dataset_dir is not None and not Path(self.dataset_dir).is_dir():
            raise BadInputError(f"--dataset_dir {self.dataset_dir} does not exist "
                                "or is not a directory")
        if not self.train_dir:
            raise BadInputError("--train_dir is required")
        if Path(self.train_dir).exists() and not Path(self.train_dir).is_dir():
            raise BadInputError(f"--train_dir {self.train_dir} exists and is not a directory")
        self.check_replicas()

    def check_replicas(self) -> None:
        """Raise BadInputError when the gang flags do not describe one consistent cluster."""
        if not self.job_name:
            if self.worker_hosts or self.ps_hosts or self.worker_replicas != 1 \
                    or self.num_ps_tasks or self.serve_ps:
                raise BadInputError("--worker_hosts, --ps_hosts, --worker_replicas, "
                                    "--num_ps_tasks and --serve_ps need --job_name worker|ps")
            return
        if self.job_name not in ("worker", "ps"):
            raise BadInputError(f"--job_name must be 'worker' or 'ps', got {self.job_name!r}")
        workers, ps = host_list(self.worker_hosts, "worker_hosts"), \
            host_list(self.ps_hosts, "ps_hosts")
        if self.worker_replicas < 1 or len(workers) != self.worker_replicas:
            raise BadInputError(f"--worker_replicas {self.worker_replicas} does not match the "
                                f"{len(workers)} address(es) in --worker_hosts")
        if len(ps) != self.num_ps_tasks or self.num_ps_tasks < 1:
            raise BadInputError(f"--num_ps_tasks {self.num_ps_tasks} must be >= 1 and match "
                                f"the {len(ps)} address(es) in --ps_hosts")
        count = self.worker_replicas if self.job_name == "worker" else self.num_ps_tasks
        if not 0 <= self.task < count:
            raise BadInputError(f"--task {self.task} is not in 0..{count - 1} "
                                f"for job {self.job_name}")
        if len(set(workers + ps)) != len(workers) + len(ps):
            raise BadInputError("--worker_hosts and --ps_hosts name one address twice")
        if not 0 <= self.replicas_to_aggregate <= self.worker_replicas:
            raise BadInputError(f"--replicas_to_aggregate {self.replicas_to_aggregate} must be "
                                f"in 0..--worker_replicas ({self.worker_replicas})")
        if self.serve_ps and not self.is_chief:
            raise BadInputError("--serve_ps is for the chief (--job_name worker --task 0)")

    def to_argv(self) -> list[str]:
        """The command-line flags that parse back into this config (defaults left out)."""
        argv: list[str] = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value == f.default and f.name != "train_dir":
                continue
            if isinstance(value, bool):
                argv.append(f"--{f.name}" if value else f"--no{f.name}")
            else:
                argv += [f"--{f.name}", str(value)]
        return argv


def host_list(text: str, flag: str) -> list[str]:
    """The ``host:port`` addresses in a comma-separated flag (BadInputError if malformed)."""
    out = []
    for item in filter(None, (x.strip() for x in text.split(","))):
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise BadInputError(f"--{flag}: {item!r} is not host:port")
        out.append(item)
    return out


def _bool_flag(parser: argparse.ArgumentParser, name: str, default: bool, help_: str) -> None:
    parser.add_argument(f"--{name}", dest=name, action="store_true", default=default, help=help_)
    parser.add_argument(f"--no{name}", dest=name, action="store_false", help=argparse.SUPPRESS)


def build_parser(prog: str = "tfgshare train") -> argparse.ArgumentParser:
    """The runner's argument parser; one flag per TrainConfig field."""
    parser = argparse.ArgumentParser(
        prog=prog, description="Train one TF-Slim image classifier; suspendable and resumable.")
    helps = {
        "train_dir": "checkpoints and sample.json go here; an existing one is resumed",
        "num_gpus": "towers (model replicas) with averaged gradients; on CPU all on /cpu:0",
        "memory_fraction": "per_process_gpu_memory_fraction of each GPU",
        "sample_only": "run the sampling phase, checkpoint and exit with EXIT_SUSPENDED",
        "events_file": "append one JSON event per line here",
        "num_classes": "classes of the synthetic dataset",
        "image_size": "square input size (default: the net's default)",
        "job_name": "'worker' or 'ps': this process is one task of a gang (between-graph "
                    "replication with parameter servers, as TF-Slim's train_image_classifier)",
        "task": "this process's task index in --job_name; worker 0 is the chief and owns "
                "the checkpoint",
        "ps_hosts": "the parameter servers, host:port,...",
        "worker_hosts": "the workers, host:port,... (one per --worker_replicas)",
        "sync_replicas": "aggregate the workers' gradients with SyncReplicasOptimizer",
        "replicas_to_aggregate": "gradients per update with --sync_replicas "
                                 "(0: --worker_replicas)",
        "serve_ps": "the chief also runs the --ps_hosts servers in its own process",
        "epoch": "this attempt's number from the coordinator: checkpoints go under "
                 "train_dir/attempt-EPOCH and never replace a newer attempt's (0: no fencing)",
    }
    for f in dataclasses.fields(TrainConfig):
        help_ = helps.get(f.name)
        if f.type in ("bool", bool):
            _bool_flag(parser, f.name, f.default, help_ or "")
            continue
        kind = {"int": int, "float": float}.get(str(f.type).split(" ")[0], str)
        if f.name == "train_dir":
            parser.add_argument("--train_dir", required=True, help=help_)
        elif f.name == "image_size":   # also TF-Slim's name, which JobSpec.runner_args uses
            parser.add_argument("--image_size", "--train_image_size", type=int,
                                default=f.default, help=help_)
        elif f.name == "optimizer":
            parser.add_argument("--optimizer", choices=OPTIMIZERS, default=f.default)
        elif f.name == "learning_rate_decay_type":
            parser.add_argument("--learning_rate_decay_type", choices=DECAY_TYPES,
                                default=f.default)
        else:
            parser.add_argument(f"--{f.name}", type=kind, default=f.default, help=help_)
    return parser


def parse_args(argv: list[str]) -> TrainConfig:
    """Parse runner flags into a TrainConfig (argparse exits with 2 on bad syntax)."""
    namespace = build_parser().parse_args(argv)
    return TrainConfig(**vars(namespace))
