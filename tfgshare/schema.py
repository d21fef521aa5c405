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

This module owns the messages, their encoding and decoding, and the replies. The
records they carry sit beside it, each re-exported here so every part imports
the schema from this one place: ``schema_jobs`` (``JobSpec`` and the runner flags
a job may carry), ``schema_records`` (GPUs, runners, telemetry, gang parts,
fragments), ``schema_fields`` (the constrained field types), ``schema_errors``
(``SchemaError``, ``ErrorCode``, ``FrameProblem``).

May import: those four modules, msgspec and the standard library only. Every part
(coordinator, agent, client, policies, simulator, runner contract) imports this
module, so it imports none of them.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, ClassVar, Union

import msgspec
from msgspec import UNSET, Meta, Struct, field

# the job record, the nested records and the field types live beside this module; they
# are re-exported here, so ``schema.JobSpec`` and the rest are where they always were
from .schema_errors import ErrorCode, FrameProblem, SchemaError, in_our_words
from .schema_fields import (  # noqa: F401  (re-exported)
    MAX_LOG_PAGE, MAX_PAGE, DecayType, Fraction, HostPort, Name, NonEmptyName, NonNegative,
    Optimizer, PageSize, PathText, Port, Positive, Text, Unit)
from .schema_jobs import (  # noqa: F401  (re-exported)
    AGENT_FLAGS, FIELD_FLAGS, RUNNER_FLAGS, JobSpec, job_spec, runner_flags)
from .schema_records import (  # noqa: F401  (re-exported)
    FragmentSpec, GangMember, GpuInfo, GpuTelemetry, JobTelemetry, PortRange, RunningJob)

VERSION = 1
MAX_MESSAGE_BYTES = 1 << 20   # larger frames are dropped by ZMQ (ZMQ_MAXMSGSIZE)


def new_id() -> str:
    """A fresh request id."""
    return uuid.uuid4().hex[:12]


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
    """One runner event (see ``tfgshare.runner.protocol.EVENTS``), forwarded; ``held_s``:
    the seconds the agent held it before sending (a paced progress report,
    ``tfgshare.agent.pacer``)."""

    node: NonEmptyName
    job: Name
    attempt: int
    event: dict[str, Any]
    held_s: Annotated[float, Meta(ge=0.0, le=86400.0)] = 0.0


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


def reply_ok(request: Message | str, **fields: Any) -> Ok:
    """An ``ok`` reply to ``request`` (a message or its id)."""
    rid = request if isinstance(request, str) else request.id
    return Ok(id=rid, fields=fields)


def reply_error(request: Message | str, reason: str, *, code: ErrorCode) -> Error:
    """An ``error`` reply to ``request`` (a message or its id) with its code."""
    rid = request if isinstance(request, str) else request.id
    return Error(id=rid, reason=reason, code=code)
