"""The wire schema shared by the coordinator, node agents and clients.

Every message is one ZeroMQ frame holding one UTF-8 JSON object::

    {"v": 1, "type": "<type>", "id": "<request id>", ...fields}

Each message type is a plain dataclass below. ``encode`` turns one into bytes;
``decode`` parses bytes, checks the version, the type and every field, and
raises ``SchemaError`` with a message naming the problem. Replies carry the
request's ``id`` and are ``ok`` (free-form fields) or ``error`` (``reason``).

Who sends what:

- agent -> coordinator: ``register``, ``heartbeat``, ``job_event``, ``job_exit``
  (all but ``register`` are refused from a peer that has not registered);
- coordinator -> agent: ``start_job``, ``suspend_job``, ``cancel_job``,
  ``adopt``, ``kill`` (the agent answers each with ``ok`` or ``error``);
- client -> coordinator: ``submit``, ``status``, ``nodes``, ``logs``,
  ``cancel``, ``suspend``, ``resume``, ``migrate``, ``metrics``.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Union

VERSION = 1
MAX_MESSAGE_BYTES = 1 << 20   # larger frames are dropped by ZMQ (ZMQ_MAXMSGSIZE)


class SchemaError(ValueError):
    """A message that is not valid under this schema; the text says why."""


def new_id() -> str:
    """A fresh request id."""
    return uuid.uuid4().hex[:12]


# ---- nested records --------------------------------------------------------


@dataclass
class JobSpec:
    """What a user asks to train: a TF-Slim model and its flags, and resources."""

    model_name: str
    name: str = ""
    dataset_name: str = "synthetic"
    dataset_dir: str | None = None
    batch_size: int = 32
    max_number_of_steps: int = 1000
    optimizer: str | None = None
    learning_rate: float | None = None
    learning_rate_decay_type: str | None = None
    weight_decay: float | None = None
    image_size: int | None = None
    num_classes: int | None = None
    num_gpus: int = 1
    memory_fraction: float | str = "auto"   # a fraction in (0, 1], or "auto"
    priority: int = 0
    extra: list[str] = field(default_factory=list)   # more runner flags, verbatim

    def check(self) -> None:
        """Raise SchemaError if a field is out of range."""
        if not self.model_name:
            raise SchemaError("model_name must not be empty")
        for name in ("batch_size", "max_number_of_steps", "num_gpus"):
            if getattr(self, name) < 1:
                raise SchemaError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.image_size is not None and self.image_size < 1:
            raise SchemaError(f"image_size must be >= 1, got {self.image_size}")
        if self.num_classes is not None and self.num_classes < 1:
            raise SchemaError(f"num_classes must be >= 1, got {self.num_classes}")
        if isinstance(self.memory_fraction, str):
            if self.memory_fraction != "auto":
                raise SchemaError(
                    f"memory_fraction must be a number in (0, 1] or 'auto', "
                    f"got {self.memory_fraction!r}")
        elif not 0.0 < self.memory_fraction <= 1.0:
            raise SchemaError(
                f"memory_fraction must be in (0, 1], got {self.memory_fraction}")

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
        return args + list(self.extra)


@dataclass
class GpuInfo:
    """A GPU an agent offers at registration."""

    index: int
    name: str
    memory_mb: int
    virtual: bool = False


@dataclass
class RunningJob:
    """A runner still alive on an agent, reported at (re-)registration."""

    job: str
    pid: int
    step: int = 0
    attempt: int | None = None


@dataclass
class GpuTelemetry:
    """One GPU's load in a heartbeat."""

    index: int
    util: float = 0.0
    memory_used_mb: float = 0.0


@dataclass
class JobTelemetry:
    """One job's progress and real GPU memory (per GPU index) in a heartbeat."""

    job: str
    step: int = 0
    gpu_memory_mb: dict[int, float] = field(default_factory=dict)


@dataclass
class FragmentSpec:
    """One fragment of a job on the agent's GPU ``gpu_index``."""

    gpu_index: int
    fraction: float


# ---- messages --------------------------------------------------------------


@dataclass(kw_only=True)
class Message:
    """Base of every message: its request id."""

    TYPE: ClassVar[str] = ""
    id: str = field(default_factory=new_id)


# agent -> coordinator

@dataclass(kw_only=True)
class Register(Message):
    """An agent joins (or re-joins) with its GPUs and the runners it still has."""

    TYPE: ClassVar[str] = "register"
    node: str
    gpus: list[GpuInfo]
    jobs: list[RunningJob] = field(default_factory=list)
    token: str | None = None


