"""The wire schema shared by the coordinator, node agents and clients.

Every message is one ZeroMQ frame holding one UTF-8 JSON object::

    {"type": "<type>", "v": 1, "id": "<request id>", ...fields}

Each message type is a msgspec ``Struct`` below, tagged by its ``type`` field.
``encode`` turns one into bytes; ``decode`` checks the size, the version and
the type, then lets msgspec validate every field (types, ranges, lengths) in
one pass, and raises ``SchemaError`` with a message naming the field and the
problem. Replies carry the request's ``id`` and are ``ok`` (free-form fields)
or ``error`` (``reason`` for people, ``code`` for programs: ``ErrorCode``).

Who sends what:

A job across nodes gets one ``start_job`` per node, each with its ``gang``
part (``GangMember``); agents offer their gang ``address`` and ``ports`` at
``register``.

- agent -> coordinator: ``register``, ``heartbeat``, ``job_event``, ``job_exit``
  (all but ``register`` are refused from a peer that has not registered);
- coordinator -> agent: ``start_job``, ``suspend_job``, ``cancel_job``,
  ``adopt``, ``kill`` (the agent answers each with ``ok`` or ``error``);
- client -> coordinator: ``submit``, ``status``, ``nodes``, ``logs``,
  ``cancel``, ``suspend``, ``resume``, ``migrate``, ``metrics``.
"""

from __future__ import annotations

import math
import uuid
from typing import Annotated, Any, ClassVar, Literal, Union, get_args, get_origin

import msgspec
from msgspec import UNSET, Meta, Struct, field

from .schema_errors import ErrorCode, FrameProblem, SchemaError, in_our_words

VERSION = 1
MAX_MESSAGE_BYTES = 1 << 20   # larger frames are dropped by ZMQ (ZMQ_MAXMSGSIZE)


def new_id() -> str:
    """A fresh request id."""
    return uuid.uuid4().hex[:12]


# ---- field types -------------------------------------------------------------

Name = Annotated[str, Meta(max_length=256)]          # ids, node and job names
NonEmptyName = Annotated[str, Meta(min_length=1, max_length=256)]
PathText = Annotated[str, Meta(min_length=1, max_length=4096)]
Text = Annotated[str, Meta(max_length=65536)]
Positive = Annotated[int, Meta(ge=1)]
NonNegative = Annotated[int, Meta(ge=0)]
Fraction = Annotated[float, Meta(gt=0.0, le=1.0)]
MAX_PAGE = 500              # jobs per status reply (a reply stays well under 1 MiB)
MAX_LOG_PAGE = 10_000       # log lines per logs reply
PageSize = Annotated[int, Meta(ge=1, le=MAX_PAGE)]
Unit = Annotated[float, Meta(ge=0.0, le=1.0)]
Optimizer = Literal["sgd", "momentum", "rmsprop", "adam"]       # runner.config.OPTIMIZERS
DecayType = Literal["fixed", "exponential", "polynomial"]        # runner.config.DECAY_TYPES



# ---- nested records --------------------------------------------------------


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


class GpuInfo(Struct, forbid_unknown_fields=True):
    """A GPU an agent offers at registration."""

    index: NonNegative
    name: Name
    memory_mb: Positive
    virtual: bool = False


class RunningJob(Struct, forbid_unknown_fields=True):
    """A runner still alive on an agent, reported at (re-)registration."""

    job: Name
    pid: int
    step: NonNegative = 0
    attempt: int | None = None


class GpuTelemetry(Struct, forbid_unknown_fields=True):
    """One GPU's load in a heartbeat."""

    index: NonNegative
    util: float = 0.0
    memory_used_mb: float = 0.0


class JobTelemetry(Struct, forbid_unknown_fields=True):
    """One job's progress and real GPU memory (per GPU index) in a heartbeat."""

    job: Name
    step: NonNegative = 0
    gpu_memory_mb: dict[int, float] = field(default_factory=dict)


