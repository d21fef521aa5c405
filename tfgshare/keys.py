"""CurveZMQ keys: who may talk to the coordinator, and as whom.

A keys directory (by default ``keys/`` beside the coordinator's state file) holds::

    coordinator.key           the coordinator's public key (give it to every client)
    coordinator.key_secret    its secret key (0600)
    registered/NAME.key       the public key of each user, admin or agent it knows
    issued/NAME/              the key pair made for NAME, to hand over (0700):
        NAME.key_secret (0600), NAME.key, coordinator.key

Users, admins and agents are known by their public key: the coordinator reads
the ZAP User-Id of every frame (the client's public key, z85) and looks it up
among the registered keys (``Registry``). An agent's key name is the node name it
may register. ``tfgshare keys`` makes and registers keys; a client or agent finds
its secret key through ``--key`` / ``$TFGSHARE_KEY`` and the coordinator's public
key through ``--server-key`` / ``$TFGSHARE_SERVER_KEY`` (default: the
``coordinator.key`` beside its own key file).
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth
from zmq.utils.monitor import recv_monitor_message

ROLES = ("user", "admin", "agent")
SERVER = "coordinator"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class KeysError(Exception):
    """A key that cannot be made, found or read; the text says which and why."""


@dataclass(frozen=True)
class Identity:
    """A registered key: its name and role."""

    name: str
    role: str          # "user", "admin" or "agent"


METRICS_TOKEN = "metrics.token"   # bearer token for the metrics HTTP port (keys init)


def keys_dir_for(state: str | Path) -> Path:
    """The default keys directory: ``keys/`` beside the state file."""
    return Path(state).absolute().parent / "keys"


def initialised(keys_dir: Path) -> bool:
    """Whether ``keys init`` has made the coordinator's key pair here."""
    return (keys_dir / f"{SERVER}.key_secret").is_file()


def is_loopback(endpoint: str) -> bool:
    """Whether a ZMQ bind address is reachable only from this host."""
    if endpoint.startswith(("ipc://", "inproc://")):
        return True
    host = endpoint.partition("://")[2].rpartition(":")[0].strip("[]")
    return host in ("localhost", "::1") or host.startswith("127.")


# ---- making keys -------------------------------------------------------------


def init(keys_dir: Path) -> Path:
    """Make the coordinator's key pair (once); return the public key file."""
    keys_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(keys_dir, 0o700)
    (keys_dir / "registered").mkdir(exist_ok=True)
    (keys_dir / "issued").mkdir(exist_ok=True)
    if not initialised(keys_dir):
        public, secret = zmq.auth.create_certificates(str(keys_dir), SERVER)
        os.chmod(secret, 0o600)
    token = keys_dir / METRICS_TOKEN
    if not token.exists():
        fd = os.open(token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32) + "\n")
    return keys_dir / f"{SERVER}.key"


def metrics_token(keys_dir: Path) -> str | None:
    """The bearer token that scrapes of the metrics port need off loopback (None if not made)."""
    try:
        return (keys_dir / METRICS_TOKEN).read_text().strip() or None
    except FileNotFoundError:
        return None


def add(keys_dir: Path, name: str, role: str) -> Path:
    """Make and register a key pair for ``name``; return the folder to hand over."""
    if not initialised(keys_dir):
        raise KeysError(f"{keys_dir} has no coordinator key; run `tfgshare keys init` first")
    if not _NAME.match(name):
        raise KeysError(f"bad key name {name!r}: letters, digits, '_', '.', '-', "
                        "at most 64, starting with a letter or digit")
    if role not in ROLES:
        raise KeysError(f"bad role {role!r}; one of {', '.join(ROLES)}")
    if (keys_dir / "registered" / f"{name}.key").exists():
        raise KeysError(f"{name} is already registered; revoke it first")
    out = keys_dir / "issued" / name
    out.mkdir(parents=True, exist_ok=True)
    os.chmod(out, 0o700)
    public, secret = zmq.auth.create_certificates(str(out), name)
    os.chmod(secret, 0o600)
    shutil.copy(keys_dir / f"{SERVER}.key", out / f"{SERVER}.key")
    text = Path(public).read_text().replace("metadata\n", f'metadata\n    role = "{role}"\n', 1)
    (keys_dir / "registered" / f"{name}.key").write_text(text)
    return out


