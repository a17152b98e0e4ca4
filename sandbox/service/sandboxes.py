"""The one service layer behind gRPC, REST, the CLI and the SDK.

Every call names the principal it acts for; a sandbox of another tenant is reported
exactly like a missing one, so its existence does not leak.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from sandbox.agent_client import AgentClient
from sandbox.backends.base import Backend, RuntimeState, probe_health
from sandbox.errors import FailedPrecondition, InvalidArgument, NotFound, SandboxError, Unavailable
from sandbox.models import (
    COMPUTER_ACTIONS,
    Action,
    Evaluate,
    Exec,
    ExecResult,
    FileInfo,
    Health,
    Navigate,
    Observation,
    SandboxInfo,
    SandboxKind,
    SandboxSpec,
    SandboxState,
    Screenshot,
)
from sandbox.service.auth import Principal

RECENT_ACTIONS = 50


@dataclass
class _Record:
    id: str
    tenant: str
    spec: SandboxSpec
    state: SandboxState
    created_at: float
    last_active_at: float
    error: str | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    recent: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=RECENT_ACTIONS))

    def info(self) -> SandboxInfo:
        return SandboxInfo(
            id=self.id,
            tenant=self.tenant,
            kind=self.spec.kind,
            state=self.state,
            spec=self.spec,
            created_at=self.created_at,
            last_active_at=self.last_active_at,
            error=self.error,
        )


def new_sandbox_id(kind: SandboxKind) -> str:
    return f"{kind.value[:4]}-{secrets.token_hex(6)}"


class SandboxService:
    def __init__(self, backend: Backend, *, logger: logging.Logger) -> None:
        self.backend = backend
        self._log = logger
        self._records: dict[str, _Record] = {}

    # ------------------------------------------------------------------ lifecycle

    async def create(self, principal: Principal, spec: SandboxSpec) -> SandboxInfo:
        now = time.time()
        record = _Record(new_sandbox_id(spec.kind), principal.tenant, spec, SandboxState.CREATING, now, now)
        self._records[record.id] = record
        try:
            await self.backend.create(record.id, spec)
        except BaseException:
            self._records.pop(record.id, None)
            raise
        record.state = SandboxState.RUNNING
        self._log.info("created sandbox", extra={"sandbox_id": record.id, "tenant": record.tenant})
        return record.info()

    async def get(self, principal: Principal, sandbox_id: str) -> SandboxInfo:
        return self._find(principal, sandbox_id).info()

    async def list_sandboxes(self, principal: Principal) -> list[SandboxInfo]:
        return [r.info() for r in self._records.values() if principal.can_see(r.tenant)]

    async def delete(self, principal: Principal, sandbox_id: str) -> None:
        record = self._find(principal, sandbox_id)
        async with record.lock:
            record.state = SandboxState.DELETED
            self._records.pop(sandbox_id, None)
            await self.backend.destroy(sandbox_id)

    async def reset(self, principal: Principal, sandbox_id: str) -> SandboxInfo:
        """Back to the sandbox's initial state: a new container from its image, a fresh /workspace."""
        record = self._find(principal, sandbox_id)
        async with record.lock:
            record.state = SandboxState.CREATING
            await self.backend.destroy(sandbox_id)
            try:
                await self.backend.create(sandbox_id, record.spec)
            except SandboxError as e:
                record.state, record.error = SandboxState.UNHEALTHY, f"reset failed: {e.message}"
                raise
            record.state, record.error = SandboxState.RUNNING, None
            record.recent.clear()
            record.last_active_at = time.time()
        return record.info()

    async def close(self, *, destroy_sandboxes: bool = True) -> None:
        """Stop serving. Until records persist across restarts, the sandboxes go with the control plane."""
        if destroy_sandboxes:
            await asyncio.gather(*(self.backend.destroy(i) for i in list(self._records)), return_exceptions=True)
            self._records.clear()
        await self.backend.close()

    # ------------------------------------------------------------------ acting

    async def step(
        self, principal: Principal, sandbox_id: str, action: Action, *, screenshot: bool = False
    ) -> Observation:
        record = self._find(principal, sandbox_id)
        agent = self._agent(record)
        started = time.perf_counter()
        obs: dict[str, Any] = {}
        try:
            if isinstance(action, COMPUTER_ACTIONS):
                self._require_display(record)
                result = await agent.act(action.model_dump(exclude_none=True))
                if "cursor" in result:
                    obs["cursor"] = tuple(result["cursor"])
            elif isinstance(action, Exec):
                obs["exec"] = await self._exec(agent, action)
            elif isinstance(action, Navigate):
                self._require_kind(record, SandboxKind.BROWSER, "navigate")
                page = await agent.navigate(action.url, timeout=action.timeout)
                obs.update(url=page.get("url"), title=page.get("title"))
            elif isinstance(action, Evaluate):
                self._require_kind(record, SandboxKind.BROWSER, "evaluate")
                obs["value"] = await agent.evaluate(action.expression)
            else:  # pragma: no cover - the Action union is closed
                raise InvalidArgument(f"unsupported action {action.type!r}")
            timings = {"action": _ms(started)}
            if screenshot:
                shot_started = time.perf_counter()
                obs["screenshot"] = await agent.screenshot()
                timings["screenshot"] = _ms(shot_started)
        except Unavailable as e:
            raise await self._dead(record, e) from e
        record.last_active_at = time.time()
        record.recent.append({"at": record.last_active_at, "action": action.model_dump(mode="json")})
        return Observation(**obs, timings_ms={**timings, "total": _ms(started)})

    async def observe(
        self, principal: Principal, sandbox_id: str, *, format: str = "png", quality: int = 80
    ) -> Observation:
        record = self._find(principal, sandbox_id)
        agent = self._agent(record)
        started = time.perf_counter()
        obs: dict[str, Any] = {}
        try:
            if record.spec.kind.has_display:
                obs["screenshot"] = await agent.screenshot(format=format, quality=quality)
            if record.spec.kind is SandboxKind.BROWSER:
                page = await agent.browser_info()
                obs.update(url=page.get("url"), title=page.get("title"))
        except Unavailable as e:
            raise await self._dead(record, e) from e
        record.last_active_at = time.time()
        return Observation(**obs, timings_ms={"total": _ms(started)})

    async def screenshot(
        self, principal: Principal, sandbox_id: str, *, format: str = "png", quality: int = 80
    ) -> Screenshot:
        record = self._find(principal, sandbox_id)
        self._require_display(record)
        try:
            return await self._agent(record).screenshot(format=format, quality=quality)
        except Unavailable as e:
            raise await self._dead(record, e) from e

    async def exec(self, principal: Principal, sandbox_id: str, request: Exec) -> ExecResult:
        record = self._find(principal, sandbox_id)
        try:
            result = await self._exec(self._agent(record), request)
        except Unavailable as e:
            raise await self._dead(record, e) from e
        record.last_active_at = time.time()
        return result

    async def _exec(self, agent: AgentClient, request: Exec) -> ExecResult:
        return await agent.exec(
            request.cmd,
            timeout=request.timeout,
            cwd=request.cwd,
            env=request.env,
            session=request.session,
            keep_background=request.keep_background,
        )

    # ------------------------------------------------------------------ files

    async def read_file(
        self, principal: Principal, sandbox_id: str, path: str, *, offset: int = 0, length: int | None = None
    ) -> bytes:
        return await self._call(principal, sandbox_id, "read_file", path, offset=offset, length=length)

    async def write_file(
        self, principal: Principal, sandbox_id: str, path: str, data: bytes, *, mode: int = 0o644, append: bool = False
    ) -> int:
        return await self._call(principal, sandbox_id, "write_file", path, data, mode=mode, append=append)

    async def list_files(self, principal: Principal, sandbox_id: str, path: str) -> list[FileInfo]:
        return await self._call(principal, sandbox_id, "list_dir", path)

    async def delete_file(self, principal: Principal, sandbox_id: str, path: str, *, recursive: bool = False) -> None:
        await self._call(principal, sandbox_id, "delete", path, recursive=recursive)

    # ------------------------------------------------------------------ inspection

    async def health(self, principal: Principal, sandbox_id: str) -> Health:
        record = self._find(principal, sandbox_id)
        health = await probe_health(self.backend, sandbox_id)
        if not health.ok and record.state is SandboxState.RUNNING:
            record.state, record.error = SandboxState.UNHEALTHY, _reason(health)
        return health

    async def logs(self, principal: Principal, sandbox_id: str, *, tail: int = 200) -> str:
        self._find(principal, sandbox_id)
        return await self.backend.logs(sandbox_id, tail=tail)

    async def recent_actions(self, principal: Principal, sandbox_id: str) -> list[dict[str, Any]]:
        return list(self._find(principal, sandbox_id).recent)

    # ------------------------------------------------------------------ helpers

    def _find(self, principal: Principal, sandbox_id: str) -> _Record:
        record = self._records.get(sandbox_id)
        if record is None or not principal.can_see(record.tenant):
            raise NotFound(f"no sandbox {sandbox_id!r}")
        return record

    def _agent(self, record: _Record) -> AgentClient:
        if record.state is SandboxState.CREATING:
            raise FailedPrecondition(f"sandbox {record.id} is still starting")
        if record.state is SandboxState.UNHEALTHY and record.error:
            raise FailedPrecondition(f"sandbox {record.id} is unhealthy: {record.error}")
        return self.backend.agent(record.id)

    async def _call(self, principal: Principal, sandbox_id: str, method: str, *args: Any, **kwargs: Any) -> Any:
        record = self._find(principal, sandbox_id)
        try:
            result = await getattr(self._agent(record), method)(*args, **kwargs)
        except Unavailable as e:
            raise await self._dead(record, e) from e
        record.last_active_at = time.time()
        return result

    async def _dead(self, record: _Record, cause: Unavailable) -> SandboxError:
        """Why a sandbox stopped answering, as the error its caller should see."""
        state = await self.backend.inspect(record.id)
        if state.state is RuntimeState.RUNNING:
            health = await probe_health(self.backend, record.id)
            if health.ok:
                return cause  # a passing fault; the sandbox itself is fine
            reason = _reason(health)
        elif state.state is RuntimeState.MISSING:
            reason = "its container is gone"
        else:
            reason = f"its container exited (code {state.exit_code})"
        record.state, record.error = SandboxState.UNHEALTHY, reason
        self._log.warning("sandbox is dead", extra={"sandbox_id": record.id, "reason": reason})
        return FailedPrecondition(f"sandbox {record.id} is not usable: {reason}")

    def _require_display(self, record: _Record) -> None:
        if not record.spec.kind.has_display:
            raise FailedPrecondition(f"sandbox {record.id} is a {record.spec.kind.value} sandbox with no display")

    def _require_kind(self, record: _Record, kind: SandboxKind, what: str) -> None:
        if record.spec.kind is not kind:
            raise FailedPrecondition(f"{what} needs a {kind.value} sandbox; {record.id} is {record.spec.kind.value}")


def _ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 3)


def _reason(health: Health) -> str:
    return "; ".join(f"{name}: {detail}" for name, detail in health.failures.items()) or "unhealthy"
