"""Network namespaces for agents: a cut stops traffic both ways, a restore lets it through."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from tfgshare import netns

pytestmark = pytest.mark.timeout(120)

# connects to argv[1]:argv[2] from inside the namespace; prints "ok" or the error's name
CONNECT = ("import socket, sys\n"
           "try:\n"
           "    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2).close()\n"
           "    print('ok')\n"
           "except OSError as e:\n"
           "    print(repr(e))\n")


def test_without_iproute2_namespaces_are_unavailable_with_the_reason(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    assert "iproute2" in netns.unavailable()
    with pytest.raises(netns.NetnsUnavailable, match="iproute2"):
        with netns.namespace():
            pass


def test_an_agent_namespace_reaches_the_host_address_except_while_cut():
    why = netns.unavailable()
    if why:
        pytest.skip(f"cannot create a network namespace here: {why}")
    with netns.host_address() as host, netns.namespace(1) as ns, \
            socket.create_server((host, 0)) as server:
        port = str(server.getsockname()[1])

        def connect() -> str:
            return subprocess.run([*ns.prefix, sys.executable, "-c", CONNECT, host, port],
                                  capture_output=True, text=True, timeout=30).stdout.strip()

        assert connect() == "ok"
        ns.cut()
        assert connect() != "ok"
        ns.restore()
        assert connect() == "ok"
    assert ns.name not in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                         text=True).stdout
