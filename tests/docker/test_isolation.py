"""Isolation of a sandbox from the network, the host and other sandboxes."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.conftest import SandboxFactory

pytestmark = pytest.mark.docker

_CONNECT = """
import socket, sys
s = socket.socket()
s.settimeout(3)
try:
    s.connect(("127.0.0.1", int(sys.argv[1])))
    print("connected")
except OSError as e:
    print("refused:", type(e).__name__, e)
"""


async def test_no_interface_but_loopback_and_no_route_to_a_host_listener(make_sandbox: SandboxFactory) -> None:
    accepted: list[object] = []

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer.get_extra_info("peername"))
        writer.close()

    listener = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        sb = await make_sandbox("terminal")
        interfaces = await sb.agent.exec("ls /sys/class/net")
        assert interfaces.stdout.split() == ["lo"]
        routes = await sb.agent.exec("tail -n +2 /proc/net/route")
        assert routes.stdout.strip() == "", f"a sandbox must have no routes: {routes.stdout}"
        attempt = await sb.agent.exec(["python3", "-c", _CONNECT, str(port)])
        assert attempt.stdout.startswith("refused"), attempt.stdout
        await asyncio.sleep(0.2)
        assert accepted == [], "the host listener must never see a connection from a sandbox"
    finally:
        listener.close()
        await listener.wait_closed()


async def test_container_is_locked_down(make_sandbox: SandboxFactory) -> None:
    sb = await make_sandbox("terminal", resources={"cpus": 0.5, "memory_mb": 300, "pids": 100})
    attrs = await asyncio.to_thread(lambda: sb.container().attrs)
    host = attrs["HostConfig"]
    assert host["NetworkMode"] == "none"
    assert host["CapDrop"] == ["ALL"] and not host["CapAdd"]
    assert host["Privileged"] is False and "no-new-privileges" in host["SecurityOpt"]
    assert (host["NanoCpus"], host["Memory"], host["PidsLimit"]) == (500_000_000, 300 * 2**20, 100)
    mounts = [(m["Destination"], m["Type"]) for m in attrs["Mounts"]]
    assert mounts == [("/run/sandbox", "bind")], f"only the agent socket directory may be mounted: {mounts}"
    status = await sb.agent.exec("grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; ls /var/run/docker.sock")
    fields = dict(line.split(":\t") for line in status.stdout.strip().splitlines())
    assert int(fields["CapEff"], 16) == 0 and fields["NoNewPrivs"] == "1"
    assert "No such file" in status.stderr
    assert json.loads(json.dumps(attrs["Config"]["Labels"]))["sandbox.owner"].startswith("test-")
