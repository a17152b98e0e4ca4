"""A backend for unit tests of the layers above backends: each "instance" is the real agent running as a
local subprocess with its own workspace directory. No isolation at all: never use it for anything but
tests (no server config can select it). Terminal instances, and android ones: the agent with ``--kind android``,
whose driver reaches whatever adb server and emulator console the spec's env names (the tests' fakes: set
``ANDROID_ADB_SERVER_PORT``, ``SANDBOX_ANDROID_CONSOLE_PORT``, and ``SANDBOX_ANDROID_GRPC`` empty)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from sandbox.backends.agent_client import AgentClient
from sandbox.backends.base import (
    LABEL_INSTANCE,
    LABEL_KIND,
    LABEL_POOL,
    LABEL_TENANT_HASH,
    Backend,
    BackendInstance,
    BackendSnapshot,
    HostFacts,
    RuntimeState,
    check_cpus,
    tenant_hash,
)
from sandbox.errors import FailedPrecondition, NotFound, Unavailable
from sandbox.models import SandboxKind, SandboxSpec
from sandbox.protocol import AGENT_SOCKET_NAME

KINDS = (SandboxKind.TERMINAL, SandboxKind.ANDROID)
_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class FakeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    socket_root: str = Field(
        default_factory=lambda: os.path.join(os.environ.get("TMPDIR", "/tmp"), "sandbox-fake"),
        description="Where the fake runs its in-process agents' sockets.",
    )
    host_memory_mb: float | None = Field(
        None, description="The host size the fake reports to the capacity model (None: no host model)."
    )
    host_cpus: float = 2.0
    host_pids: int = 32_768


@dataclass
class _Proc:
    process: asyncio.subprocess.Process
    spec: SandboxSpec
    created_at: float
    pool: str | None
    tenant: str | None = None


class FakeBackend(Backend):
    name = "fake"
    can_snapshot = False

    async def host_facts(
        self, *, memory_mb: float | None = None, cpus: float | None = None, pids: int | None = None
    ) -> HostFacts | None:
        c = self.config
        memory = memory_mb if memory_mb is not None else c.host_memory_mb
        if memory is None:
            return None
        return HostFacts(cpus=cpus if cpus is not None else c.host_cpus, memory_mb=memory, pids=pids or c.host_pids)

    def __init__(self, config: FakeConfig) -> None:
        super().__init__()
        self.config = config
        self._procs: dict[str, _Proc] = {}
        self._claims: dict[str, dict[str, Any]] = {}

    def _dir(self, instance_id: str) -> str:
        return os.path.join(self.config.socket_root, instance_id)

    async def create(
        self,
        instance_id: str,
        spec: SandboxSpec,
        *,
        pool: str | None = None,
        ready_timeout: float | None = None,
        tenant: str | None = None,
    ) -> BackendInstance:
        """``tenant`` is kept only as the instance's ``LABEL_TENANT_HASH`` label (the fake has no networks)."""
        if spec.kind not in KINDS or (spec.kind is SandboxKind.ANDROID and "ANDROID_ADB_SERVER_PORT" not in spec.env):
            raise FailedPrecondition(
                f"the fake backend runs terminal sandboxes only (and android ones whose env names a fake adb server's "
                f"ANDROID_ADB_SERVER_PORT), not {spec.kind.value}"
            )
        check_cpus(spec, len(os.sched_getaffinity(0)))  # as the Docker backend does
        await asyncio.to_thread(os.makedirs, os.path.join(self._dir(instance_id), "workspace"), exist_ok=True)
        self._procs[instance_id] = _Proc(await self._spawn(instance_id, spec), spec, time.time(), pool, tenant)
        try:
            await self.agent(instance_id).wait_ready(ready_timeout or 30)
        except Unavailable:
            await self.destroy(instance_id)
            raise
        return await self.inspect(instance_id)

    async def _spawn(self, instance_id: str, spec: SandboxSpec) -> asyncio.subprocess.Process:
        root = self._dir(instance_id)
        workspace = os.path.join(root, "workspace")
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "sandbox.agent", "--kind", spec.kind.value,
            "--socket", os.path.join(root, AGENT_SOCKET_NAME), "--workspace", workspace, "--roots", workspace,
            env={**os.environ, **spec.env, "PYTHONPATH": _REPO_ROOT},
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip

    async def restart(self, instance_id: str, *, ready_timeout: float | None = None) -> BackendInstance:
        proc = self._procs.get(instance_id)
        if proc is None:
            raise NotFound(f"no instance {instance_id}")
        await self._forget_agent(instance_id)
        await self._kill(proc)
        proc.process = await self._spawn(instance_id, proc.spec)
        await self.agent(instance_id).wait_ready(ready_timeout or 30)
        return await self.inspect(instance_id)

    async def destroy(self, instance_id: str) -> None:
        await self._forget_agent(instance_id)
        self._claims.pop(instance_id, None)
        proc = self._procs.pop(instance_id, None)
        if proc is not None:
            await self._kill(proc)
        await asyncio.to_thread(shutil.rmtree, self._dir(instance_id), True)

    async def _kill(self, proc: _Proc) -> None:
        if proc.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.process.pid, signal.SIGKILL)
            await proc.process.wait()

    async def inspect(self, instance_id: str) -> BackendInstance:
        proc = self._procs.get(instance_id)
        if proc is None:
            return BackendInstance(id=instance_id, kind=SandboxKind.TERMINAL, ref="", state=RuntimeState.MISSING)
        code = proc.process.returncode
        labels = {LABEL_INSTANCE: instance_id, LABEL_KIND: proc.spec.kind.value, **proc.spec.labels}
        if proc.pool:
            labels[LABEL_POOL] = proc.pool
        if proc.tenant is not None:
            labels[LABEL_TENANT_HASH] = tenant_hash(proc.tenant)
        return BackendInstance(
            id=instance_id,
            kind=proc.spec.kind,
            ref=str(proc.process.pid),
            state=RuntimeState.RUNNING if code is None else RuntimeState.EXITED,
            labels=labels,
            created_at=proc.created_at,
            exit_code=code,
        )

    async def list_instances(self) -> list[BackendInstance]:
        return [await self.inspect(i) for i in self._procs.copy()]

    async def logs(self, instance_id: str, *, tail: int = 200) -> str:
        return ""

    async def set_claim(self, instance_id: str, claim: dict[str, Any]) -> None:
        if instance_id in self._procs:
            self._claims[instance_id] = dict(claim)

    async def claims(self) -> dict[str, dict[str, Any]]:
        return {i: dict(c) for i, c in self._claims.items()}

    async def snapshot(self, instance_id: str, name: str, *, record: dict[str, Any] | None = None) -> str:
        raise FailedPrecondition("the fake backend cannot take snapshots")

    async def list_snapshots(self) -> list[BackendSnapshot]:
        return []

    async def collect_snapshots(
        self, *, keep: set[str], only: set[str] | None = None, min_age_s: float = 0.0
    ) -> list[str]:
        return []

    def _connect_agent(self, instance_id: str) -> AgentClient:
        path = os.path.join(self._dir(instance_id), AGENT_SOCKET_NAME)
        return AgentClient(path, label=f"fake instance {instance_id}")

    async def close(self) -> None:
        for instance_id in list(self._procs):
            await self.destroy(instance_id)
        await super().close()
