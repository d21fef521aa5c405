"""A job as the wire carries it: ``JobSpec``, and the runner flags a job may add.

Owns the job record a user submits (its fields, its runner command line), the
table of extra runner flags a job may carry in ``JobSpec.extra`` with the values
each accepts, the flags that are never a job's to set, and the checks of both
(``runner_flags``, ``job_spec``). ``tfgshare.schema`` re-exports every public
name here.

May import: ``schema_fields``, ``schema_errors``, msgspec and the standard library
only (it sits under every part; never the runner itself: its flags are restated).
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal, get_args, get_origin

import msgspec
from msgspec import Meta, Struct, field

from .schema_errors import SchemaError, in_our_words
from .schema_fields import (DecayType, Fraction, Name, NonEmptyName, Optimizer, PathText,
                            Unit)


class JobSpec(Struct, forbid_unknown_fields=True):
    """What a user asks to train: a TF-Slim model and its flags, and resources."""

    model_name: NonEmptyName
    name: Name = ""
    dataset_name: Name = "synthetic"
    dataset_dir: PathText | None = None      # confined to the agent's data roots
    batch_size: Annotated[int, Meta(ge=1, le=65536)] = 32
    max_number_of_steps: Annotated[int, Meta(ge=1, le=10**12)] = 1000
    optimizer: Optimizer | None = None
    learning_rate: Annotated[float, Meta(ge=0.0, le=100.0)] | None = None
    learning_rate_decay_type: DecayType | None = None
    weight_decay: Unit | None = None
    image_size: Annotated[int, Meta(ge=1, le=4096)] | None = None
    num_classes: Annotated[int, Meta(ge=2, le=1_000_000)] | None = None
    num_gpus: Annotated[int, Meta(ge=1, le=1024)] = 1
    memory_fraction: Fraction | Literal["auto"] = "auto"   # a fraction, or "auto"
    priority: Annotated[int, Meta(ge=-1000, le=1000)] = 0
    # more runner flags: only those in RUNNER_FLAGS, e.g. ["--log_every_n_steps", "5"]
    extra: Annotated[list[Name], Meta(max_length=64)] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.extra:
            runner_flags(self.extra)

    @property
    def requested_fraction(self) -> float | None:
        """The user-fixed fraction, or None when it is derived from sampling."""
        return None if self.memory_fraction == "auto" else float(self.memory_fraction)

    def runner_args(self) -> list[str]:
        """The runner's slim flags for this spec (not the fragment or paths)."""
        args = ["--model_name", self.model_name, "--dataset_name", self.dataset_name,
                "--batch_size", str(self.batch_size),
                "--max_number_of_steps", str(self.max_number_of_steps)]
        optional = {
            "--dataset_dir": self.dataset_dir, "--optimizer": self.optimizer,
            "--learning_rate": self.learning_rate,
            "--learning_rate_decay_type": self.learning_rate_decay_type,
            "--weight_decay": self.weight_decay, "--train_image_size": self.image_size,
            "--num_classes": self.num_classes,
        }
        for flag, value in optional.items():
            if value is not None:
                args += [flag, str(value)]
        # the checked extra flags first: should one slip through, the fields still win
        return list(self.extra) + args


# Runner flags a job may carry in ``JobSpec.extra`` (see tfgshare/runner/config.py), each
# with the values the runner accepts. Any other flag is refused at submit.
RUNNER_FLAGS: dict[str, Any] = {
    "dataset_split_name": Literal["train", "validation", "test"],
    "learning_rate_decay_factor": Fraction,
    "num_epochs_per_decay": Annotated[float, Meta(gt=0.0, le=1e6)],
    "end_learning_rate": Annotated[float, Meta(ge=0.0, le=100.0)],
    "momentum": Unit, "rmsprop_decay": Unit, "rmsprop_momentum": Unit,
    "opt_epsilon": Annotated[float, Meta(gt=0.0, le=10.0)],
    "adam_beta1": Unit, "adam_beta2": Unit,
    "label_smoothing": Annotated[float, Meta(ge=0.0, lt=1.0)],
    "seed": Annotated[int, Meta(ge=0, le=2**31 - 1)],
    "deterministic": bool,                   # --deterministic / --nodeterministic
    "warmup_steps": Annotated[int, Meta(ge=0, le=100_000)],
    "num_sample_steps": Annotated[int, Meta(ge=0, le=100_000)],
    "max_sample_share": Fraction,
    "save_interval_steps": Annotated[int, Meta(ge=0)],
    "save_interval_secs": Annotated[float, Meta(ge=0.0, le=1e7)],
    "max_to_keep": Annotated[int, Meta(ge=1, le=1000)],
    "log_every_n_steps": Annotated[int, Meta(ge=1)],
}
# runner flags that a JobSpec field sets (flag -> field): never from ``extra``
FIELD_FLAGS = {"model_name": "model_name", "dataset_name": "dataset_name",
               "dataset_dir": "dataset_dir", "batch_size": "batch_size",
               "max_number_of_steps": "max_number_of_steps", "optimizer": "optimizer",
               "learning_rate": "learning_rate",
               "learning_rate_decay_type": "learning_rate_decay_type",
               "weight_decay": "weight_decay", "image_size": "image_size",
               "train_image_size": "image_size", "num_classes": "num_classes",
               "num_gpus": "num_gpus", "memory_fraction": "memory_fraction"}
