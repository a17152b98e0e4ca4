"""Host-side client of one sandbox's agent, over the unix socket the backend provides.

Connections are pooled: a request takes an idle connection or opens one, so many steps
on one sandbox can run at once. A connection that saw any error is dropped, never reused.
"""

from __future__ import annotations

import asyncio
import contextlib
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
from sandbox.protocol import FrameError, encode_frame, read_frame
from sandbox.wire.limits import agent_deadline
from sandbox.wire.status import from_agent

CONNECT_TIMEOUT_S = 3.0
MAX_IDLE_CONNECTIONS = 16

_Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class AgentClient:
    def __init__(self, socket_path: str, *, label: str = "") -> None:
        self.socket_path = socket_path
        self._label = label or socket_path
        self._idle: list[_Conn] = []
        self._closed = False

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
            header, out = await asyncio.wait_for(read_frame(reader), agent_deadline(deadline))
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

    async def _acquire(self) -> _Conn:
        if self._closed:
            raise Unavailable(f"the client of {self._label} is closed")
        while self._idle:
            conn = self._idle.pop()
            if not conn[1].is_closing() and not conn[0].at_eof():
                return conn
            _close(conn)
        try:
            return await asyncio.wait_for(
                asyncio.open_unix_connection(self.socket_path, limit=1 << 20), CONNECT_TIMEOUT_S
            )
        except (TimeoutError, OSError) as e:
            raise Unavailable(f"the agent of {self._label} does not answer at {self.socket_path}: {e!r}") from e

    def _release(self, conn: _Conn) -> None:
        if self._closed or len(self._idle) >= MAX_IDLE_CONNECTIONS:
            _close(conn)
        else:
            self._idle.append(conn)

    async def close(self) -> None:
        self._closed = True
        while self._idle:
            _close(self._idle.pop())

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
        return ExecResult(
            exit_code=result["exit_code"],
            stdout=out[:split].decode("utf-8", errors="replace"),
            stderr=out[split:].decode("utf-8", errors="replace"),
            timed_out=result["timed_out"],
            stdout_truncated=result["stdout_truncated"],
            stderr_truncated=result["stderr_truncated"],
            duration_ms=result["duration_ms"],
            session_restarted=result.get("session_restarted", False),
        )

    async def screenshot(self, *, format: str = "png", quality: int = 80) -> Screenshot:
        if format not in ("png", "jpeg"):
            raise InvalidArgument(f"screenshot format must be png or jpeg, not {format!r}")
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

    async def navigate(self, url: str, *, timeout: float = 30.0) -> dict[str, Any]:
        result, _ = await self.request("browser_navigate", {"url": url, "timeout": timeout}, deadline=timeout + 5)
        return result

    async def evaluate(self, expression: str, *, deadline: float = 30.0) -> Any:
        result, _ = await self.request("browser_evaluate", {"expression": expression}, deadline=deadline)
        return result.get("value")

    async def browser_info(self) -> dict[str, Any]:
        result, _ = await self.request("browser_info", deadline=10)
        return result

    async def open_tunnel(self, port: int) -> _Conn:
        """A raw byte stream to ``port`` inside the sandbox (VNC, DevTools). The caller closes it."""
        conn = await self._acquire()
        reader, writer = conn
        try:
            writer.write(encode_frame({"op": "tunnel", "args": {"port": port}, "deadline": 10}))
            await writer.drain()
            header, _ = await asyncio.wait_for(read_frame(reader), agent_deadline(10))
        except (TimeoutError, OSError, asyncio.IncompleteReadError, FrameError) as e:
            _close(conn)
            raise Unavailable(f"cannot open a tunnel to port {port} of {self._label}: {e!r}") from e
        if not header.get("ok"):
            _close(conn)
            error = header.get("error") or {}
            raise from_agent(str(error.get("code")), str(error.get("message")))
        return conn


def _close(conn: _Conn) -> None:
    with contextlib.suppress(Exception):
        conn[1].close()


__all__ = ["AgentClient", "SandboxError"]
