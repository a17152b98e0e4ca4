"""Acting in a sandbox: actions, observations, screenshots, commands, files, health, logs and tunnels.

A call that finds the instance dead hands it to ``Failures.dead``, which says why and recovers it when asked to;
the caller gets a clear error either way. A step is the facade's (``SandboxService.step``): it asks ``Episodes`` what
an action does and this part to do it (``act``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from sandbox.backends.agent_client import AgentClient, PortClosed
from sandbox.backends.base import Backend, probe_health
from sandbox.errors import FailedPrecondition, InvalidArgument, Unavailable
from sandbox.models import (
    COMPUTER_ACTIONS,
    PAGE_ACTIONS,
    Action,
    Evaluate,
    Exec,
    ExecResult,
    FileInfo,
    Health,
    Navigate,
    Observation,
    SandboxKind,
    SandboxState,
    Screenshot,
)
from sandbox.models.android import ANDROID_ACTIONS, ANDROID_REFUSED
from sandbox.observability.metrics import Metrics
from sandbox.service.activity import Activity
from sandbox.service.auth import Principal
from sandbox.service.core import Records, ms_since, require_display, require_kind, timed
from sandbox.service.failures import Failures, reason
from sandbox.service.pages import act_on_page, step_screenshot
from sandbox.service.records import SandboxRecord

MIN_USER_PORT, MAX_PORT = 1024, 65535
"""The ports a preview URL may name (``sandbox.agent.ports`` says the same inside the sandbox)."""
TOUCH_EVERY_S = 1.0
"""last_active_at is written at most this often per sandbox (it only feeds the idle timeout)."""


class Acting:
    def __init__(
        self, *, backend: Backend, records: Records, failures: Failures, activity: Activity, metrics: Metrics
    ) -> None:
        self.backend = backend
        self.records = records
        self.failures = failures
        self.activity = activity
        self.metrics = metrics

    async def act(
        self, record: SandboxRecord, actions: Sequence[Action], *, screenshot: bool, shown: Action
    ) -> Observation:
        """Do ``actions`` in order, then take a screenshot if asked; ``shown`` is the action the caller sent (what
        the recent actions list)."""
        for action in actions:  # all checked before any is done
            check_kind(record, action)
        agent = self.records.agent(record)
        started = time.perf_counter()
        obs: dict[str, Any] = {}
        try:
            for action in actions:
                obs.update(await self._perform(record, agent, action))
            timings = {"action": ms_since(started)}
            if screenshot:
                shot_started = time.perf_counter()
                # `shown`, the action sent: `actions` is empty for DONE/FAIL, many for pyautogui code
                obs["screenshot"] = await step_screenshot(agent, shown, obs)
                timings["screenshot"] = ms_since(shot_started)
        except Unavailable as e:
            raise await self.failures.dead(record, e) from e
        await self.touch(record)
        self.activity.note_action(record.id, time.time(), shown)
        return Observation(**obs, timings_ms={**timings, "total": ms_since(started)})

    async def _perform(self, record: SandboxRecord, agent: AgentClient, action: Action) -> dict[str, Any]:
        """One primitive action; the observation's fields it yields."""
        if isinstance(action, (*COMPUTER_ACTIONS, *ANDROID_ACTIONS)):  # android's: to the agent's android driver
            require_display(record)
            result = await agent.act(action.model_dump(exclude_none=True))
            return {"cursor": tuple(result["cursor"])} if "cursor" in result else {}
        if isinstance(action, Exec):
            ran = await _exec(agent, action)
            self.activity.output.add(record.id, action.cmd, ran)
            return {"exec": ran}
        if isinstance(action, Navigate):
            require_kind(record, SandboxKind.BROWSER, "navigate")
            page = await agent.navigate(action.url, timeout=action.timeout, page=action.page)
            return {"url": page.get("url"), "title": page.get("title")}
        if isinstance(action, Evaluate):
            require_kind(record, SandboxKind.BROWSER, "evaluate")
            return {"value": await agent.evaluate(action.expression, page=action.page)}
        if isinstance(action, PAGE_ACTIONS):
            require_kind(record, SandboxKind.BROWSER, action.type)
            return await act_on_page(agent, action)
        # pyautogui, done and fail belong to episodes (service.episodes): never a primitive
        raise InvalidArgument(f"unsupported action {action.type!r}")

    @timed("observe")
    async def observe(
        self, principal: Principal, sandbox_id: str, *, format: str = "png", quality: int = 80
    ) -> Observation:
        record = await self.records.find(principal, sandbox_id)
        agent = self.records.agent(record)
        started = time.perf_counter()
        obs: dict[str, Any] = {}
        try:
            if record.spec.kind.has_display:
                obs["screenshot"] = await agent.screenshot(format=format, quality=quality)
            if record.spec.kind is SandboxKind.BROWSER:
                page = await agent.browser_info()
                obs.update(url=page.get("url"), title=page.get("title"))
        except Unavailable as e:
            raise await self.failures.dead(record, e) from e
        await self.touch(record)
        return Observation(**obs, timings_ms={"total": ms_since(started)})

    @timed("screenshot")
    async def screenshot(
        self, principal: Principal, sandbox_id: str, *, format: str = "png", quality: int = 80
    ) -> Screenshot:
        record = await self.records.find(principal, sandbox_id)
        require_display(record)
        try:
            return await self.records.agent(record).screenshot(format=format, quality=quality)
        except Unavailable as e:
            raise await self.failures.dead(record, e) from e

    @timed("exec")
    async def exec(self, principal: Principal, sandbox_id: str, request: Exec) -> ExecResult:
        record = await self.records.find(principal, sandbox_id)
        try:
            result = await _exec(self.records.agent(record), request)
        except Unavailable as e:
            raise await self.failures.dead(record, e) from e
        self.activity.output.add(record.id, request.cmd, result)
        await self.touch(record)
        return result

    # ------------------------------------------------------------------ files

    @timed("read_file")
    async def read_file(
        self, principal: Principal, sandbox_id: str, path: str, *, offset: int = 0, length: int | None = None
    ) -> bytes:
        data: bytes = await self._call(principal, sandbox_id, "read_file", path, offset=offset, length=length)
        return data

    @timed("write_file")
    async def write_file(
        self, principal: Principal, sandbox_id: str, path: str, data: bytes, *, mode: int = 0o644, append: bool = False
    ) -> int:
        size: int = await self._call(principal, sandbox_id, "write_file", path, data, mode=mode, append=append)
        return size

    @timed("list_files")
    async def list_files(self, principal: Principal, sandbox_id: str, path: str) -> list[FileInfo]:
        files: list[FileInfo] = await self._call(principal, sandbox_id, "list_dir", path)
        return files

    @timed("delete_file")
    async def delete_file(self, principal: Principal, sandbox_id: str, path: str, *, recursive: bool = False) -> None:
        await self._call(principal, sandbox_id, "delete", path, recursive=recursive)

    # ------------------------------------------------------------------ inspection

    @timed("health")
    async def health(self, principal: Principal, sandbox_id: str) -> Health:
        record = await self.records.find(principal, sandbox_id)
        health = await probe_health(self.backend, record.instance)
        if not health.ok:
            await self.failures.mark_failed(record, reason(health), cause="probe_failed")
        return health

    @timed("logs")
    async def logs(self, principal: Principal, sandbox_id: str, *, tail: int = 200) -> str:
        record = await self.records.find(principal, sandbox_id)
        return await self.backend.logs(record.instance, tail=tail)

    async def open_tunnel(
        self, principal: Principal, sandbox_id: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A byte stream to a localhost port inside the sandbox (e.g. its VNC server), through its agent."""
        result: tuple[asyncio.StreamReader, asyncio.StreamWriter] = await self._call(
            principal, sandbox_id, "open_tunnel", port
        )
        return result

    async def open_port(
        self, principal: Principal, sandbox_id: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A byte stream to a *user* port in the sandbox (a preview URL's): any port from 1024 but the platform's own
        (VNC, DevTools, the agent), which the agent refuses. Nothing listening is :class:`PortClosed`, which says
        nothing about the sandbox's health; each call counts as activity for the idle timeout."""
        check_user_port(port)
        record = await self.records.find(principal, sandbox_id)
        try:
            conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] = await self.records.agent(record).open_tunnel(
                port, user=True
            )
        except PortClosed:
            raise
        except Unavailable as e:
            raise await self.failures.dead(record, e) from e
        await self.touch(record)
        return conn

    @timed("ports")
    async def ports(self, principal: Principal, sandbox_id: str, *, touch: bool = True) -> list[dict[str, Any]]:
        """The sandbox's listening TCP ports (``port``, ``addresses``, ``previewable``), lowest first. ``touch=False``:
        a look that is no activity for the idle timeout (the web view's poll must not keep a sandbox alive)."""
        if touch:
            found: list[dict[str, Any]] = await self._call(principal, sandbox_id, "ports")
            return found
        record = await self.records.find(principal, sandbox_id)
        try:
            return await self.records.agent(record).ports()
        except Unavailable as e:
            raise await self.failures.dead(record, e) from e

    async def recent_actions(self, principal: Principal, sandbox_id: str) -> list[dict[str, Any]]:
        await self.records.find(principal, sandbox_id)
        return [
            {"at": at, "action": action.model_dump(mode="json")}
            for at, action in self.activity.recent.get(sandbox_id, ())
        ]

    async def output_tail(self, principal: Principal, sandbox_id: str, *, lines: int = 200) -> list[str]:
        """The last ``lines`` lines its commands printed through this control plane (``service.output_tail``)."""
        await self.records.find(principal, sandbox_id)
        return self.activity.output.tail(sandbox_id, lines)

    # ------------------------------------------------------------------ helpers

    async def _call(self, principal: Principal, sandbox_id: str, method: str, *args: Any, **kwargs: Any) -> Any:
        record = await self.records.find(principal, sandbox_id)
        try:
            result = await getattr(self.records.agent(record), method)(*args, **kwargs)
        except Unavailable as e:
            raise await self.failures.dead(record, e) from e
        await self.touch(record)
        return result

    async def touch(self, record: SandboxRecord, at: float | None = None) -> None:
        """Note activity (for the idle timeout) on the instance the call went to, if it still serves the sandbox;
        ``at``: when it happened (a direct lane's step, read a round late), else now."""
        now = time.time() if at is None else at
        if now - self.activity.touched.get(record.id, 0.0) < TOUCH_EVERY_S:
            return
        self.activity.touched[record.id] = now

        def active(fresh: SandboxRecord) -> bool:
            if fresh.instance != record.instance or fresh.state is not SandboxState.RUNNING:
                return False  # a reset or a recovery swapped the instance meanwhile: leave their record alone
            fresh.last_active_at = now
            return True

        await self.records.update(record.id, active, durable=False)