# runner flags the agent sets for every attempt
AGENT_FLAGS = frozenset({"train_dir", "events_file", "job_id", "sample_only", "epoch",
                         "intra_op_threads", "inter_op_threads",
                         # a gang member's place in its cluster (runner.replicas)
                         "job_name", "task", "ps_hosts", "worker_hosts", "num_ps_tasks",
                         "worker_replicas", "sync_replicas", "replicas_to_aggregate",
                         "serve_ps"})


def runner_flags(extra: list[str]) -> dict[str, Any]:
    """Check a job's extra runner flags; return them by name, or raise SchemaError."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(extra):
        token = extra[i]
        i += 1
        if not token.startswith("--"):
            raise SchemaError(f"extra: unexpected {token[:64]!r}; runner flags look like "
                              "--log_every_n_steps 5")
        name, eq, value = token[2:].partition("=")
        base = name[2:] if name.startswith("no") and RUNNER_FLAGS.get(name[2:]) is bool else name
        if base in FIELD_FLAGS:
            raise SchemaError(f"runner flag --{name} would override the job's validated "
                              f"field {FIELD_FLAGS[base]}; set that field instead")
        if base in AGENT_FLAGS:
            raise SchemaError(f"runner flag --{name} is set by the agent, not by a job")
        kind = RUNNER_FLAGS.get(base)
        if kind is None:
            raise SchemaError(f"unknown runner flag --{name[:64]} (allowed: "
                              f"{', '.join(sorted(RUNNER_FLAGS))})")
        if base in out:
            raise SchemaError(f"runner flag --{base} is given twice")
        if kind is bool:
            if eq:
                raise SchemaError(f"runner flag --{name} takes no value")
            out[base] = base == name
            continue
        if not eq:
            if i == len(extra):
                raise SchemaError(f"runner flag --{name} needs a value")
            value = extra[i]
            i += 1
        if _is_float(kind) and _not_finite(value):
            raise SchemaError(f"runner flag --{name} {value[:64]!r}: must be a finite number")
        try:
            out[base] = msgspec.convert(value, kind, strict=False)
        except msgspec.ValidationError as exc:
            why = str(exc).replace("`", "")
            raise SchemaError(f"runner flag --{name} {value[:64]!r}: {why[0].lower()}{why[1:]}"
                              ) from None
    return out


def _is_float(kind: Any) -> bool:
    """Whether a RUNNER_FLAGS type is a float (plain or with a range)."""
    return kind is float or (get_origin(kind) is Annotated and get_args(kind)[0] is float)


def _not_finite(value: str) -> bool:
    """Whether a flag's text reads as NaN or an infinity (``nan``, ``inf``, ``1e999``)."""
    try:
        return not math.isfinite(float(value))
    except ValueError:
        return False


def job_spec(obj: Any, where: str = "job") -> JobSpec:
    """Validate a mapping of JobSpec fields (from YAML, say) and build the spec.

    ``where`` names the record in the error (``job 2: batch_size must be >= 1``);
    empty, the error names only the field.
    """
    if isinstance(obj, dict):   # NaN and infinities fail every range check: say so first
        for key, value in obj.items():
            if isinstance(value, float) and not math.isfinite(value):
                at = f"{where}: " if where else ""
                raise SchemaError(f"{at}{key} must be a finite number, got {value}")
    try:
        return msgspec.convert(obj, JobSpec)
    except msgspec.ValidationError as exc:
        raise SchemaError(in_our_words(exc, where)) from None

