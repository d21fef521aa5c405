"""A small ZeroMQ client for the coordinator (used by the CLI, the demo and tests).

Each request waits at most ``timeout_s`` for its reply: an unreachable
coordinator raises ``Unreachable`` instead of hanging, and a refused request
raises ``Refused`` with the coordinator's reason. With a key (``key`` or
$TFGSHARE_KEY, see ``tfgshare.keys``) the socket is a CurveZMQ client; a failed
secure handshake (no key for a keyed coordinator, the wrong coordinator key)
raises ``AuthFailed`` at once instead of waiting out the timeout.
"""

from __future__ import annotations

import os
import time
from typing import Any, Sequence

import zmq

from tfgshare import keys
from tfgshare import schema as s

DEFAULT_ADDRESS = "tcp://127.0.0.1:5555"


def default_address() -> str:
    """$TFGSHARE_COORDINATOR, else tcp://127.0.0.1:5555."""
    return os.environ.get("TFGSHARE_COORDINATOR") or DEFAULT_ADDRESS


class ClientError(Exception):
    """A request did not succeed."""


class Unreachable(ClientError):
    """No reply from the coordinator in time."""


class Refused(ClientError):
    """The coordinator answered with an error: the text is its reason, ``code`` what a
    program decides by (an ``ErrorCode``)."""

    def __init__(self, reason: str, code: s.ErrorCode = s.ErrorCode.UNKNOWN) -> None:
        super().__init__(reason)
        self.code = code


class AuthFailed(ClientError):
    """The secure handshake with the coordinator failed (missing or wrong keys)."""