Port = Annotated[int, Meta(ge=1, le=65535)]
HostPort = Annotated[str, Meta(min_length=3, max_length=261, pattern=r"^[^\s,]+:[0-9]{1,5}$")]


class PortRange(Struct, forbid_unknown_fields=True):
    """Ports ``first``..``last`` (inclusive) an agent's gang members may listen on."""

    first: Port
    last: Port

    def __post_init__(self) -> None:
        if self.last < self.first:
            raise ValueError(f"port range {self.first}-{self.last} is empty")


class GangMember(Struct, forbid_unknown_fields=True):
    """One node's part of a job that spans nodes: worker ``task`` of the gang.

    Worker 0 is the chief: it owns the checkpoint and serves the ``ps_hosts``
    parameter servers in its own process (runner ``--serve_ps``).
    """

    task: NonNegative
    ps_hosts: Annotated[list[HostPort], Meta(min_length=1, max_length=64)]
    worker_hosts: Annotated[list[HostPort], Meta(min_length=2, max_length=1024)]

    def runner_args(self) -> list[str]:
        """The runner flags that make it this member (TF-Slim's names)."""
        args = ["--job_name", "worker", "--task", str(self.task),
                "--ps_hosts", ",".join(self.ps_hosts),
                "--worker_hosts", ",".join(self.worker_hosts),
                "--num_ps_tasks", str(len(self.ps_hosts)),
                "--worker_replicas", str(len(self.worker_hosts)), "--sync_replicas"]
        return args + (["--serve_ps"] if self.task == 0 else [])


class FragmentSpec(Struct, forbid_unknown_fields=True):
    """One fragment of a job on the agent's GPU ``gpu_index``."""

    gpu_index: NonNegative
    fraction: Fraction


# ---- messages --------------------------------------------------------------


class Message(Struct, kw_only=True, tag_field="type", forbid_unknown_fields=True):
    """Base of every message: the schema version and its request id."""

    TYPE: ClassVar[str] = ""
    v: int = VERSION
    id: Name = field(default_factory=new_id)


# agent -> coordinator

class Register(Message, tag="register"):
    """An agent joins (or re-joins) with its GPUs and the runners it still has."""

    node: NonEmptyName
    gpus: list[GpuInfo]
    jobs: list[RunningJob] = field(default_factory=list)
    # where other nodes reach this node's gang members, and the ports they may use
    # (both needed for a job that spans nodes to be placed here)
    address: Name = ""
    ports: PortRange | None = None
    # the folders it accepts a job's dataset dir under (None: not told), and whether the
    # checkpoint root the coordinator names is one too; the coordinator checks at submit
    data_roots: Annotated[list[PathText], Meta(max_length=64)] | None = None
    data_in_checkpoint_root: bool = False


class Heartbeat(Message, tag="heartbeat"):
    """Periodic telemetry from an agent."""

    node: NonEmptyName
    gpus: list[GpuTelemetry] = field(default_factory=list)
    jobs: list[JobTelemetry] = field(default_factory=list)


class JobEvent(Message, tag="job_event"):
    """One runner event (see ``tfgshare.runner.protocol.EVENTS``), forwarded."""

    node: NonEmptyName
    job: Name
    attempt: int
    event: dict[str, Any]


class JobExit(Message, tag="job_exit"):
    """A runner process ended with ``exit_code`` (see runner_protocol)."""

    node: NonEmptyName
    job: Name
    attempt: int
    exit_code: int
    reason: Text = ""


# coordinator -> agent

class StartJob(Message, tag="start_job"):
    """Start (or resume from ``train_dir``) a job's runner on these fragments."""

    job: Name
    attempt: int
    spec: JobSpec
    fragments: list[FragmentSpec]
    train_dir: PathText
    sample_only: bool = False
    gang: GangMember | None = None   # this node's part of a job that spans nodes


class SuspendJob(Message, tag="suspend_job"):
    """Ask a runner to checkpoint and exit (SIGUSR1); it then sends job_exit 75."""

    job: Name
    attempt: int


