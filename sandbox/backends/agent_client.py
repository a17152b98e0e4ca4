"""Host-side client of one sandbox's agent, over the unix socket the backend provides or over TCP.

Connections are pooled: a request takes an idle connection or opens one, so many steps
on one sandbox can run at once. A connection that saw any error is dropped, never reused.
Over TCP each new connection first says hello with the sandbox's token (``AgentClient.tcp``);
the token is never put in an exception or a log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
import time
from collections.abc import Sequence
from typing import Any

from sandbox.errors import (
    DeadlineExceeded,
    InvalidArgument,
    ResourceExhausted,
    SandboxError,
    Unavailable,
)
from sandbox.models import ExecResult, FileInfo, Health, Screenshot
from sandbox.protocol import HELLO_OP, ErrorCode, FrameError, encode_frame, read_frame
from sandbox.wire.limits import agent_deadline
from sandbox.wire.status import from_agent

CONNECT_TIMEOUT_S = 3.0
HELLO_TIMEOUT_S = 5.0
MAX_IDLE_CONNECTIONS = 16
TCP_MAX_IDLE_S = 60.0
"""An idle TCP connection older than this is dropped, not reused: a peer gone without a word (a pod moved away)
would otherwise hold a request until its deadline."""

_Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class _UnixTransport:
    max_idle_s: float | None = None
    peer_death_closes = True
    """The kernel closes a unix socket's connections when the process at its other end ends, however it ends."""

    def __init__(self, path: str) -> None:
        self.address = path

    async def connect(self) -> _Conn:
        return await asyncio.wait_for(asyncio.open_unix_connection(self.address, limit=1 << 20), CONNECT_TIMEOUT_S)


class _TcpTransport:
    max_idle_s: float | None = TCP_MAX_IDLE_S
    peer_death_closes = False
    """A peer gone without a word (its node lost) may leave the connection open for a long time."""

    def __init__(self, host: str, port: int, token: str) -> None:
        self.address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self._host = host
        self._port = port
        self._token = token  # never in a message, a log line or a repr

    def __repr__(self) -> str:
        return f"_TcpTransport({self.address})"

    async def connect(self) -> _Conn:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(self._host, self._port, limit=1 << 20), CONNECT_TIMEOUT_S
        )
        try:
            _keepalive(writer)
            writer.write(encode_frame({"op": HELLO_OP, "args": {"token": self._token}, "deadline": HELLO_TIMEOUT_S}))
            await writer.drain()
            header, _ = await asyncio.wait_for(read_frame(reader), HELLO_TIMEOUT_S)
        except BaseException:
            _close((reader, writer))
            raise
        if not header.get("ok"):
            _close((reader, writer))
            error = header.get("error") or {}
            reason = str(error.get("message", "no reason given"))
            raise from_agent(str(error.get("code")), f"the agent at {self.address} refused the hello: {reason}")
        return reader, writer


_Transport = _UnixTransport | _TcpTransport


