"""A task's view of one sandbox (``sandbox.tasks.runtime.TaskRuntime``), over the sandbox's agent.

Task set-up and evaluators run on the control plane and reach into the sandbox through this: commands, files,
the browser. Files outside the agent's roots (``/workspace``, ``/tmp``) — OSWorld tasks live in ``~/Desktop`` —
go through a command run as the sandbox's user instead (``base64`` out, ``cat`` in), with the same result. The
browser is the agent's own in a browser sandbox; elsewhere (a desktop) it is the Chromium a task's setup started, asked
over its DevTools from inside the sandbox (``scripts.CDP``), since the agent there drives none.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import Any

from sandbox.backends.agent_client import AgentClient
from sandbox.errors import InvalidArgument, NotFound, PermissionDenied
from sandbox.models import ExecResult, SandboxKind, SandboxSpec
from sandbox.tasks.scripts import CDP

MAX_FILE_BYTES = 64 * 1024 * 1024
EVALUATE_TIMEOUT_S = 30.0


class AgentRuntime:
    """One sandbox as a task runtime: its kind, its screen, and its agent."""

    def __init__(self, agent: AgentClient, spec: SandboxSpec) -> None:
        self._agent = agent
        self.kind: SandboxKind = spec.kind
        self.screen_width = spec.screen.width
        self.screen_height = spec.screen.height

    async def exec(
        self,
        cmd: str | Sequence[str],
        *,
        timeout: float = 60.0,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        keep_background: bool = False,
    ) -> ExecResult:
        return await self._agent.exec(
            cmd if isinstance(cmd, str) else list(cmd),
            timeout=timeout,
            cwd=cwd,
            env=dict(env or {}),
            keep_background=keep_background,
        )

    async def read_file(self, path: str) -> bytes:
        try:
            return await self._agent.read_file(path)
        except PermissionDenied:
            pass  # outside the agent's roots: read it as the sandbox's user
        result = await self._agent.exec(["base64", "-w0", "--", path], timeout=60, max_output=MAX_FILE_BYTES * 2)
        if result.exit_code != 0:
            raise NotFound(f"cannot read {path} in the sandbox: {result.stderr.strip() or 'no such file'}")
        return base64.b64decode(result.stdout)

    async def write_file(self, path: str, data: bytes, *, mode: int = 0o644) -> int:
        try:
            return await self._agent.write_file(path, data, mode=mode)
        except PermissionDenied:
            pass
        script = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1" && chmod "$2" -- "$1"'
        result = await self._agent.exec(
            ["sh", "-c", script, "sh", path, format(mode, "o")], timeout=60, stdin=bytes(data)
        )
        if result.exit_code != 0:
            raise InvalidArgument(f"cannot write {path} in the sandbox: {result.stderr.strip()}")
        return len(data)

    async def browser_info(self) -> dict[str, Any]:
        if self.kind is SandboxKind.BROWSER:
            return await self._agent.browser_info()
        # A desktop's agent drives no browser: the Chromium a task started, asked over its DevTools in the sandbox.
        tabs = await self.browser_tabs()
        return {"url": tabs[0]["url"], "title": tabs[0]["title"]} if tabs else {"url": "", "title": ""}

    async def browser_tabs(self) -> list[dict[str, Any]]:
        """The browser's page targets (id, url, title), most recently active first."""
        result = await self._agent.exec(["python3", "-c", CDP, "list"], timeout=30)
        if result.exit_code != 0:
            raise NotFound(f"the sandbox's browser does not answer: {result.stderr.strip()}")
        tabs: list[dict[str, Any]] = json.loads(result.stdout)
        return tabs

    async def navigate(self, url: str) -> dict[str, Any]:
        return await self._agent.navigate(url)

    async def evaluate_js(self, expression: str) -> Any:
        if self.kind is SandboxKind.BROWSER:
            return await self._agent.evaluate(expression)
        # As browser_info: in the desktop's Chromium, in its most recently active page.
        cmd = ["python3", "-c", CDP, "evaluate", expression, f"{EVALUATE_TIMEOUT_S:g}"]
        result = await self._agent.exec(cmd, timeout=EVALUATE_TIMEOUT_S + 15)
        if result.exit_code != 0:
            reason = (result.stderr.strip().splitlines() or [f"exit code {result.exit_code}"])[-1]
            raise InvalidArgument(f"cannot evaluate the expression in the sandbox's browser: {reason}")
        return json.loads(result.stdout)