def revoke(keys_dir: Path, name: str) -> list[Path]:
    """Forget ``name``'s key: the coordinator refuses it from its next request on.

    Deletes ``registered/NAME.key`` and the key pair made for it (``issued/NAME/``),
    and returns what it deleted: the registered key, then the files of ``issued/NAME``.
    """
    registered = keys_dir / "registered" / f"{name}.key"
    if not registered.exists():
        raise KeysError(f"no registered key {name!r}")
    issued = keys_dir / "issued" / name
    gone = [registered] + (sorted(p for p in issued.rglob("*") if p.is_file())
                           if issued.is_dir() else [])
    registered.unlink()
    shutil.rmtree(issued, ignore_errors=True)
    return gone


def _role(path: Path) -> str:
    """The ``role`` metadata of a certificate file (``user`` if absent)."""
    for line in path.read_text().splitlines():
        key, eq, value = line.strip().partition("=")
        if eq and key.strip() == "role":
            return value.strip().strip('"')
    return "user"


class Registry:
    """The registered keys (z85 public key -> Identity), re-read when the folder changes."""

    def __init__(self, keys_dir: Path) -> None:
        self.dir = keys_dir / "registered"
        self._stamp: int | None = None
        self.by_key: dict[str, Identity] = {}
        self.refresh()

    def refresh(self) -> None:
        """Re-read the folder if a key was added or revoked since the last read."""
        try:
            stamp = self.dir.stat().st_mtime_ns
        except FileNotFoundError:
            stamp = 0
        if stamp == self._stamp:
            return
        self._stamp = stamp
        by_key = {}
        for path in sorted(self.dir.glob("*.key")) if stamp else ():
            public, _ = zmq.auth.load_certificate(str(path))
            role = _role(path)
            if role in ROLES:
                by_key[public.decode()] = Identity(path.stem, role)
        self.by_key = by_key

    def get(self, user_id: str | None) -> Identity | None:
        """Who holds this key, or None for an unknown one (a key added just now is known)."""
        who = self.by_key.get(user_id or "")
        if who is None:          # one stat: honour a key registered since the last read
            self.refresh()
            who = self.by_key.get(user_id or "")
        return who


# ---- using keys ----------------------------------------------------------------


def server_keys(keys_dir: Path) -> tuple[bytes, bytes]:
    """The coordinator's (public, secret) key."""
    return zmq.auth.load_certificate(str(keys_dir / f"{SERVER}.key_secret"))


def client_files(key: str | Path | None, server_key: str | Path | None
                 ) -> tuple[Path, Path] | None:
    """A client's secret key file and the coordinator's public key file, or None.

    ``key`` defaults to $TFGSHARE_KEY and ``server_key`` to $TFGSHARE_SERVER_KEY,
    else the coordinator.key beside the secret key file.
    """
    key = key or os.environ.get("TFGSHARE_KEY")
    if not key:
        return None
    key = Path(key)
    server_key = server_key or os.environ.get("TFGSHARE_SERVER_KEY")
    server = Path(server_key) if server_key else key.parent / f"{SERVER}.key"
    return key, server


def secure_client(sock: zmq.Socket, files: tuple[Path, Path] | None) -> None:
    """Make ``sock`` a CurveZMQ client with these key files (before it connects)."""
    if files is None:
        return
    key, server = Path(files[0]), Path(files[1])
    for path, what in ((key, "your secret key file"), (server, "the coordinator's public key "
                                                               "file")):
        if not path.is_file():
            hint = (" (set --key or TFGSHARE_KEY to the NAME.key_secret that `tfgshare keys "
                    "add-user` or `add-agent` made)" if path == key else
                    " (set --server-key or TFGSHARE_SERVER_KEY, or put coordinator.key "
                    "beside your key file)")
            raise KeysError(f"{what} {path} was not found{hint}")
    try:
        public, secret = zmq.auth.load_certificate(str(key))
        server_public, _ = zmq.auth.load_certificate(str(server))
    except (OSError, ValueError) as exc:
        raise KeysError(f"cannot read the key files {key} / {server}: {exc}") from None
    if secret is None:
        raise KeysError(f"{key} holds no secret key (use the NAME.key_secret file)")
    sock.curve_secretkey = secret
    sock.curve_publickey = public
    sock.curve_serverkey = server_public


