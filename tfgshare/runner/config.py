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