class AgentClient:
    def __init__(self, socket_path: str | None = None, *, label: str = "", transport: _Transport | None = None) -> None:
        """A client of the agent on the unix socket ``socket_path`` (see :meth:`tcp` for TCP)."""
        if (socket_path is None) == (transport is None):
            raise InvalidArgument("give an AgentClient either a socket path or a transport")
        self.socket_path = socket_path
        self._transport: _Transport = transport or _UnixTransport(str(socket_path))
        self.address = self._transport.address
        self._label = label or self.address
        self._idle: list[tuple[_Conn, float]] = []
        self._closed = False

    @classmethod
    def tcp(cls, host: str, port: int, *, token: str, label: str = "") -> AgentClient:
        """A client of the agent listening on ``host:port``; each connection says hello with ``token`` first."""
        token = token.strip()
        if not token:
            raise InvalidArgument("a TCP agent client needs the sandbox's token")
        if not 0 < port < 65536:
            raise InvalidArgument(f"port {port} is out of range")
        return cls(label=label, transport=_TcpTransport(host, port, token))

    async def request(
        self, op: str, args: dict[str, Any] | None = None, blob: bytes = b"", *, deadline: float = 60.0
    ) -> tuple[dict[str, Any], bytes]:
        try:
            frame = encode_frame({"op": op, "args": args or {}, "deadline": deadline}, blob)
        except FrameError as e:
            raise ResourceExhausted(f"{op} request is too large: {e}") from e
        conn = await self._acquire()
        reader, writer = conn
        try:
            writer.write(frame)
            await writer.drain()
            async with asyncio.timeout(agent_deadline(deadline)):  # no task per call, as wait_for makes on 3.11
                header, out = await read_frame(reader)
        except TimeoutError as e:
            _close(conn)
            raise DeadlineExceeded(f"agent of {self._label} did not answer {op} within {deadline:g} s") from e
        except (OSError, asyncio.IncompleteReadError, FrameError) as e:
            _close(conn)
            raise Unavailable(f"lost the connection to the agent of {self._label} during {op}: {e!r}") from e
        except BaseException:
            _close(conn)
            raise
        self._release(conn)
        if header.get("ok"):
            return header.get("result") or {}, out
        error = header.get("error") or {}
        raise from_agent(str(error.get("code")), str(error.get("message", "the agent gave no reason")))

    @property
    def vouches_by_connection(self) -> bool:
        """Whether an open connection says that the agent's process lives (see :meth:`answered_lately`)."""
        return self._transport.peer_death_closes

    def answered_lately(self, within_s: float) -> bool:
        """Whether the agent answered within the last ``within_s`` seconds on a connection it still holds open now,
        asked of the kernel (not of what the event loop has seen so far): over a unix socket, whose connections the
        kernel closes when the agent's process ends, that says the process lives and served lately, with no round
        trip. Always False over TCP. A connection its agent closed is readable (its end of file); an idle one that is
        readable otherwise holds bytes nobody asked for: either way it does not vouch."""
        return self._transport.peer_death_closes and self._open_since(within_s)

    def _open_since(self, within_s: float) -> bool:
        """Whether an idle connection released within the last ``within_s`` seconds is open as the kernel sees it
        now: not closed on either side, and holding nothing to read (an agent's end of file, or bytes nobody asked
        for)."""
        now = time.monotonic()
        for (reader, writer), since in self._idle:
            if now - since >= within_s or writer.is_closing() or reader.at_eof():
                continue
            sock = writer.get_extra_info("socket")
            if sock is None:
                continue
            try:
                readable, _, _ = select.select([sock.fileno()], [], [], 0)
            except (OSError, ValueError):
                continue
            if not readable:
                return True
        return False

    async def _acquire(self) -> _Conn:
        if self._closed:
            raise Unavailable(f"the client of {self._label} is closed")
        max_idle = self._transport.max_idle_s
        while self._idle:
            conn, since = self._idle.pop()
            fresh = max_idle is None or time.monotonic() - since < max_idle
            if fresh and not conn[1].is_closing() and not conn[0].at_eof():
                return conn
            _close(conn)
        try:
            return await self._transport.connect()
        except (TimeoutError, OSError, asyncio.IncompleteReadError, FrameError) as e:
            raise Unavailable(f"the agent of {self._label} does not answer at {self.address}: {e!r}") from e

    def connected(self) -> bool:
        """Whether an idle pooled connection is still open (``_open_since``): its agent's process lives. (When it
        dies, the kernel closes its end; a hung agent keeps the connection open, so this says nothing of whether it
        answers.) A TCP connection idle past the transport's bound says nothing: a peer may be gone without a word."""
        max_idle = self._transport.max_idle_s
        return self._open_since(float("inf") if max_idle is None else max_idle)

    def _release(self, conn: _Conn) -> None:
        if self._closed or len(self._idle) >= MAX_IDLE_CONNECTIONS:
            _close(conn)
        else:
            self._idle.append((conn, time.monotonic()))

    async def close(self) -> None:
        self._closed = True
        while self._idle:
            _close(self._idle.pop()[0])

    # ------------------------------------------------------------------ typed ops

    async def ping(self, *, deadline: float = 2.0) -> dict[str, Any]:
        result, _ = await self.request("ping", deadline=deadline)
        return result

    async def wait_ready(self, timeout: float, *, require_healthy: bool = True, interval: float = 0.05) -> Health:
        """Poll until the agent answers (and, if asked, every health check passes)."""
        give_up = time.monotonic() + timeout
        last: Exception | str = "never answered"
        while True:
            try:
                health = await self.health(deadline=min(5.0, max(0.5, give_up - time.monotonic())))
                if health.ok or not require_healthy:
                    return health
                last = f"unhealthy: {health.failures}"
            except (Unavailable, DeadlineExceeded) as e:
                last = e
            if time.monotonic() >= give_up:
                raise Unavailable(f"{self._label} was not ready within {timeout:g} s: {last}")
            await asyncio.sleep(interval)

    async def health(self, *, deadline: float = 10.0) -> Health:
        result, _ = await self.request("health", deadline=deadline)
        return Health.model_validate({"ok": result["ok"], "checks": result["checks"]})

    async def exec(
        self,
        cmd: str | Sequence[str],
        *,
        timeout: float = 60.0,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        session: str | None = None,
        stdin: bytes = b"",
        max_output: int | None = None,
        keep_background: bool = False,
    ) -> ExecResult:
        args: dict[str, Any] = {"cmd": cmd if isinstance(cmd, str) else list(cmd), "timeout": timeout}
        if cwd is not None:
            args["cwd"] = cwd
        if env:
            args["env"] = env
        if session is not None:
            args["session"] = session
        if max_output is not None:
            args["max_output"] = max_output
        if keep_background:
            args["keep_background"] = True
        result, out = await self.request("exec", args, stdin, deadline=timeout + 10)
        split = int(result["stdout_bytes"])
        return ExecResult.from_agent(result, out[:split], out[split:])

    async def screenshot(self, *, format: str = "png", quality: int = 80) -> Screenshot:
        if format not in ("png", "jpeg", "zstd"):
            raise InvalidArgument(f"screenshot format must be png, jpeg or zstd, not {format!r}")
        result, data = await self.request("screenshot", {"format": format, "quality": quality}, deadline=10)
        return Screenshot(data=data, width=result["width"], height=result["height"], format=result["format"])

    async def act(self, action: dict[str, Any], *, deadline: float = 70.0) -> dict[str, Any]:
        result, _ = await self.request("action", {"action": action}, deadline=deadline)
        return result

    async def read_file(self, path: str, *, offset: int = 0, length: int | None = None) -> bytes:
        args: dict[str, Any] = {"path": path, "offset": offset}
        if length is not None:
            args["length"] = length
        _, data = await self.request("file_read", args, deadline=120)
        return data

    async def write_file(
        self, path: str, data: bytes, *, mode: int = 0o644, append: bool = False, make_parents: bool = True
    ) -> int:
        args = {"path": path, "mode": mode, "append": append, "make_parents": make_parents}
        result, _ = await self.request("file_write", args, data, deadline=120)
        return int(result["size"])

    async def list_dir(self, path: str = "/workspace") -> list[FileInfo]:
        result, _ = await self.request("file_list", {"path": path}, deadline=30)
        return [FileInfo.model_validate(e) for e in result["entries"]]

    async def stat(self, path: str) -> FileInfo:
        result, _ = await self.request("file_stat", {"path": path}, deadline=10)
        return FileInfo.model_validate(result)

    async def delete(self, path: str, *, recursive: bool = False) -> None:
        await self.request("file_delete", {"path": path, "recursive": recursive}, deadline=60)

    async def mkdir(self, path: str) -> None:
        await self.request("file_mkdir", {"path": path}, deadline=10)

    async def navigate(self, url: str, *, timeout: float = 30.0, page: str | None = None) -> dict[str, Any]:
        args = _on_page({"url": url, "timeout": timeout}, page)
        result, _ = await self.request("browser_navigate", args, deadline=timeout + 5)
        return result

    async def evaluate(self, expression: str, *, deadline: float = 30.0, page: str | None = None) -> Any:
        args = _on_page({"expression": expression}, page)
        result, _ = await self.request("browser_evaluate", args, deadline=deadline)
        return result.get("value")

    async def browser_info(self, *, page: str | None = None) -> dict[str, Any]:
        result, _ = await self.request("browser_info", _on_page({}, page), deadline=10)
        return result

    # Several pages in a browser sandbox, each with its own clock (sandbox/agent/pages.py); `page` is a page id
    # from page_open or page_list, None the active page.

    async def page_screenshot(self, *, page: str | None = None, format: str = "png", quality: int = 80) -> Screenshot:
        args = _on_page({"format": format, "quality": quality}, page)
        result, data = await self.request("browser_screenshot", args, deadline=15)
        return Screenshot(data=data, width=result["width"], height=result["height"], format=result["format"])

    async def page_open(
        self, url: str, *, clock: str = "running", factor: float = 1.0, timeout: float = 30.0
    ) -> dict[str, Any]:
        """Open ``url`` in a window of its own: ``{"page": id, "url", "title", "clock": state or None}``."""
        args = {"url": url, "clock": clock, "factor": factor, "timeout": timeout}
        result, _ = await self.request("page_open", args, deadline=timeout + 10)
        return result

    async def page_close(self, page: str) -> dict[str, Any]:
        result, _ = await self.request("page_close", {"page": page}, deadline=10)
        return result

    async def page_list(self) -> list[dict[str, Any]]:
        result, _ = await self.request("page_list", deadline=10)
        return list(result["pages"])

    async def clock(
        self, op: str, *, page: str | None = None, ms: float | None = None, factor: float | None = None
    ) -> dict[str, Any]:
        """``op``: pause, resume, step (``ms``), speed (``factor``) or state; the clock's state afterwards."""
        args = _on_page({"op": op, "ms": ms, "factor": factor}, page)
        result, _ = await self.request("page_clock", args, deadline=120)
        return dict(result["clock"])

    async def page_key(self, key: str, *, page: str | None = None) -> None:
        await self.request("page_key", _on_page({"key": key}, page), deadline=10)

    async def page_click(
        self, x: float, y: float, *, page: str | None = None, button: str = "left", count: int = 1
    ) -> None:
        args = _on_page({"x": x, "y": y, "button": button, "count": count}, page)
        await self.request("page_click", args, deadline=10)

    async def ports(self) -> list[dict[str, Any]]:
        """The sandbox's listening TCP ports: ``{"port", "addresses", "previewable"}`` each, lowest first."""
        result, _ = await self.request("ports", deadline=10)
        return list(result.get("ports") or [])

    async def open_tunnel(self, port: int, *, user: bool = False) -> _Conn:
        """A raw byte stream to ``port`` inside the sandbox (VNC, DevTools; with ``user``, a user's port for a
        preview URL: any port from 1024 but the platform's own). The caller closes it. With ``user``, nothing
        listening there is :class:`PortClosed`."""
        conn = await self._acquire()
        reader, writer = conn
        args: dict[str, Any] = {"port": port, "user": True} if user else {"port": port}
        try:
            writer.write(encode_frame({"op": "tunnel", "args": args, "deadline": 10}))
            await writer.drain()
            header, _ = await asyncio.wait_for(read_frame(reader), agent_deadline(10))
        except (TimeoutError, OSError, asyncio.IncompleteReadError, FrameError) as e:
            _close(conn)
            raise Unavailable(f"cannot open a tunnel to port {port} of {self._label}: {e!r}") from e
        if not header.get("ok"):
            _close(conn)
            error = header.get("error") or {}
            if user and error.get("code") == ErrorCode.UNAVAILABLE:
                raise PortClosed(str(error.get("message")))
            raise from_agent(str(error.get("code")), str(error.get("message")))
        return conn


class PortClosed(Unavailable):
    """Nothing listens on the port a preview URL names, in a sandbox that is itself fine (the proxy answers 502)."""


def _on_page(args: dict[str, Any], page: str | None) -> dict[str, Any]:
    return {**args, "page": page} if page is not None else args


def _keepalive(writer: asyncio.StreamWriter) -> None:
    """TCP keepalive every few seconds: a dead peer then fails a pooled connection instead of hanging it."""
    sock = writer.get_extra_info("socket")
    if sock is None:
        return
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for name, value in (("TCP_KEEPIDLE", 15), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 3)):
            if hasattr(socket, name):
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)


def _close(conn: _Conn) -> None:
    with contextlib.suppress(Exception):
        conn[1].close()


__all__ = ["AgentClient", "PortClosed", "SandboxError"]
