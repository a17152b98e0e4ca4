"""The agent's server and ops, run in-process on a temporary socket (no Docker)."""

from __future__ import annotations

import asyncio
import logging
import os
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from sandbox.agent.app import AgentApp, AgentConfig
from sandbox.agent.server import AgentServer
from sandbox.backends.agent_client import AgentClient
from sandbox.errors import DeadlineExceeded, InvalidArgument, NotFound, PermissionDenied, ResourceExhausted


@pytest_asyncio.fixture
async def agent(tmp_path: Path) -> AsyncIterator[AgentClient]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    config = AgentConfig(
        kind="terminal",
        socket_path=str(tmp_path / "a.sock"),
        roots=(str(workspace),),
        workspace=str(workspace),
        display=":99",
        max_request_bytes=1024 * 1024,
    )
    app = AgentApp(config, logger=logging.getLogger("test-agent"))
    server = AgentServer(app.ops(), tunnel_ports=frozenset(), max_request_bytes=1024 * 1024, logger=app._log)
    task = asyncio.create_task(server.serve(config.socket_path))
    client = AgentClient(config.socket_path)
    await client.wait_ready(5)
    yield client
    await client.close()
    task.cancel()
    await app.close()


async def test_unknown_op_and_bad_arguments_are_invalid(agent: AgentClient) -> None:
    with pytest.raises(InvalidArgument, match="unknown op 'nope'"):
        await agent.request("nope")
    with pytest.raises(InvalidArgument, match="timeout"):
        await agent.request("exec", {"cmd": "true", "timeout": -1})
    with pytest.raises(InvalidArgument, match="'cmd' must be str or list"):
        await agent.request("exec", {"cmd": 5})
    with pytest.raises(InvalidArgument, match="no display"):
        await agent.screenshot()
    assert (await agent.exec("echo still-fine")).stdout == "still-fine\n"


async def test_deadline_is_enforced_by_the_agent(agent: AgentClient) -> None:
    with pytest.raises(DeadlineExceeded, match="deadline"):
        await agent.request("exec", {"cmd": "sleep 5", "timeout": 10}, deadline=0.3)


async def test_oversized_request_is_refused_and_the_agent_lives_on(agent: AgentClient) -> None:
    with pytest.raises(ResourceExhausted, match="exceeds the limit"):
        await agent.write_file("big.bin", b"x" * (2 * 1024 * 1024))
    assert (await agent.ping())["kind"] == "terminal"


async def test_garbage_on_the_socket_does_not_hurt(agent: AgentClient) -> None:
    reader, writer = await asyncio.open_unix_connection(agent.socket_path)
    writer.write(struct.pack(">II", 5, 0) + b"{nope")
    await writer.drain()
    await reader.read(1000)
    writer.close()
    assert (await agent.exec(["true"])).exit_code == 0


async def test_file_errors_are_precise(agent: AgentClient) -> None:
    with pytest.raises(NotFound, match="does not exist"):
        await agent.read_file("missing.txt")
    with pytest.raises(PermissionDenied, match=r"'\.\.' traversal"):
        await agent.write_file("a/../../x", b"")
    with pytest.raises(PermissionDenied, match="cannot be deleted"):
        await agent.delete(os.path.realpath((await agent.ping())["roots"][0]), recursive=True)


async def test_many_concurrent_requests_share_the_pool(agent: AgentClient) -> None:
    results = await asyncio.gather(*(agent.exec(["echo", str(i)]) for i in range(100)))
    assert [r.stdout.strip() for r in results] == [str(i) for i in range(100)]