@dataclass(kw_only=True)
class Heartbeat(Message):
    """Periodic telemetry from an agent."""

    TYPE: ClassVar[str] = "heartbeat"
    node: str
    gpus: list[GpuTelemetry] = field(default_factory=list)
    jobs: list[JobTelemetry] = field(default_factory=list)


@dataclass(kw_only=True)
class JobEvent(Message):
    """One runner event (see ``tfgshare.runner.protocol.EVENTS``), forwarded."""

    TYPE: ClassVar[str] = "job_event"
    node: str
    job: str
    attempt: int
    event: dict[str, Any]


@dataclass(kw_only=True)
class JobExit(Message):
    """A runner process ended with ``exit_code`` (see runner_protocol)."""

    TYPE: ClassVar[str] = "job_exit"
    node: str
    job: str
    attempt: int
    exit_code: int
    reason: str = ""


# coordinator -> agent

@dataclass(kw_only=True)
class StartJob(Message):
    """Start (or resume from ``train_dir``) a job's runner on these fragments."""

    TYPE: ClassVar[str] = "start_job"
    job: str
    attempt: int
    spec: JobSpec
    fragments: list[FragmentSpec]
    train_dir: str
    sample_only: bool = False


@dataclass(kw_only=True)
class SuspendJob(Message):
    """Ask a runner to checkpoint and exit (SIGUSR1); it then sends job_exit 75."""

    TYPE: ClassVar[str] = "suspend_job"
    job: str
    attempt: int


@dataclass(kw_only=True)
class CancelJob(Message):
    """Stop a runner for good (SIGKILL is fine); it then sends job_exit."""

    TYPE: ClassVar[str] = "cancel_job"
    job: str
    attempt: int


@dataclass(kw_only=True)
class AdoptJob(Message):
    """A reported runner is kept: report it from now on under ``attempt``."""

    TYPE: ClassVar[str] = "adopt"
    job: str
    attempt: int


@dataclass(kw_only=True)
class KillJob(Message):
    """A reported runner is not wanted (placed elsewhere or done): kill it quietly."""

    TYPE: ClassVar[str] = "kill"
    job: str


# client -> coordinator

@dataclass(kw_only=True)
class Submit(Message):
    """Queue one or more jobs; the reply carries ``job_ids`` in the same order."""

    TYPE: ClassVar[str] = "submit"
    jobs: list[JobSpec]


@dataclass(kw_only=True)
class Status(Message):
    """All jobs (reply ``jobs``, and ``counts`` by state), or one (reply ``job``).

    ``active`` lists only the jobs not finished, failed or cancelled.
    """

    TYPE: ClassVar[str] = "status"
    job: str | None = None
    active: bool = False


@dataclass(kw_only=True)
class Nodes(Message):
    """Nodes, GPUs and fragments (reply ``nodes``)."""

    TYPE: ClassVar[str] = "nodes"


@dataclass(kw_only=True)
class Logs(Message):
    """A job's log lines (reply ``lines``); ``tail`` keeps the last N."""

    TYPE: ClassVar[str] = "logs"
    job: str
    tail: int | None = None


@dataclass(kw_only=True)
class CancelRequest(Message):
    """Cancel a job, running or not."""

    TYPE: ClassVar[str] = "cancel"
    job: str


@dataclass(kw_only=True)
class SuspendRequest(Message):
    """Suspend a job and keep it suspended until resumed."""

    TYPE: ClassVar[str] = "suspend"
    job: str


@dataclass(kw_only=True)
class ResumeRequest(Message):
    """Let a manually suspended job be scheduled again."""

    TYPE: ClassVar[str] = "resume"
    job: str


@dataclass(kw_only=True)
class MigrateRequest(Message):
    """Move a job to GPU ``to`` ("NODE:GPU") if its fragment fits there."""

    TYPE: ClassVar[str] = "migrate"
    job: str
    to: str


@dataclass(kw_only=True)
class MetricsRequest(Message):
    """The metrics report (reply ``report``: text, ``summary``: numbers, ``jobs``: rows,
    ``rounds``: scheduling round times since round number ``since_round``)."""

    TYPE: ClassVar[str] = "metrics"
    since_round: int = 0


# replies

@dataclass(kw_only=True)
class Ok(Message):
    """A successful reply; ``fields`` are sent flat beside v/type/id."""

    TYPE: ClassVar[str] = "ok"
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(kw_only=True)
class Error(Message):
    """A refused or failed request, with the reason."""

    TYPE: ClassVar[str] = "error"
    reason: str