class Client:
    """Requests to one coordinator over a DEALER socket."""

    def __init__(self, address: str | None = None, timeout_s: float = 1.0,
                 key: str | None = None, server_key: str | None = None) -> None:
        self.address = address or default_address()
        self.timeout_s = timeout_s
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._keyed = keys.client_files(key, server_key)
        self._handshake = keys.HandshakeWatch(self._sock)
        self._poller = zmq.Poller()
        self._poller.register(self._sock, zmq.POLLIN)
        self._poller.register(self._handshake.monitor, zmq.POLLIN)
        try:
            keys.secure_client(self._sock, self._keyed)
            self._sock.connect(self.address)
        except keys.KeysError as exc:
            self.close()
            raise ClientError(str(exc)) from None
        except zmq.ZMQError as exc:
            self.close()
            raise ClientError(f"bad coordinator address {self.address!r}: {exc}") from None

    def close(self) -> None:
        """Close the socket."""
        self._handshake.close()
        self._sock.close(0)
        self._ctx.term()

    def _check_handshake(self) -> None:
        """Raise AuthFailed if the secure handshake has failed."""
        if not self._handshake.failed():
            return
        if self._keyed is None:
            raise AuthFailed(f"the coordinator at {self.address} requires a CurveZMQ key and "
                             "this client has none: pass --key (and --server-key) or set "
                             "TFGSHARE_KEY (see `tfgshare keys`)")
        raise AuthFailed(f"secure handshake with the coordinator at {self.address} failed: "
                         f"check that {self._keyed[1]} is this coordinator's public key and "
                         "that it uses keys at all")

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        """Send one frame as is (tests use this for malformed frames)."""
        self._send(data, time.monotonic() + self.timeout_s, self.timeout_s)

    def _send(self, frame: bytes, deadline: float, timeout: float) -> None:
        """Queue ``frame``, waiting until ``deadline`` at most: a socket whose handshake
        failed has no connection left to queue on, and a blocking send would wait forever."""
        while True:
            self._check_handshake()
            try:
                self._sock.send(frame, zmq.NOBLOCK)
                return
            except zmq.Again:
                pass
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._unreachable(timeout)
            self._handshake.monitor.poll(min(left, 0.05) * 1000)

    def _unreachable(self, timeout: float) -> Unreachable:
        return Unreachable(f"no answer from the coordinator at {self.address} within "
                           f"{timeout:g}s; is it running? (set --coordinator or "
                           "TFGSHARE_COORDINATOR)")

    def recv_raw(self, timeout_s: float | None = None) -> bytes | None:
        """The next frame, or None after the timeout."""
        if self._sock.poll((self.timeout_s if timeout_s is None else timeout_s) * 1000):
            return self._sock.recv()
        return None

    def request(self, msg: s.Message, timeout_s: float | None = None) -> dict[str, Any]:
        """Send ``msg`` and return the ``ok`` reply's fields; raise on error or timeout."""
        timeout = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout
        self._send(s.encode(msg), deadline, timeout)
        while True:
            left = deadline - time.monotonic()
            ready = dict(self._poller.poll(left * 1000)) if left > 0 else {}
            if self._handshake.monitor in ready:
                self._check_handshake()
            if self._sock not in ready:
                if time.monotonic() < deadline:
                    continue
                raise self._unreachable(timeout)
            reply = s.decode(self._sock.recv(), max_bytes=None)
            if reply.id != msg.id:
                continue   # a late reply to an earlier request
            if isinstance(reply, s.Error):
                raise Refused(reply.reason, reply.code)
            if not isinstance(reply, s.Ok):
                raise ClientError(f"unexpected reply type {reply.TYPE!r}")
            return reply.fields

    # ---- the requests --------------------------------------------------------

    def submit(self, specs: list[s.JobSpec]) -> list[str]:
        """Queue jobs; return their ids."""
        return self.request(s.Submit(jobs=list(specs)))["job_ids"]

    def status(self, job: str | None = None, active: bool = False,
               page_size: int | None = None) -> dict[str, Any]:
        """Every job (``jobs``, ``counts`` by state), only those not done, or one (``job``).

        The coordinator answers a page of jobs at a time; this follows the pages.
        """
        if job is not None:
            return self.request(s.Status(job=job))
        answer = self.request(s.Status(active=active, limit=page_size))
        jobs = answer["jobs"]
        while answer.get("next_cursor") is not None:
            answer = self.request(s.Status(active=active, limit=page_size,
                                           cursor=answer["next_cursor"]))
            jobs += answer["jobs"]
        answer["jobs"] = jobs
        return answer

    def jobs(self, active: bool = False) -> list[dict[str, Any]]:
        """Every job (or those not done) as the status command shows it."""
        return self.status(active=active)["jobs"]

    def job(self, job: str) -> dict[str, Any]:
        """One job as the status command shows it."""
        return self.status(job)["job"]

    def nodes(self) -> list[dict[str, Any]]:
        """Nodes, their GPUs and the fragments on them."""
        return self.request(s.Nodes())["nodes"]

    def logs(self, job: str, tail: int | None = None, page_size: int | None = None
             ) -> list[str]:
        """A job's log lines (the last ``tail``), following the coordinator's pages."""
        answer = self.request(s.Logs(job=job, tail=tail, limit=page_size))
        lines = answer["lines"]
        while answer.get("next_cursor") is not None:
            answer = self.request(s.Logs(job=job, tail=tail, limit=page_size,
                                         cursor=answer["next_cursor"]))
            lines += answer["lines"]
        return lines

    def cancel(self, job: str) -> dict[str, Any]:
        """Cancel a job."""
        return self.request(s.CancelRequest(job=job))

    def suspend(self, job: str) -> dict[str, Any]:
        """Suspend a job and hold it until resumed."""
        return self.request(s.SuspendRequest(job=job))

    def resume(self, job: str) -> dict[str, Any]:
        """Release a held job."""
        return self.request(s.ResumeRequest(job=job))

    def migrate(self, job: str, to: str | Sequence[str]) -> dict[str, Any]:
        """Move a job to GPU ``to`` ("NODE:GPU"); a job on several GPUs to as many
        ("NODE:GPU,NODE:GPU" or a list), moved as one."""
        if not isinstance(to, str):
            to = ",".join(to)
        return self.request(s.MigrateRequest(job=job, to=to))

    def metrics(self, since_round: int = 0) -> dict[str, Any]:
        """The run report (``report`` text, ``summary``, per-job ``jobs`` rows, ``rounds``)."""
        return self.request(s.MetricsRequest(since_round=since_round))

    def wait_for(self, job: str, states: set[str] | str, timeout_s: float = 30.0,
                 poll_s: float = 0.05) -> dict[str, Any]:
        """Poll until ``job`` is in one of ``states``; return it, or raise TimeoutError."""
        states = {states} if isinstance(states, str) else set(states)
        deadline = time.monotonic() + timeout_s
        while True:
            info = self.job(job)
            if info["state"] in states:
                return info
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job} is {info['state']}, not {sorted(states)}, "
                                   f"after {timeout_s:g}s")
            time.sleep(poll_s)