def check_kind(record: SandboxRecord, action: Action) -> None:
    """Refuse (FailedPrecondition, as ``require_kind`` does) an android action in another kind of sandbox, and a
    computer action an android sandbox cannot do (docs/android.md's table)."""
    kind = record.spec.kind
    if isinstance(action, ANDROID_ACTIONS) and kind is not SandboxKind.ANDROID:
        raise FailedPrecondition(
            f"unsupported action {action.type!r}: it is an android action, and sandbox {record.id} is a {kind.value} "
            "sandbox (use click, drag or the like there)"
        )
    if kind is SandboxKind.ANDROID and action.type in ANDROID_REFUSED:
        raise FailedPrecondition(
            f"unsupported action {action.type!r} in android sandbox {record.id}: {ANDROID_REFUSED[action.type]}"
        )


def check_user_port(port: int) -> None:
    """A port a preview may name: 1024-65535 (the agent also refuses the platform's own ports)."""
    if isinstance(port, bool) or not isinstance(port, int) or not MIN_USER_PORT <= port <= MAX_PORT:
        raise InvalidArgument(f"port must be a user port, {MIN_USER_PORT}-{MAX_PORT} (got {port!r})")


async def _exec(agent: AgentClient, request: Exec) -> ExecResult:
    return await agent.exec(
        request.cmd,
        timeout=request.timeout,
        cwd=request.cwd,
        env=request.env,
        session=request.session,
        keep_background=request.keep_background,
    )