MESSAGES: dict[str, type[Message]] = {cls.TYPE: cls for cls in (
    Register, Heartbeat, JobEvent, JobExit,
    StartJob, SuspendJob, CancelJob, AdoptJob, KillJob,
    Submit, Status, Nodes, Logs, CancelRequest, SuspendRequest, ResumeRequest,
    MigrateRequest, MetricsRequest, Ok, Error)}

AGENT_TYPES = frozenset({"heartbeat", "job_event", "job_exit"})   # need a registered peer
COMMAND_TYPES = frozenset({"start_job", "suspend_job", "cancel_job", "adopt", "kill"})
CLIENT_TYPES = frozenset({"submit", "status", "nodes", "logs", "cancel", "suspend",
                          "resume", "migrate", "metrics"})
REPLY_TYPES = frozenset({"ok", "error"})


# ---- encode / decode -------------------------------------------------------


def to_dict(msg: Message) -> dict[str, Any]:
    """The JSON object for ``msg`` (with v, type and id)."""
    out: dict[str, Any] = {"v": VERSION, "type": msg.TYPE, "id": msg.id}
    if isinstance(msg, Ok):
        out.update(msg.fields)
    else:
        body = plain(msg)
        del body["id"]
        out.update(body)
    return out


_NAMES: dict[type, tuple[str, ...]] = {}


def plain(obj: Any) -> Any:
    """Dataclasses, lists and dicts as plain JSON-ready data (a fast ``asdict``)."""
    cls = type(obj)
    if cls in (str, int, float, bool) or obj is None:
        return obj
    if cls is list or cls is tuple:
        return [plain(v) for v in obj]
    if cls is dict:
        return {k: plain(v) for k, v in obj.items()}
    names = _NAMES.get(cls)
    if names is None:
        if not dataclasses.is_dataclass(cls):
            return obj
        names = _NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return {n: plain(getattr(obj, n)) for n in names}


def encode(msg: Message) -> bytes:
    """Serialize ``msg`` to one frame."""
    return json.dumps(to_dict(msg), separators=(",", ":")).encode()


def decode(data: bytes | str, max_bytes: int | None = MAX_MESSAGE_BYTES) -> Message:
    """Parse and validate one frame; raise SchemaError naming the problem.

    ``max_bytes`` bounds requests; clients reading replies (a status of many
    jobs can be large) pass None.
    """
    if max_bytes is not None and len(data) > max_bytes:
        raise SchemaError(f"message of {len(data)} bytes exceeds {max_bytes}")
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SchemaError(f"malformed JSON: {exc}") from None
    return from_dict(obj)


def from_dict(obj: Any) -> Message:
    """Validate a decoded JSON object and build its message."""
    if not isinstance(obj, dict):
        raise SchemaError(f"a message must be a JSON object, got {type(obj).__name__}")
    if "v" not in obj:
        raise SchemaError("missing version field 'v'")
    if obj["v"] != VERSION:
        raise SchemaError(f"unsupported version {obj['v']!r} (this side speaks {VERSION})")
    kind = obj.get("type")
    if not isinstance(kind, str):
        raise SchemaError("missing or non-string field 'type'")
    cls = MESSAGES.get(kind)
    if cls is None:
        raise SchemaError(f"unknown message type {kind!r}")
    msg_id = obj.get("id", "")
    if not isinstance(msg_id, str):
        raise SchemaError(f"{kind}: field 'id' must be a string")
    body = {k: v for k, v in obj.items() if k not in ("v", "type", "id")}
    if cls is Ok:
        return Ok(id=msg_id, fields=body)
    return _build(cls, body, kind, msg_id)


def job_spec(obj: Any, where: str = "job") -> JobSpec:
    """Validate a mapping of JobSpec fields (from YAML, say) and build the spec."""
    return _build(JobSpec, obj, where)


def reply_ok(request: Message | str, **fields: Any) -> Ok:
    """An ``ok`` reply to ``request`` (a message or its id)."""
    rid = request if isinstance(request, str) else request.id
    return Ok(id=rid, fields=fields)


def reply_error(request: Message | str, reason: str) -> Error:
    """An ``error`` reply to ``request`` (a message or its id)."""
    rid = request if isinstance(request, str) else request.id
    return Error(id=rid, reason=reason)


# ---- validation: one converter per type, built once ---------------------------

Converter = Callable[[Any, str], Any]
_CONVERTERS: dict[Any, Converter] = {}
_FIELDS: dict[type, tuple[dict[str, Converter], frozenset[str]]] = {}


