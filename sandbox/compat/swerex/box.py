"""The sandbox as the SWE-ReX runtime reaches it: the platform's exec and file API, and the helper shipped into it.

:class:`Box` writes :mod:`sandbox.compat.swerex.inbox` and its daemon :mod:`~sandbox.compat.swerex.ptyd` into the
sandbox once (under ``/tmp``, a root of the file API), starts the daemon on first use, and runs the helper's
operations: each one platform exec of ``python3`` on it, whose JSON reply is handed back. A request too long for one
argument travels as a file written beside it.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import json
import os
import secrets
from pathlib import Path
from typing import Any

from sandbox.client import Sandbox
from sandbox.errors import SandboxError
from sandbox.models import ExecResult, Health

SHIPPED = ("inbox.py", "ptyd.py")
"""The helper's files, written into the sandbox beside each other."""
ARG_LIMIT = 100_000
"""A request longer than this (bytes of JSON) is written to a file first: Linux takes at most 128 KiB an argument."""
EXEC_SLACK_S = 15.0
"""Added to what a request may wait for, as the exec's own timeout (starting python, the syntax check, the RPC)."""
MAX_EXEC_S = 3600.0
"""The platform's longest exec."""


class BoxError(RuntimeError):
    """The helper inside the sandbox could not be run or answered nonsense (the sandbox is gone or broken)."""


class Box:
    """One sandbox's helper: where it lives, and the calls that run it.

    The SDK's blocking ``Sandbox`` is called in a worker thread, not the asyncio SDK: SWE-agent runs every runtime
    call in an event loop of its own (``asyncio.run`` each time), and an asyncio gRPC channel belongs to the loop
    that opened it."""

    def __init__(self, sandbox: Sandbox, *, python: str = "python3") -> None:
        self.sandbox = sandbox
        self.python = python
        self.directory = f"/tmp/.swerex-{secrets.token_hex(6)}"
        self._shipped = False
        self._serving = False

    @property
    def helper(self) -> str:
        return f"{self.directory}/inbox.py"

    def staging_path(self, suffix: str = "") -> str:
        return f"{self.directory}/stage-{secrets.token_hex(8)}{suffix}"

    async def ship(self) -> None:
        if not self._shipped:
            for name in SHIPPED:
                source = await asyncio.to_thread(Path(__file__).with_name(name).read_bytes)
                await self.write(f"{self.directory}/{name}", source)
            self._shipped = True

    async def one_shot(self, command: str, request: dict[str, Any], *, wait_s: float = 0.0) -> dict[str, Any]:
        """Run one of the helper's one-shot commands (``execute``, ``read``, ``copy``, ``untar``); its reply."""
        await self.ship()
        return await self._run([command, await self._argument(request)], wait_s)

    async def session(self, request: dict[str, Any], *, wait_s: float) -> dict[str, Any]:
        """Hand the session daemon a request (a session's name and the operations to run in it); its reply."""
        await self.ship()
        if not self._serving:
            started = await self.exec(
                [self.python, "-S", self.helper, "serve", self.directory], timeout=60, keep_background=True
            )
            if started.exit_code != 0:
                raise BoxError(f"the session daemon did not start: {started.stdout}{started.stderr}")
            self._serving = True
        return await self._run(["call", self.directory, await self._argument(request)], wait_s)

    async def stop_sessions(self) -> None:
        """Stop the session daemon (and with it every session's bash), if it was started."""
        if self._serving:
            self._serving = False
            with contextlib.suppress(BoxError, SandboxError):  # already gone with its sandbox
                await self._run(["call", self.directory, json.dumps({"session": "", "shutdown": True})], 0)

    async def exec(self, argv: list[str], *, timeout: float, keep_background: bool = False) -> ExecResult:
        return await asyncio.to_thread(self.sandbox.exec, argv, timeout=timeout, keep_background=keep_background)

    async def read(self, path: str) -> bytes:
        return await asyncio.to_thread(self.sandbox.files.read, path)

    async def write(self, path: str, data: bytes) -> None:
        await asyncio.to_thread(self.sandbox.files.write, path, data)

    async def upload(self, local_path: str, remote_path: str) -> None:
        await asyncio.to_thread(self.sandbox.files.upload, local_path, remote_path)

    async def health(self) -> Health:
        return await asyncio.to_thread(self.sandbox.health)

    async def _argument(self, request: dict[str, Any]) -> str:
        text = json.dumps(request)
        if len(text.encode()) <= ARG_LIMIT:
            return text
        path = self.staging_path(".json")
        await self.write(path, text.encode())
        return "@" + path

    async def _run(self, argv: list[str], wait_s: float) -> dict[str, Any]:
        timeout = min(wait_s + EXEC_SLACK_S, MAX_EXEC_S)
        # -S: no site-packages; the helper needs the standard library only, and starts in half the time.
        result = await self.exec([self.python, "-S", self.helper, *argv], timeout=timeout)
        if result.timed_out or result.exit_code != 0:
            raise BoxError(f"the sandbox's helper failed ({argv[0]}, exit {result.exit_code}): {result.stderr[-2000:]}")
        try:
            reply = json.loads(result.stdout)
        except ValueError as e:
            raise BoxError(f"the sandbox's helper answered {result.stdout[:200]!r}: {result.stderr[-2000:]}") from e
        if not isinstance(reply, dict):
            raise BoxError(f"the sandbox's helper answered {reply!r}")
        return reply


def os_error(error: dict[str, Any]) -> OSError:
    """The ``OSError`` the helper reported, as the same built-in class (``FileNotFoundError``, ...)."""
    cls = getattr(builtins, str(error.get("type")), OSError)
    if not (isinstance(cls, type) and issubclass(cls, OSError)):
        cls = OSError
    if error.get("errno") is None:
        return cls(error.get("strerror") or "")
    return cls(error["errno"], error.get("strerror") or os.strerror(error["errno"]), error.get("filename"))