# ---- tfgshare keys -----------------------------------------------------------------


class RemovedToken(argparse.Action):
    """``--token``: the plain shared token CurveZMQ keys replaced; an error that says so."""

    def __init__(self, option_strings, dest, **kwargs) -> None:
        kwargs["nargs"] = "?"
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        parser.error(f"{option_string} was removed: the plain shared token is replaced by "
                     "CurveZMQ keys; make them with `tfgshare keys init`, `tfgshare keys "
                     "add-agent NODE` and `tfgshare keys add-user NAME` (README, "
                     "\"Authentication\")")


def main(argv: list[str] | None = None) -> int:
    """``tfgshare keys init | add-user NAME [--admin] | add-agent NAME | list | revoke NAME``."""
    p = argparse.ArgumentParser(prog="tfgshare keys",
                                description="Make and register CurveZMQ keys for a coordinator.")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--state", help="the coordinator's state file (keys go beside it)")
    where.add_argument("--keys-dir", help="the keys directory")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("init", help="make the coordinator's key pair")
    user = sub.add_parser("add-user", help="make and register a user's key")
    user.add_argument("name")
    user.add_argument("--admin", action="store_true", help="may act on every job")
    agent = sub.add_parser("add-agent", help="make and register a node agent's key "
                                             "(NAME is the node it may register as)")
    agent.add_argument("name")
    sub.add_parser("list", help="list the registered keys")
    gone = sub.add_parser("revoke", help="forget a key")
    gone.add_argument("name")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    keys_dir = Path(args.keys_dir) if args.keys_dir else keys_dir_for(args.state)
    try:
        if args.command == "init":
            public = init(keys_dir)
            print(f"coordinator key pair in {keys_dir}\ngive clients {public}\nthe metrics "
                  f"port's bearer token (needed off loopback): {keys_dir / METRICS_TOKEN}")
        elif args.command in ("add-user", "add-agent"):
            role = "agent" if args.command == "add-agent" else "admin" if args.admin else "user"
            out = add(keys_dir, args.name, role)
            flag = "tfgshare agent" if role == "agent" else "tfgshare submit/status/..."
            print(f"registered {role} {args.name}\nhand over {out} (keep it private); use it "
                  f"with\n  {flag} --key {out / (args.name + '.key_secret')}"
                  "\n(or set TFGSHARE_KEY to that file)")
        elif args.command == "list":
            registry = Registry(keys_dir)
            for public, who in sorted(registry.by_key.items(), key=lambda kv: kv[1].name):
                print(f"{who.name}\t{who.role}\t{public[:12]}...")
            if not registry.by_key:
                print("no registered keys")
        else:
            gone = revoke(keys_dir, args.name)
            print(f"revoked {args.name}: deleted {gone[0]}" +
                  (f" and the key pair issued to it, {keys_dir / 'issued' / args.name} "
                   f"({', '.join(p.name for p in gone[1:])})" if gone[1:] else ""))
    except KeysError as exc:
        print(f"tfgshare keys: {exc}", file=sys.stderr)
        return 2
    return 0


class HandshakeWatch:
    """Watches a connecting socket's CurveZMQ handshakes and says when they cannot succeed.

    A protocol or authentication failure is final (one side has no key, or keys
    the other refuses). A failure without detail is also what a wrong
    coordinator key gives, but a dropped connection mid-handshake gives it too,
    so only ``patience`` of them in a row, with no success between, are final.
    """

    _EVENTS = (zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
               | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_SUCCEEDED)

    def __init__(self, sock: zmq.Socket, patience: int = 3) -> None:
        self.sock = sock
        self.monitor = sock.get_monitor_socket(self._EVENTS)
        self.patience = patience
        self.vague = 0
        self.final = False

    def failed(self) -> bool:
        """Read the events so far; True once the handshake has failed for good (and after)."""
        while not self.final and self.monitor.poll(0):
            event = recv_monitor_message(self.monitor)["event"]
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self.vague = 0
            elif event == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
                self.vague += 1
            else:
                self.final = True
        self.final = self.final or self.vague >= self.patience
        return self.final

    def close(self) -> None:
        """Stop watching."""
        self.sock.disable_monitor()
        self.monitor.close(0)