def _fields(cls: type) -> tuple[dict[str, Converter], frozenset[str]]:
    """Per dataclass: a converter per init field (but id), and the required names."""
    got = _FIELDS.get(cls)
    if got is None:
        hints = typing.get_type_hints(cls)
        convs, required = {}, set()
        for f in dataclasses.fields(cls):
            if not f.init or f.name == "id":
                continue
            convs[f.name] = _converter(hints[f.name])
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                required.add(f.name)
        got = _FIELDS[cls] = (convs, frozenset(required))
    return got


def _build(cls: type, body: Any, where: str, msg_id: str | None = None) -> Any:
    if type(body) is not dict:
        raise SchemaError(f"{where}: expected an object, got {_json_name(body)}")
    convs, required = _fields(cls)
    for name in body:
        if name not in convs:
            unknown = sorted(set(body) - set(convs))
            raise SchemaError(f"{where}: unknown field(s) {', '.join(unknown)}")
    for name in required:
        if name not in body:
            raise SchemaError(f"{where}: missing field '{name}'")
    kwargs = {name: convs[name](value, f"{where}.{name}") for name, value in body.items()}
    if msg_id is not None:
        kwargs["id"] = msg_id
    obj = cls(**kwargs)
    check = getattr(obj, "check", None)
    if check is not None:
        try:
            check()
        except SchemaError as exc:
            raise SchemaError(f"{where}: {exc}") from None
    return obj


def _converter(tp: Any) -> Converter:
    conv = _CONVERTERS.get(tp)
    if conv is None:
        conv = _CONVERTERS[tp] = _make_converter(tp)
    return conv


def _fail(tp: Any, value: Any, where: str) -> SchemaError:
    return SchemaError(f"{where}: expected {_type_name(tp)}, got {_json_name(value)}")


def _make_converter(tp: Any) -> Converter:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        options = [a for a in typing.get_args(tp) if a is not type(None)]
        nullable = len(options) < len(typing.get_args(tp))
        convs = [_converter(a) for a in options]
        names = " or ".join(_type_name(a) for a in typing.get_args(tp))

        def union(value: Any, where: str) -> Any:
            if value is None and nullable:
                return None
            for conv in convs:
                try:
                    return conv(value, where)
                except SchemaError:
                    continue
            raise SchemaError(f"{where}: expected {names}, got {_json_name(value)}")
        return union
    if tp is type(None):
        def none(value: Any, where: str) -> Any:
            if value is None:
                return None
            raise _fail(tp, value, where)
        return none
    if tp is Any:
        return lambda value, where: value
    if tp in (bool, str):
        def exact(value: Any, where: str) -> Any:
            if type(value) is tp:
                return value
            raise _fail(tp, value, where)
        return exact
    if tp is int:
        def integer(value: Any, where: str) -> Any:
            if type(value) is int:
                return value
            raise _fail(tp, value, where)
        return integer
    if tp is float:
        def number(value: Any, where: str) -> Any:
            if type(value) is float:
                return value
            if type(value) is int:
                return float(value)
            raise _fail(tp, value, where)
        return number
    if origin is list:
        (item_type,) = typing.get_args(tp)
        item = _converter(item_type)

        def listing(value: Any, where: str) -> Any:
            if type(value) is not list:
                raise _fail(tp, value, where)
            return [item(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return listing
    if origin is dict:
        key_type, value_type = typing.get_args(tp)
        item = _converter(value_type)

        def mapping(value: Any, where: str) -> Any:
            if type(value) is not dict:
                raise _fail(tp, value, where)
            out = {}
            for k, v in value.items():
                key = k
                if key_type is int:
                    try:
                        key = int(k)
                    except (TypeError, ValueError):
                        raise SchemaError(f"{where}: key {k!r} is not an integer") from None
                out[key] = item(v, f"{where}[{k!r}]")
            return out
        return mapping
    if dataclasses.is_dataclass(tp):
        return lambda value, where: _build(tp, value, where)
    raise TypeError(f"no converter for {tp!r}")


def _type_name(tp: Any) -> str:
    if tp is type(None):
        return "null"
    origin = typing.get_origin(tp)
    if origin is list:
        return "list"
    if origin is dict:
        return "object"
    if dataclasses.is_dataclass(tp):
        return f"{tp.__name__} object"
    return getattr(tp, "__name__", str(tp))


def _json_name(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "bool", int: "int", float: "float", str: "str", list: "list",
            dict: "object"}.get(type(value), type(value).__name__)
