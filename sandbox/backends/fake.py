"""A backend for unit tests of the layers above backends: each "sandbox" is the real agent
running as a local subprocess with its own workspace directory. No isolation at all:
never use it for anything but tests. Terminal sandboxes only (no display)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass

from sandbox.agent_client import AgentClient
from sandbox.backends.base import LABEL_ID, LABEL_KIND, Backend, BackendSandbox, RuntimeState
from sandbox.backends.config import FakeConfig
from sandbox.errors import FailedPrecondition, Unavailable
from sandbox.models import SandboxKind, SandboxSpec
from sandbox.protocol import AGENT_SOCKET_NAME

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclass
class _Proc:
    process: asyncio.subprocess.Process
    spec: SandboxSpec
    created_at: float


class FakeBackend(Backend):
    name = "fake"

    def __init__(self, config: FakeConfig) -> None:
        self.config = config
        self._procs: dict[str, _Proc] = {}
        self._agents: dict[str, AgentClient] = {}

    def _dir(self, sandbox_id: str) -> str:
        return os.path.join(self.config.socket_root, sandbox_id)

    async def create(self, sandbox_id: str, spec: SandboxSpec, *, ready_timeout: float | None = None) -> BackendSandbox:
        if spec.kind is not SandboxKind.TERMINAL:
            raise FailedPrecondition(f"the fake backend runs terminal sandboxes only, not {spec.kind.value}")
        root = self._dir(sandbox_id)
        workspace = os.path.join(root, "workspace")
        await asyncio.to_thread(os.makedirs, workspace, exist_ok=True)
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "sandbox.agent", "--kind", "terminal",
            "--socket", os.path.join(root, AGENT_SOCKET_NAME), "--workspace", workspace, "--roots", workspace,
            env={**os.environ, **spec.env, "PYTHONPATH": _REPO_ROOT},
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        self._procs[sandbox_id] = _Proc(process, spec, time.time())
        try:
            await self.agent(sandbox_id).wait_ready(ready_timeout or 30)
        except Unavailable:
            await self.destroy(sandbox_id)
            raise
        return await self.inspect(sandbox_id)

    async def destroy(self, sandbox_id: str) -> None:
        agent = self._agents.pop(sandbox_id, None)
        if agent is not None:
            await agent.close()
        proc = self._procs.pop(sandbox_id, None)
        if proc is not None and proc.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.process.pid, signal.SIGKILL)
            await proc.process.wait()
        await asyncio.to_thread(shutil.rmtree, self._dir(sandbox_id), True)

    async def inspect(self, sandbox_id: str) -> BackendSandbox:
        proc = self._procs.get(sandbox_id)
        if proc is None:
            return BackendSandbox(id=sandbox_id, kind=SandboxKind.TERMINAL, ref="", state=RuntimeState.MISSING)
        code = proc.process.returncode
        return BackendSandbox(
            id=sandbox_id,
            kind=proc.spec.kind,
            ref=str(proc.process.pid),
            state=RuntimeState.RUNNING if code is None else RuntimeState.EXITED,
            labels={LABEL_ID: sandbox_id, LABEL_KIND: proc.spec.kind.value, **proc.spec.labels},
            created_at=proc.created_at,
            exit_code=code,
        )

    async def list_sandboxes(self) -> list[BackendSandbox]:
        return [await self.inspect(i) for i in self._procs.copy()]

    async def logs(self, sandbox_id: str, *, tail: int = 200) -> str:
        return ""

    async def snapshot(self, sandbox_id: str, name: str) -> str:
        raise FailedPrecondition("the fake backend cannot take snapshots")

    async def collect_snapshots(self, *, keep: set[str]) -> list[str]:
        return []

    def agent(self, sandbox_id: str) -> AgentClient:
        client = self._agents.get(sandbox_id)
        if client is None:
            path = os.path.join(self._dir(sandbox_id), AGENT_SOCKET_NAME)
            client = self._agents[sandbox_id] = AgentClient(path, label=f"fake sandbox {sandbox_id}")
        return client

    async def close(self) -> None:
        for sandbox_id in list(self._procs):
            await self.destroy(sandbox_id)