class CancelJob(Message, tag="cancel_job"):
    """Stop a runner for good (SIGKILL is fine); it then sends job_exit."""

    job: Name
    attempt: int


class AdoptJob(Message, tag="adopt"):
    """A reported runner is kept: report it from now on under ``attempt``."""

    job: Name
    attempt: int


class KillJob(Message, tag="kill"):
    """A reported runner is not wanted (placed elsewhere or done): kill it quietly."""

    job: Name


# client -> coordinator

class Submit(Message, tag="submit"):
    """Queue one or more jobs; the reply carries ``job_ids`` in the same order."""

    jobs: list[JobSpec]


class Status(Message, tag="status"):
    """One page of jobs (reply ``jobs``, ``counts`` by state, ``next_cursor``), or one job.

    ``active`` lists only the jobs not finished, failed or cancelled. A page holds
    at most ``limit`` jobs (default and cap: ``MAX_PAGE``) after job number
    ``cursor``; the reply's ``next_cursor`` asks for the next page (None: no more).
    """

    job: Name | None = None
    active: bool = False
    limit: PageSize | None = None
    cursor: NonNegative = 0


class Nodes(Message, tag="nodes"):
    """Nodes, GPUs and fragments (reply ``nodes``)."""


class Logs(Message, tag="logs"):
    """One page of a job's log lines (reply ``lines``, ``next_cursor``); ``tail``: the last N.

    A page holds at most ``limit`` lines (default and cap: ``MAX_LOG_PAGE``) after
    line ``cursor`` (an opaque number from the previous reply).
    """

    job: Name
    tail: NonNegative | None = None
    limit: Annotated[int, Meta(ge=1, le=10_000)] | None = None
    cursor: NonNegative = 0


class CancelRequest(Message, tag="cancel"):
    """Cancel a job, running or not."""

    job: Name


class SuspendRequest(Message, tag="suspend"):
    """Suspend a job and keep it suspended until resumed."""

    job: Name


class ResumeRequest(Message, tag="resume"):
    """Let a manually suspended job be scheduled again."""

    job: Name


class MigrateRequest(Message, tag="migrate"):
    """Move a job to GPU ``to`` ("NODE:GPU") if its fragment fits there; a job on
    several GPUs to as many, comma-separated (the first names its chief's node)."""

    job: Name
    to: Name


class MetricsRequest(Message, tag="metrics"):
    """The metrics report (reply ``report``: text, ``summary``: numbers, ``jobs``: rows,
    ``rounds``: scheduling round times since round number ``since_round``)."""

    since_round: NonNegative = 0


# replies

class Ok(Message, tag="ok"):
    """A successful reply; ``fields`` are sent flat beside v/type/id."""

    fields: dict[str, Any] = field(default_factory=dict)


class Error(Message, tag="error"):
    """A refused or failed request: ``code`` for programs, ``reason`` for people."""

    reason: Text
    code: ErrorCode = ErrorCode.UNKNOWN


_STRUCTS = (Register, Heartbeat, JobEvent, JobExit,
            StartJob, SuspendJob, CancelJob, AdoptJob, KillJob,
            Submit, Status, Nodes, Logs, CancelRequest, SuspendRequest, ResumeRequest,
            MigrateRequest, MetricsRequest, Error)
for _cls in (*_STRUCTS, Ok):
    _cls.TYPE = _cls.__struct_config__.tag
MESSAGES: dict[str, type[Message]] = {cls.TYPE: cls for cls in (*_STRUCTS, Ok)}

AGENT_TYPES = frozenset({"heartbeat", "job_event", "job_exit"})   # need a registered peer
COMMAND_TYPES = frozenset({"start_job", "suspend_job", "cancel_job", "adopt", "kill"})
CLIENT_TYPES = frozenset({"submit", "status", "nodes", "logs", "cancel", "suspend",
                          "resume", "migrate", "metrics"})
REPLY_TYPES = frozenset({"ok", "error"})


