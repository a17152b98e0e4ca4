"""The agent client's pool says whether its agent's process still holds a connection open (no real agent)."""

from __future__ import annotations

import asyncio
import os

from sandbox.backends.agent_client import AgentClient
from sandbox.protocol import encode_frame, read_frame
from tests.polling import eventually


async def test_connected_follows_the_agents_end_of_the_pooled_connection(tmp_path: object) -> None:
    path = os.path.join(str(tmp_path), "agent.sock")
    ends: list[asyncio.StreamWriter] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        ends.append(writer)
        await read_frame(reader)
        writer.write(encode_frame({"ok": True, "result": {}}))
        await writer.drain()

    server = await asyncio.start_unix_server(answer, path)
    client = AgentClient(path, label="test")
    try:
        assert not client.connected(), "no connection yet"
        await client.request("ping", deadline=5)
        assert client.connected(), "the connection the ping used is idle and open"
        ends[0].close()  # as the kernel does when the agent's process dies
        await eventually(lambda: not client.connected(), 5, "the event loop reading the EOF of the agent's end")
    finally:
        await client.close()
        server.close()
        await server.wait_closed()
