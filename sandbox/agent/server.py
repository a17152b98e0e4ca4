"""The agent's server: reads frames, enforces limits and deadlines, dispatches ops.

It serves a unix socket (no handshake: the socket's directory guards it) and, when given a token file, TCP
(every connection first passes :func:`sandbox.agent.auth.handshake`). Both may be served at once. Given
:class:`~sandbox.agent.lanes.Lanes`, it also serves direct lanes: on a lane socket of their own, and on TCP beside
the token's peers; a lane's connection serves ``lane_step`` only (``lanes.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

from sandbox.agent.auth import DEFAULT_HELLO_TIMEOUT, TokenFile, format_address, handshake
from sandbox.agent.errors import AgentError, bad_request, require
from sandbox.agent.lanes import Lanes
from sandbox.agent.ports import user_port_refusal
from sandbox.protocol import LANE_STEP_OP, ErrorCode, FrameError, encode_frame, read_frame

Handler = Callable[[dict[str, Any], bytes], Awaitable[tuple[dict[str, Any], bytes]]]

DEFAULT_DEADLINE = 60.0
MAX_DEADLINE = 3600.0
TUNNEL_OP = "tunnel"


class AgentServer:
    def __init__(
        self,
        ops: dict[str, Handler],
        *,
        tunnel_ports: frozenset[int],
        max_request_bytes: int,
        logger: logging.Logger,
        reserved_ports: frozenset[int] = frozenset(),
        lanes: Lanes | None = None,
    ) -> None:
        """``tunnel_ports``: the platform's ports a plain tunnel reaches (VNC, DevTools); ``reserved_ports``: the
        ports a *user* tunnel (``{"user": true}``, a preview URL's) never reaches, besides those (``ports.py``).
        ``lanes``: serve direct lanes (their ``lane_grant``, ``lane_revoke`` and ``lane_report`` ops join ``ops``)."""
        self._lanes = lanes
        if lanes is not None:
            ops = {**ops, "lane_grant": lanes.grant, "lane_revoke": lanes.revoke, "lane_report": lanes.report}
        self._ops = ops
        self._tunnel_ports = tunnel_ports
        self._reserved_ports = reserved_ports | tunnel_ports
        self._max_request_bytes = max_request_bytes
        self._log = logger

    async def serve(
        self,
        socket_path: str | None = None,
        *,
        listen: tuple[str, int] | None = None,
        tokens: TokenFile | None = None,
        hello_timeout: float = DEFAULT_HELLO_TIMEOUT,
        lane_path: str | None = None,
    ) -> None:
        """Serve the unix socket ``socket_path`` and/or TCP on ``listen`` (which needs ``tokens``) until cancelled;
        with lanes, their own unix socket ``lane_path`` too."""
        if listen is not None and tokens is None:
            raise ValueError("TCP needs a token file: the agent never serves an unauthenticated TCP listener")
        if socket_path is None and listen is None:
            raise ValueError("nothing to serve: give a unix socket path, a TCP address, or both")
        servers: list[asyncio.AbstractServer] = []
        try:
            if socket_path is not None:
                servers.append(await self._start_unix(socket_path, self._handle_connection))
            if lane_path is not None and self._lanes is not None:
                servers.append(await self._start_unix(lane_path, lambda r, w: self._handle_lane(r, w, hello_timeout)))
            if listen is not None and tokens is not None:
                host, port = listen
                tcp = await asyncio.start_server(
                    lambda r, w: self._handle_tcp(r, w, tokens, hello_timeout), host, port, limit=1 << 20
                )
                servers.append(tcp)
                bound = ", ".join(format_address(s.getsockname()) for s in tcp.sockets)
                self._log.info("agent listening on tcp %s (token from %s)", bound, tokens.path)
            await asyncio.gather(*(s.serve_forever() for s in servers))
        finally:
            for server in servers:
                server.close()

    async def _start_unix(
        self, socket_path: str, handle: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
    ) -> asyncio.AbstractServer:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(socket_path)
        server = await asyncio.start_unix_server(handle, path=socket_path, limit=1 << 20)
        # The control plane may run as another user than the sandbox user.
        os.chmod(socket_path, 0o666)
        self._log.info("agent listening on %s", socket_path)
        return server

    async def _handle_tcp(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, tokens: TokenFile, hello_timeout: float
    ) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:  # a peer gone without a word (its node died) must not hold the connection forever
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        await self._serve_after_hello(reader, writer, tokens, hello_timeout)

    async def _handle_lane(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, hello_timeout: float
    ) -> None:
        await self._serve_after_hello(reader, writer, None, hello_timeout)

    async def _serve_after_hello(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, tokens: TokenFile | None, hello_timeout: float
    ) -> None:
        lanes = self._lanes
        try:
            access = await handshake(
                reader,
                writer,
                tokens,
                timeout=hello_timeout,
                logger=self._log,
                lane_admits=lanes.admits if lanes is not None else None,
            )
        except ConnectionError:
            access = None
        except Exception:
            self._log.exception("the handshake failed")
            access = None
        if access is not None and access[0] == "token":
            await self._handle_connection(reader, writer)
            return
        if access is not None and lanes is not None:
            with lanes.holding(writer):
                await self._handle_connection(reader, writer, {LANE_STEP_OP: lanes.stepper(access[1])})
            return
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()

    async def _handle_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, ops: dict[str, Handler] | None = None
    ) -> None:
        """Serve frames until the peer hangs up: every op, or only ``ops`` (a lane's: no tunnel either)."""
        try:
            while True:
                try:
                    header, blob = await read_frame(reader, max_blob=self._max_request_bytes)
                except asyncio.IncompleteReadError:
                    return
                except FrameError as e:
                    writer.write(_error_frame(ErrorCode.TOO_LARGE, str(e)))
                    await writer.drain()
                    if e.recoverable:
                        continue
                    return  # the stream position is lost: hang up
                if header.get("op") == TUNNEL_OP and ops is None:
                    await self._tunnel(header.get("args") or {}, reader, writer)
                    return
                writer.write(await self._dispatch(header, blob, self._ops if ops is None else ops))
                await writer.drain()
        except (ConnectionError, BrokenPipeError):
            return
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _dispatch(self, header: dict[str, Any], blob: bytes, ops: dict[str, Handler]) -> bytes:
        op = header.get("op")
        started = time.monotonic()
        try:
            handler = ops.get(op) if isinstance(op, str) else None
            if handler is None:
                raise bad_request(f"unknown op {op!r}; known: {', '.join(sorted(ops))}")
            args = header.get("args") or {}
            if not isinstance(args, dict):
                raise bad_request("args must be an object")
            deadline = _deadline(header)
            try:
                async with asyncio.timeout(deadline):  # in this task: wait_for (3.11) starts one per request
                    result, out_blob = await handler(args, blob)
            except TimeoutError as e:
                raise AgentError(ErrorCode.TIMEOUT, f"{op} did not finish within its {deadline:g} s deadline") from e
            result.setdefault("agent_ms", round((time.monotonic() - started) * 1000, 3))
            return encode_frame({"ok": True, "result": result}, out_blob)
        except AgentError as e:
            return _error_frame(e.code, e.message)
        except FrameError as e:
            return _error_frame(ErrorCode.TOO_LARGE, str(e))
        except Exception as e:  # a bug in a handler must not kill the connection loop
            self._log.exception("op %s failed", op)
            return _error_frame(ErrorCode.INTERNAL, f"{type(e).__name__}: {e}")

    async def _tunnel(self, args: dict[str, Any], reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            port = require(args, "port", int)
            user = args.get("user") is True
            if user:
                refusal = user_port_refusal(port, self._reserved_ports)
                if refusal is not None:
                    raise AgentError(ErrorCode.PERMISSION_DENIED, refusal)
            elif port not in self._tunnel_ports:
                raise AgentError(ErrorCode.PERMISSION_DENIED, f"port {port} is not open for tunnels")
            try:
                up_reader, up_writer = await asyncio.wait_for(_connect_local(port), 5)
            except (TimeoutError, OSError) as e:
                raise AgentError(ErrorCode.UNAVAILABLE, f"nothing answers on port {port} in the sandbox: {e}") from e
        except AgentError as e:
            writer.write(_error_frame(e.code, e.message))
            await writer.drain()
            return
        writer.write(encode_frame({"ok": True, "result": {"port": port}}))
        await writer.drain()
        await _pipe_both(reader, writer, up_reader, up_writer)


async def _connect_local(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to ``port`` on the sandbox's loopback: IPv4 first, then IPv6 (a server bound to ::1 only)."""
    try:
        return await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return await asyncio.open_connection("::1", port)


def _deadline(header: dict[str, Any]) -> float:
    value = header.get("deadline", DEFAULT_DEADLINE)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise bad_request("deadline must be a positive number of seconds")
    return min(float(value), MAX_DEADLINE)


def _error_frame(code: str, message: str) -> bytes:
    return encode_frame({"ok": False, "error": {"code": code, "message": message}})


async def _pipe_both(
    a_reader: asyncio.StreamReader,
    a_writer: asyncio.StreamWriter,
    b_reader: asyncio.StreamReader,
    b_writer: asyncio.StreamWriter,
) -> None:
    async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while chunk := await src.read(1 << 16):
                dst.write(chunk)
                await dst.drain()
        except (ConnectionError, BrokenPipeError):
            pass
        finally:
            with contextlib.suppress(Exception):
                dst.close()

    await asyncio.gather(pump(a_reader, b_writer), pump(b_reader, a_writer))
