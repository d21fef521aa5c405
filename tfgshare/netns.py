"""Network namespaces joined to this one by veth pairs: a process that is "elsewhere".

An agent started with ``Netns.prefix`` (``ip netns exec NAME``) sees only its own
loopback and the namespace end of a veth pair on link-local 169.254.x.y
addresses, with its default route through the host end. ``cut()`` sets the host
end down, so nothing passes either way, and ``restore()`` sets it up again; the
namespace's own loopback (agent to runners) is untouched. ``host_address()`` puts
a link-local address on this namespace's loopback that every namespace reaches
through its veth pair and that no cut takes away: the place to bind a
coordinator that several namespaced agents share.

Needs iproute2 and CAP_NET_ADMIN; ``unavailable()`` says why not where they are
missing, and the context managers raise ``NetnsUnavailable`` naming the reason.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


class NetnsUnavailable(RuntimeError):
    """Network namespaces cannot be made here (no iproute2, or no permission)."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and done.returncode != 0:
        raise NetnsUnavailable(f"'ip {' '.join(args)}' failed: {done.stderr.strip()}")
    return done


def _slot(index: int) -> tuple[int, int]:
    """The third and fourth octet base of a /30 unique to this process and ``index``."""
    slot = (os.getpid() * 8 + index) % (250 * 64)
    return slot // 64 + 1, (slot % 64) * 4


def unavailable() -> str | None:
    """Why network namespaces cannot be made here, or None when they can."""
    if shutil.which("ip") is None:
        return "the 'ip' tool (iproute2) is not installed"
    name = f"tfgprobe{os.getpid() % 100000}"
    made = _ip("netns", "add", name, check=False)
    if made.returncode != 0:
        return f"'ip netns add' failed: {made.stderr.strip()}"
    _ip("netns", "del", name, check=False)
    return None


@dataclass
class Netns:
    """One namespace and its veth pair (host end ``host_if`` at ``host_ip``)."""

    name: str
    host_if: str
    ns_if: str
    host_ip: str
    ns_ip: str

    @property
    def prefix(self) -> list[str]:
        """The command prefix that runs a program inside the namespace."""
        return ["ip", "netns", "exec", self.name]

    def cut(self) -> None:
        """Cut the namespace off: set the host end of its veth pair down."""
        _ip("link", "set", self.host_if, "down")

    def restore(self, wait_s: float = 5.0) -> None:
        """Join the namespace again: set the host end up (its route comes back with it),
        wait, at most ``wait_s``, until the link reports itself up, then forget the
        namespace's failed neighbour lookups of the cut (else connects fail with 'No route
        to host' for a while)."""
        _ip("link", "set", self.host_if, "up")
        state = Path("/sys/class/net") / self.host_if / "operstate"
        end = time.monotonic() + wait_s
        while time.monotonic() < end:
            with contextlib.suppress(OSError):
                if state.read_text().strip() == "up":
                    break
            time.sleep(0.02)
        _ip("netns", "exec", self.name, "ip", "neigh", "flush", "dev", self.ns_if, check=False)


@contextlib.contextmanager
def namespace(index: int = 0) -> Iterator[Netns]:
    """A new namespace joined to this one by a veth pair; removed on exit."""
    if shutil.which("ip") is None:
        raise NetnsUnavailable("the 'ip' tool (iproute2) is not installed")
    tag = f"{os.getpid() % 100000}x{index}"
    a, b = _slot(index)
    ns = Netns(f"tfgshare{tag}", f"tfgh{tag}", f"tfgn{tag}",
               f"169.254.{a}.{b + 1}", f"169.254.{a}.{b + 2}")
    _ip("netns", "add", ns.name)
    try:
        for cmd in (["link", "add", ns.host_if, "type", "veth", "peer", "name", ns.ns_if],
                    ["link", "set", ns.ns_if, "netns", ns.name],
                    ["addr", "add", f"{ns.host_ip}/30", "dev", ns.host_if],
                    ["link", "set", ns.host_if, "up"]):
            _ip(*cmd)
        for cmd in (["addr", "add", f"{ns.ns_ip}/30", "dev", ns.ns_if],
                    ["link", "set", ns.ns_if, "up"],
                    ["link", "set", "lo", "up"],
                    ["route", "add", "default", "via", ns.host_ip]):
            _ip("netns", "exec", ns.name, "ip", *cmd)
        yield ns
    finally:
        _ip("link", "del", ns.host_if, check=False)
        _ip("netns", "del", ns.name, check=False)


@contextlib.contextmanager
def host_address(index: int = 255) -> Iterator[str]:
    """A link-local address on this namespace's loopback, reachable from every namespace
    made by ``namespace()`` and kept through their cuts; removed on exit."""
    a, b = _slot(index)
    address = f"169.254.{a}.{b + 1}"
    _ip("addr", "add", f"{address}/32", "dev", "lo")
    try:
        yield address
    finally:
        _ip("addr", "del", f"{address}/32", "dev", "lo", check=False)
