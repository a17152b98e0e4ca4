"""The agent client's word on whether an agent lives without asking it: an idle pooled connection its process still
holds open (``connected``, health rounds), and an answer lately on a unix-socket connection checked with the kernel
at the moment of the question (``answered_lately``, claims). No real agent."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

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


class _Agent:
    """A one-op agent on a unix socket that can end, closing its connections as a process's end does."""

    def __init__(self) -> None:
        self.server: asyncio.Server | None = None
        self.writers: list[asyncio.StreamWriter] = []

    async def serve(self, path: str) -> None:
        self.server = await asyncio.start_unix_server(self._handle, path)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        while True:
            try:
                await read_frame(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            writer.write(encode_frame({"ok": True, "result": {"pong": True}}))
            await writer.drain()

    def end(self) -> None:
        """What the kernel does when the agent's process ends: its connections are shut at once."""
        assert self.server is not None
        self.server.close()
        for writer in self.writers:
            with contextlib.suppress(OSError):
                writer.get_extra_info("socket").shutdown(socket.SHUT_RDWR)
            writer.transport.abort()


@pytest_asyncio.fixture
async def agent(tmp_path: Path) -> AsyncIterator[tuple[_Agent, AgentClient]]:
    fake = _Agent()
    path = str(tmp_path / "a.sock")
    await fake.serve(path)
    client = AgentClient(path)
    yield fake, client
    await client.close()
    fake.end()


async def test_an_agent_that_just_answered_on_an_open_connection_vouches(
    agent: tuple[_Agent, AgentClient],
) -> None:
    _, client = agent
    assert not client.answered_lately(10), "no answer yet"
    await client.ping()
    assert client.vouches_by_connection
    assert client.answered_lately(10)


async def test_an_old_answer_does_not_vouch(agent: tuple[_Agent, AgentClient], monkeypatch: pytest.MonkeyPatch) -> None:
    _, client = agent
    await client.ping()
    later = time.monotonic() + 11
    monkeypatch.setattr("sandbox.backends.agent_client.time.monotonic", lambda: later)
    assert not client.answered_lately(10)


async def test_an_agent_that_ended_does_not_vouch_even_before_the_loop_saw_it(
    agent: tuple[_Agent, AgentClient],
) -> None:
    fake, client = agent
    await client.ping()
    fake.end()  # the connection is closed by the agent's side; this loop has not run since
    assert not client.answered_lately(10), "vouched for an agent that closed its connection"


def test_a_tcp_connection_never_vouches() -> None:
    client = AgentClient.tcp("127.0.0.1", 9, token="t0ken")
    assert not client.vouches_by_connection
    assert not client.answered_lately(10)
