"""The agent over TCP, guarded by the sandbox's secret: the real agent as a local subprocess, on 127.0.0.1 only."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from sandbox.backends.agent_client import AgentClient
from sandbox.errors import Unauthenticated, Unavailable
from sandbox.protocol import AGENT_SOCKET_NAME, LISTEN_ENV, TOKEN_FILE_ENV, encode_frame, read_frame

ROOT = Path(__file__).resolve().parents[3]
HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def agent_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (LISTEN_ENV, TOKEN_FILE_ENV)}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


def agent_argv(tmp_path: Path, *extra: str, kind: str = "terminal") -> list[str]:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    return [
        sys.executable, "-m", "sandbox.agent", "--kind", kind, "--display", ":97",
        "--socket", str(tmp_path / AGENT_SOCKET_NAME), "--workspace", str(workspace), "--roots", str(workspace),
        *extra,
    ]  # fmt: skip


def write_token(path: Path, token: str) -> None:
    """Replace the file atomically, as a Kubernetes Secret volume does."""
    part = path.with_suffix(".new")
    part.write_text(token + "\n")
    os.replace(part, path)


class Agent:
    def __init__(self, process: asyncio.subprocess.Process, port: int, tmp_path: Path, token: str) -> None:
        self.process = process
        self.port = port
        self.token = token
        self.token_file = tmp_path / "token"
        self.socket_path = str(tmp_path / AGENT_SOCKET_NAME)
        self.stderr_path = tmp_path / "agent.stderr"
        self.clients: list[AgentClient] = []

    def client(self, token: str | None = None) -> AgentClient:
        client = AgentClient.tcp(HOST, self.port, token=self.token if token is None else token, label="tcp agent")
        self.clients.append(client)
        return client

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    async def stop(self) -> None:
        for client in self.clients:
            await client.close()
        if self.process.returncode is None:
            self.process.terminate()
            try:
                await asyncio.wait_for(self.process.wait(), 10)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()


StartAgent = Callable[..., Awaitable[Agent]]


@pytest_asyncio.fixture
async def start_agent(tmp_path: Path) -> AsyncIterator[StartAgent]:
    started: list[Agent] = []

    async def start(*extra: str, kind: str = "terminal") -> Agent:
        token = secrets.token_urlsafe(24)
        write_token(tmp_path / "token", token)
        port = free_port()
        token_file = str(tmp_path / "token")
        argv = agent_argv(tmp_path, "--listen", f"{HOST}:{port}", "--token-file", token_file, *extra, kind=kind)
        with open(tmp_path / "agent.stderr", "wb") as err:
            process = await asyncio.create_subprocess_exec(
                *argv, cwd=tmp_path, env=agent_env(), stdout=asyncio.subprocess.DEVNULL, stderr=err
            )
        agent = Agent(process, port, tmp_path, token)
        started.append(agent)
        probe = AgentClient.tcp(HOST, port, token=token)
        give_up = time.monotonic() + 20
        try:
            while True:  # ping, not health: a browser agent with no X server is never healthy
                try:
                    await probe.ping()
                    return agent
                except Unavailable as e:
                    if process.returncode is not None or time.monotonic() > give_up:
                        pytest.fail(f"the agent did not come up on TCP ({e}); its stderr:\n{agent.stderr()}")
                    await asyncio.sleep(0.05)
        finally:
            await probe.close()

    yield start
    for agent in started:
        await agent.stop()


async def raw_hello(port: int, token: object) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, dict[str, Any]]:
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(encode_frame({"op": "hello", "args": {"token": token}, "deadline": 5}))
    await writer.drain()
    header, _ = await asyncio.wait_for(read_frame(reader), 5)
    return reader, writer, header


async def hung_up(reader: asyncio.StreamReader, timeout: float = 5) -> bool:
    """Whether the peer closed the stream (EOF or a reset) within ``timeout`` without sending anything more."""
    try:
        return await asyncio.wait_for(reader.read(1), timeout) == b""
    except ConnectionResetError:
        return True


# --------------------------------------------------------------------------- serving


async def test_exec_over_tcp_with_the_right_token(start_agent: StartAgent) -> None:
    agent = await start_agent()
    client = agent.client()
    result = await client.exec("echo over-tcp; echo err >&2")
    assert (result.exit_code, result.stdout, result.stderr) == (0, "over-tcp\n", "err\n")
    assert (await client.ping())["kind"] == "terminal"
    await client.write_file("a.txt", b"\x00bytes\xff")
    assert await client.read_file("a.txt") == b"\x00bytes\xff"
    assert (await client.health()).ok


async def test_the_unix_socket_is_served_at_the_same_time_without_a_hello(start_agent: StartAgent) -> None:
    agent = await start_agent()
    unix = AgentClient(agent.socket_path)
    try:
        assert (await unix.exec(["echo", "unix"])).stdout == "unix\n"
    finally:
        await unix.close()


async def test_the_agent_hides_the_tcp_settings_from_the_commands_it_runs(start_agent: StartAgent) -> None:
    agent = await start_agent()
    out = await agent.client().exec("env | grep -c SANDBOX_AGENT_ || true")
    assert out.stdout.strip() == "0"


async def test_many_concurrent_requests_share_the_pool(start_agent: StartAgent) -> None:
    agent = await start_agent()
    client = agent.client()
    answers = await asyncio.gather(*(client.exec(["echo", str(i)]) for i in range(40)))
    assert [a.stdout.strip() for a in answers] == [str(i) for i in range(40)]
    again = await asyncio.gather(*(client.ping() for _ in range(40)))  # reuses the pooled, authenticated ones
    assert all(a["kind"] == "terminal" for a in again)


async def test_a_tunnel_over_tcp_reaches_a_port_in_the_sandbox(start_agent: StartAgent) -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, HOST, 0)
    echo_port = server.sockets[0].getsockname()[1]
    try:
        # A browser agent opens tunnels to its DevTools port: point that at the echo server. Nothing needs X for it.
        agent = await start_agent("--cdp-port", str(echo_port), kind="browser")
        reader, writer = await agent.client().open_tunnel(echo_port)
        payload = secrets.token_bytes(200_000)
        writer.write(payload)
        await writer.drain()
        assert await asyncio.wait_for(reader.readexactly(len(payload)), 10) == payload
        writer.close()
    finally:
        server.close()


# --------------------------------------------------------------------------- refusing


async def test_a_wrong_token_is_unauthenticated_and_hung_up_on(start_agent: StartAgent) -> None:
    agent = await start_agent()
    wrong = "not-" + agent.token
    with pytest.raises(Unauthenticated) as caught:
        await agent.client(wrong).exec(["true"])
    assert wrong not in str(caught.value) and agent.token not in str(caught.value)

    started = time.monotonic()
    reader, writer, header = await raw_hello(agent.port, wrong)
    assert time.monotonic() - started >= 0.15, "a failure is answered after a delay"
    assert header["ok"] is False and header["error"]["code"] == "unauthenticated"
    with contextlib.suppress(ConnectionError):
        writer.write(encode_frame({"op": "exec", "args": {"cmd": "true"}, "deadline": 5}))
        await writer.drain()
    assert await hung_up(reader), "a refused connection must be closed"
    writer.close()


@pytest.mark.parametrize(
    "first",
    [
        {"op": "exec", "args": {"cmd": "id"}, "deadline": 5},
        {"op": "hello", "args": {}, "deadline": 5},
        {"op": "hello", "args": {"token": 12345}, "deadline": 5},
        {"op": "hello", "args": {"token": ""}, "deadline": 5},
        {"op": "hello", "deadline": 5},
    ],
    ids=["not-a-hello", "no-token", "not-a-string", "empty", "no-args"],
)
async def test_anything_but_a_good_hello_is_refused(start_agent: StartAgent, first: dict[str, Any]) -> None:
    agent = await start_agent()
    reader, writer = await asyncio.open_connection(HOST, agent.port)
    writer.write(encode_frame(first))
    await writer.drain()
    header, _ = await asyncio.wait_for(read_frame(reader), 5)
    assert header["ok"] is False and header["error"]["code"] == "unauthenticated"
    assert await hung_up(reader)
    writer.close()


async def test_garbage_before_the_hello_is_refused(start_agent: StartAgent) -> None:
    agent = await start_agent()
    reader, writer = await asyncio.open_connection(HOST, agent.port)
    writer.write(b"\x00\x00\x00\x05\x10\x00\x00\x00{nope")  # a header and a 256 MiB payload announced
    await writer.drain()
    header, _ = await asyncio.wait_for(read_frame(reader), 5)
    assert header["error"]["code"] == "unauthenticated"
    assert await hung_up(reader)
    writer.close()


async def test_a_silent_connection_is_closed_after_the_hello_timeout(start_agent: StartAgent) -> None:
    agent = await start_agent("--hello-timeout", "0.5")
    reader, writer = await asyncio.open_connection(HOST, agent.port)
    started = time.monotonic()
    with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
        header, _ = await asyncio.wait_for(read_frame(reader), 5)
        assert header["error"]["code"] == "unauthenticated"
    assert await hung_up(reader)
    assert 0.4 <= time.monotonic() - started < 4
    writer.close()
    assert "no hello within 0.5 s" in agent.stderr()


async def test_a_rotated_token_takes_effect_without_a_restart(start_agent: StartAgent) -> None:
    agent = await start_agent()
    old_client = agent.client()
    assert (await old_client.exec(["echo", "old"])).stdout == "old\n"
    new = secrets.token_urlsafe(24)
    write_token(agent.token_file, new)
    with pytest.raises(Unauthenticated):
        await agent.client(agent.token).ping()
    assert (await agent.client(new).exec(["echo", "new"])).stdout == "new\n"
    # A connection that said hello before the rotation stays authenticated (it is not re-checked).
    assert (await old_client.exec(["echo", "kept"])).stdout == "kept\n"


async def test_an_unreadable_token_file_refuses_every_hello(start_agent: StartAgent) -> None:
    agent = await start_agent()
    agent.token_file.write_text("  \n")
    with pytest.raises(Unavailable, match="token file"):
        await agent.client().ping()
    assert "is empty" in agent.stderr()


async def test_neither_token_ever_reaches_the_log(start_agent: StartAgent) -> None:
    agent = await start_agent()
    wrong = secrets.token_urlsafe(24)
    await agent.client().ping()
    with pytest.raises(Unauthenticated):
        await agent.client(wrong).ping()
    _, writer, _ = await raw_hello(agent.port, wrong)
    writer.close()
    await agent.stop()
    log = agent.stderr()
    assert "refused an unauthenticated connection from 127.0.0.1:" in log
    assert agent.token not in log and wrong not in log
    assert str(agent.token_file) in log  # where the secret lives is fine to say


def test_a_client_needs_a_token() -> None:
    with pytest.raises(Exception, match="needs the sandbox's token"):
        AgentClient.tcp(HOST, 7000, token="  ")
    client = AgentClient.tcp(HOST, 7000, token="s3cret-value")
    assert "s3cret-value" not in repr(vars(client))


# --------------------------------------------------------------------------- refusing to start


def run_agent(tmp_path: Path, *extra: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        agent_argv(tmp_path, *extra), env=agent_env(**env), capture_output=True, text=True, timeout=30, check=False
    )


@pytest.mark.parametrize("content", [None, "", " \n\t\n"], ids=["missing", "empty", "blank"])
def test_tcp_without_a_usable_token_file_refuses_to_start(tmp_path: Path, content: str | None) -> None:
    token_file = tmp_path / "token"
    if content is not None:
        token_file.write_text(content)
    done = run_agent(tmp_path, "--listen", f"{HOST}:{free_port()}", "--token-file", str(token_file))
    assert done.returncode != 0
    assert "--token-file" in done.stderr and str(token_file) in done.stderr
    assert not (tmp_path / AGENT_SOCKET_NAME).exists()


def test_tcp_without_any_token_file_refuses_to_start(tmp_path: Path) -> None:
    done = run_agent(tmp_path, **{LISTEN_ENV: f"{HOST}:{free_port()}"})  # the address from the environment
    assert done.returncode != 0
    assert "--listen needs --token-file" in done.stderr


def test_a_bad_listen_address_refuses_to_start(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("t0ken")
    done = run_agent(tmp_path, "--listen", "no-port", "--token-file", str(tmp_path / "token"))
    assert done.returncode != 0 and "--listen" in done.stderr


async def test_a_lane_ticket_on_tcp_opens_lane_steps_and_nothing_else(start_agent: StartAgent) -> None:
    """A pod's direct lane (docs/lanes.md) is its agent's TCP port: a granted ticket in the hello instead of the
    token opens a connection that serves ``lane_step`` only; a ticket not granted is refused as a wrong token is."""
    agent = await start_agent()
    ticket = secrets.token_urlsafe(32)
    grant = {"digest": hashlib.sha256(ticket.encode()).hexdigest(), "ttl_s": 60, "actions": ["exec"]}
    await agent.client().request("lane_grant", grant)
    reader, writer = await asyncio.open_connection(HOST, agent.port)
    try:
        writer.write(encode_frame({"op": "hello", "args": {"lane": ticket}, "deadline": 5}))
        assert (await asyncio.wait_for(read_frame(reader), 5))[0]["ok"] is True
        step = {"action": {"type": "exec", "cmd": "echo laned"}}
        writer.write(encode_frame({"op": "lane_step", "args": step, "deadline": 10}))
        header, blob = await asyncio.wait_for(read_frame(reader), 10)
        assert header["ok"] is True and blob == b"laned\n"
        for op in ("exec", "file_read", "lane_report", "tunnel"):
            writer.write(encode_frame({"op": op, "args": {"cmd": "true", "path": "x", "port": 5900}, "deadline": 5}))
            refused, _ = await asyncio.wait_for(read_frame(reader), 5)
            assert refused["ok"] is False and "unknown op" in refused["error"]["message"], op
    finally:
        writer.close()
    wrong_reader, wrong_writer = await asyncio.open_connection(HOST, agent.port)
    try:
        wrong_writer.write(encode_frame({"op": "hello", "args": {"lane": ticket + "x"}, "deadline": 5}))
        refused, _ = await asyncio.wait_for(read_frame(wrong_reader), 5)
        assert refused["error"]["code"] == "unauthenticated" and await hung_up(wrong_reader)
    finally:
        wrong_writer.close()
    report, _ = await agent.client().request("lane_report", {"after": 0})
    assert [s["action"]["cmd"] for s in report["steps"]] == ["echo laned"]