# ---- encode / decode -------------------------------------------------------


class _Envelope(Struct):
    """What every frame must carry; other fields are skipped at this step."""

    v: Any = UNSET
    type: Any = UNSET
    id: Any = ""


_P = FrameProblem   # what a SchemaError from decode says for programs
_encoder = msgspec.json.Encoder()
_envelope = msgspec.json.Decoder(_Envelope)
_any = msgspec.json.Decoder()
_messages = msgspec.json.Decoder(Union[_STRUCTS])   # tagged on "type"


def plain(obj: Any) -> Any:
    """Structs, dataclasses, lists and dicts as plain JSON-ready data."""
    return msgspec.to_builtins(obj)


def encode(msg: Message) -> bytes:
    """Serialize ``msg`` to one frame."""
    if type(msg) is Ok:
        return _encoder.encode({"type": "ok", "v": VERSION, "id": msg.id, **msg.fields})
    return _encoder.encode(msg)


def decode(data: bytes | str, max_bytes: int | None = MAX_MESSAGE_BYTES) -> Message:
    """Parse and validate one frame; raise SchemaError naming the problem.

    ``max_bytes`` bounds requests; clients reading replies (a status of many
    jobs can be large) pass None.
    """
    if max_bytes is not None and len(data) > max_bytes:
        raise SchemaError(f"message of {len(data)} bytes exceeds {max_bytes}", _P.TOO_LARGE)
    try:
        head = _envelope.decode(data)
    except RecursionError:
        raise SchemaError("message nested too deeply", _P.TOO_DEEP) from None
    except msgspec.DecodeError as exc:
        if isinstance(exc, msgspec.ValidationError):
            why = in_our_words(exc, "message", "a message must be a JSON object")
            raise SchemaError(why, _P.NOT_AN_OBJECT) from None
        raise SchemaError(f"malformed JSON: {exc}", _P.MALFORMED_JSON) from None
    if head.v is UNSET:
        raise SchemaError("missing version field 'v'", _P.BAD_VERSION)
    if type(head.v) is not int or head.v != VERSION:
        raise SchemaError(f"unsupported version {repr(head.v)[:32]} (this side speaks {VERSION})",
                          _P.BAD_VERSION)
    kind = head.type
    if type(kind) is not str:
        raise SchemaError("missing or non-string field 'type'", _P.BAD_TYPE)
    if kind not in MESSAGES:
        raise SchemaError(f"unknown message type {kind[:64]!r}", _P.BAD_TYPE)
    if type(head.id) is not str:
        raise SchemaError(f"{kind}: field 'id' must be a string", _P.BAD_ID)
    try:
        if kind == "ok":
            body = _any.decode(data)
            for key in ("v", "type", "id"):
                body.pop(key, None)
            return Ok(id=head.id, fields=body)
        return _messages.decode(data)
    except msgspec.ValidationError as exc:
        raise SchemaError(in_our_words(exc, kind)) from None
    except msgspec.DecodeError as exc:   # e.g. bad UTF-8 in a field the first pass skipped
        raise SchemaError(f"malformed JSON: {exc}", _P.MALFORMED_JSON) from None
    except RecursionError:
        raise SchemaError(f"{kind}: nested too deeply", _P.TOO_DEEP) from None


def request_id(data: bytes) -> str:
    """The ``id`` of a frame that may not be valid, or "" (to address an error reply)."""
    try:
        head = _envelope.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return ""
    return head.id[:256] if type(head.id) is str else ""


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


def reply_ok(request: Message | str, **fields: Any) -> Ok:
    """An ``ok`` reply to ``request`` (a message or its id)."""
    rid = request if isinstance(request, str) else request.id
    return Ok(id=rid, fields=fields)


def reply_error(request: Message | str, reason: str, *, code: ErrorCode) -> Error:
    """An ``error`` reply to ``request`` (a message or its id) with its code."""
    rid = request if isinstance(request, str) else request.id
    return Error(id=rid, reason=reason, code=code)
