"""The one service layer behind gRPC, REST, the CLI and the SDK.

Every call names the principal it acts for; a sandbox of another tenant is reported exactly
like a missing one, so its existence does not leak. State lives in the store, so another
replica, or this one after a restart, serves the same sandboxes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

from sandbox.agent_client import AgentClient
from sandbox.backends.base import Backend, RuntimeState, probe_health
from sandbox.errors import (
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    SandboxError,
    Unavailable,
)
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
    SnapshotInfo,
)
from sandbox.observability.metrics import FailureCause, Metrics, note_kind
from sandbox.service.auth import Principal
from sandbox.service.instances import Instances
from sandbox.service.pools import Pools
from sandbox.service.records import (
    SANDBOXES,
    SNAPSHOTS,
    LeaseEnd,
    SandboxRecord,
    SnapshotRecord,
    kind_and_state,
    pool_key,
    snapshot_key,
)
from sandbox.service.snapshots import capture_autostart
from sandbox.store import Store

RECENT_ACTIONS = 50
TOUCH_EVERY_S = 1.0
"""last_active_at is written at most this often per sandbox (it only feeds the idle timeout)."""
LOCK_TTL_S = 300.0
SNAPSHOT_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")


P = ParamSpec("P")
T = TypeVar("T")
Method = Callable[Concatenate["SandboxService", P], Awaitable[T]]


def new_sandbox_id(kind: SandboxKind) -> str:
    return f"{kind.value[:4]}-{secrets.token_hex(6)}"


def _timed(operation: str) -> Callable[[Method[P, T]], Method[P, T]]:
    """Time every call of the method in ``sandbox_operation_duration_seconds``; ``_find`` names the sandbox's kind."""

    def decorate(method: Method[P, T]) -> Method[P, T]:
        @functools.wraps(method)
        async def timed(self: SandboxService, /, *args: P.args, **kwargs: P.kwargs) -> T:
            with self.metrics.operation(operation):
                return await method(self, *args, **kwargs)

        return timed

    return decorate


class SandboxService:
    def __init__(
        self,
        backend: Backend,
        store: Store,
        *,
        logger: logging.Logger,
        replica: str | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.backend = backend
        self.store = store
        self.replica = replica or secrets.token_hex(4)
        self._log = logger
        self.metrics = metrics or Metrics()
        self.instances = Instances(backend, store, logger=logger)
        self.pools = Pools(self.instances, store, logger=logger)
        self._recent: dict[str, deque[dict[str, Any]]] = {}
        self._touched: dict[str, float] = {}
        self.events: deque[dict[str, Any]] = deque(maxlen=1000)

    # ------------------------------------------------------------------ lifecycle

    @_timed("create")
    async def create(self, principal: Principal, spec: SandboxSpec) -> SandboxInfo:
        note_kind(spec.kind)
        image = await self._image(principal, spec)
        sandbox_id = new_sandbox_id(spec.kind)
        instance = await self._provision(spec, image, sandbox_id)
        now = time.time()
        record = SandboxRecord(
            id=sandbox_id,
            tenant=principal.tenant,
            spec=spec,
            state=SandboxState.RUNNING,
            instance=instance,
            created_at=now,
            last_active_at=now,
            expires_at=now + spec.ttl_s,
        )
        await self._save(record)
        self._log.info("created sandbox %s on %s", sandbox_id, instance, extra=_ids(record))
        return record.info()

    @_timed("get")
    async def get(self, principal: Principal, sandbox_id: str) -> SandboxInfo:
        return (await self._find(principal, sandbox_id)).info()

    async def list_sandboxes(self, principal: Principal) -> list[SandboxInfo]:
        records = await self.store.all(SANDBOXES)
        found = [SandboxRecord.model_validate(doc) for doc in records.values()]
        return [r.info() for r in found if principal.can_see(r.tenant) and r.state is not SandboxState.EXPIRED]

    @_timed("delete")
    async def delete(self, principal: Principal, sandbox_id: str) -> None:
        record = await self._find(principal, sandbox_id, allow_expired=True)
        async with self._exclusive(sandbox_id):
            await self.store.delete(SANDBOXES, sandbox_id)
            self._forget_local(sandbox_id)
            if record.state is not SandboxState.EXPIRED:
                self.instances.retire_later(record.instance)
        self._log.info("deleted sandbox %s", sandbox_id, extra=_ids(record))

    @_timed("renew")
    async def renew(self, principal: Principal, sandbox_id: str, *, ttl_s: float | None = None) -> SandboxInfo:
        """Extend the lease: the sandbox now lives ``ttl_s`` (default: its spec's ttl) from now."""
        if ttl_s is not None and not 0 < ttl_s <= 7 * 24 * 3600:
            raise InvalidArgument("ttl_s must be in (0, 604800] seconds")
        async with self._exclusive(sandbox_id):
            record = await self._find(principal, sandbox_id)
            now = time.time()
            record.expires_at = now + (ttl_s or record.spec.ttl_s)
            record.last_active_at = now
            await self._save(record)
        return record.info()

    @_timed("reset")
    async def reset(self, principal: Principal, sandbox_id: str, *, snapshot: str | None = None) -> SandboxInfo:
        """Back to the sandbox's initial state (its image or snapshot, or ``snapshot``) with a fresh /workspace.

        Fast path: a warm replica of the target is swapped in and the old instance is removed in
        the background. Otherwise a new instance is started before the old one goes.
        """
        record = await self._find(principal, sandbox_id)
        spec = record.spec if snapshot is None else record.spec.model_copy(update={"snapshot": snapshot})
        image = await self._image(principal, spec)
        async with self._exclusive(sandbox_id):
            record = await self._find(principal, sandbox_id)
            instance = await self._provision(spec, image, sandbox_id)
            old, record.instance, record.spec = record.instance, instance, spec
            record.state, record.error, record.last_active_at = SandboxState.RUNNING, None, time.time()
            await self._save(record)
            self._recent.pop(sandbox_id, None)
        self.instances.retire_later(old)
        self._log.info("reset sandbox %s onto %s", sandbox_id, instance, extra=_ids(record))
        return record.info()

    async def close(self) -> None:
        """Stop serving. Sandboxes live on in the store and the engine for the next start."""
        await self.pools.drain(remove_warm=False)
        await self.instances.drain()
        await self.backend.close()

    # ------------------------------------------------------------------ snapshots

    @_timed("snapshot")
    async def snapshot(self, principal: Principal, sandbox_id: str, name: str, *, warm: int = 0) -> SnapshotInfo:
        """Keep the sandbox's file system, and the GUI apps it runs, under ``name``."""
        if not SNAPSHOT_NAME.match(name):
            raise InvalidArgument("snapshot name must be 1-63 of [a-z0-9_.-], starting with a letter or digit")
        if not 0 <= warm <= 32:
            raise InvalidArgument("warm must be between 0 and 32")
        record = await self._find(principal, sandbox_id)
        if record.spec.kind is SandboxKind.DESKTOP:
            await capture_autostart(self._agent(record))
        image = await self.backend.snapshot(record.instance, f"{principal.tenant}.{name}")
        snap = SnapshotRecord(
            name=name,
            tenant=principal.tenant,
            kind=record.spec.kind,
            image=image,
            source=sandbox_id,
            created_at=time.time(),
            warm=warm,
            spec=record.spec,
        )
        await self.store.put(SNAPSHOTS, snapshot_key(principal.tenant, name), snap.model_dump(mode="json"))
        await self.sync_snapshot_pools()
        return snap.info()

    async def sync_snapshot_pools(self) -> None:
        """Keep warm replicas of the stored snapshots that ask for them, and of no others.

        The leader calls this on every health pass, so a snapshot taken (or deleted) through
        another replica gets (or loses) its warm replicas here too.
        """
        kept = set()
        for doc in (await self.store.all(SNAPSHOTS)).values():
            snap = SnapshotRecord.model_validate(doc)
            spec = snap.replica_spec()
            if snap.warm and spec is not None:
                kept.add(self.pools.add(spec, snap.image, min=snap.warm, max=snap.warm))
        for key in self.pools.remove_snapshot_pools(keep=kept):
            while (instance := await self.store.pop(key)) is not None:
                self.instances.retire_later(instance)

    async def list_snapshots(self, principal: Principal) -> list[SnapshotInfo]:
        docs = await self.store.all(SNAPSHOTS)
        snapshots = [SnapshotRecord.model_validate(doc).info() for doc in docs.values()]
        return [s for s in snapshots if principal.can_see(s.tenant)]

    async def delete_snapshot(self, principal: Principal, name: str) -> None:
        key = snapshot_key(principal.tenant, name)
        doc = await self.store.get(SNAPSHOTS, key)
        if doc is None:
            raise NotFound(f"no snapshot {name!r}")
        await self.store.delete(SNAPSHOTS, key)
        await self.sync_snapshot_pools()
        await self.collect_snapshot_images()

    async def collect_snapshot_images(self) -> list[str]:
        """Remove snapshot images no snapshot names and no instance runs; returns what was removed."""
        docs = await self.store.all(SNAPSHOTS)
        named = {str(doc["image"]) for doc in docs.values()}
        return await self.backend.collect_snapshots(keep=named)

    async def _image(self, principal: Principal, spec: SandboxSpec) -> str:
        if spec.snapshot is None:
            return self.backend.image_for(spec)
        doc = await self.store.get(SNAPSHOTS, snapshot_key(principal.tenant, spec.snapshot))
        if doc is None:
            raise NotFound(f"no snapshot {spec.snapshot!r}")
        info = SnapshotRecord.model_validate(doc)
        if info.kind is not spec.kind:
            raise InvalidArgument(
                f"snapshot {spec.snapshot!r} is of a {info.kind.value} sandbox, not {spec.kind.value}"
            )
        return info.image

    # ------------------------------------------------------------------ acting

    @_timed("step")
    async def step(
        self, principal: Principal, sandbox_id: str, action: Action, *, screenshot: bool = False
    ) -> Observation:
        record = await self._find(principal, sandbox_id)
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
        await self._touch(record)
        self._recent.setdefault(sandbox_id, deque(maxlen=RECENT_ACTIONS)).append(
            {"at": time.time(), "action": action.model_dump(mode="json")}
        )
        return Observation(**obs, timings_ms={**timings, "total": _ms(started)})

    @_timed("observe")
    async def observe(
        self, principal: Principal, sandbox_id: str, *, format: str = "png", quality: int = 80
    ) -> Observation:
        record = await self._find(principal, sandbox_id)
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
        await self._touch(record)
        return Observation(**obs, timings_ms={"total": _ms(started)})

    @_timed("screenshot")
    async def screenshot(
        self, principal: Principal, sandbox_id: str, *, format: str = "png", quality: int = 80
    ) -> Screenshot:
        record = await self._find(principal, sandbox_id)
        self._require_display(record)
        try:
            return await self._agent(record).screenshot(format=format, quality=quality)
        except Unavailable as e:
            raise await self._dead(record, e) from e

    @_timed("exec")
    async def exec(self, principal: Principal, sandbox_id: str, request: Exec) -> ExecResult:
        record = await self._find(principal, sandbox_id)
        try:
            result = await self._exec(self._agent(record), request)
        except Unavailable as e:
            raise await self._dead(record, e) from e
        await self._touch(record)
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

    @_timed("read_file")
    async def read_file(
        self, principal: Principal, sandbox_id: str, path: str, *, offset: int = 0, length: int | None = None
    ) -> bytes:
        data: bytes = await self._call(principal, sandbox_id, "read_file", path, offset=offset, length=length)
        return data

    @_timed("write_file")
    async def write_file(
        self, principal: Principal, sandbox_id: str, path: str, data: bytes, *, mode: int = 0o644, append: bool = False
    ) -> int:
        size: int = await self._call(principal, sandbox_id, "write_file", path, data, mode=mode, append=append)
        return size

    @_timed("list_files")
    async def list_files(self, principal: Principal, sandbox_id: str, path: str) -> list[FileInfo]:
        files: list[FileInfo] = await self._call(principal, sandbox_id, "list_dir", path)
        return files

    @_timed("delete_file")
    async def delete_file(self, principal: Principal, sandbox_id: str, path: str, *, recursive: bool = False) -> None:
        await self._call(principal, sandbox_id, "delete", path, recursive=recursive)

    # ------------------------------------------------------------------ inspection

    @_timed("health")
    async def health(self, principal: Principal, sandbox_id: str) -> Health:
        record = await self._find(principal, sandbox_id)
        health = await probe_health(self.backend, record.instance)
        if not health.ok:
            await self.mark_failed(record, _reason(health), cause="probe_failed")
        return health

    @_timed("logs")
    async def logs(self, principal: Principal, sandbox_id: str, *, tail: int = 200) -> str:
        record = await self._find(principal, sandbox_id)
        return await self.backend.logs(record.instance, tail=tail)

    async def open_tunnel(
        self, principal: Principal, sandbox_id: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A byte stream to a localhost port inside the sandbox (e.g. its VNC server), through its agent."""
        result: tuple[asyncio.StreamReader, asyncio.StreamWriter] = await self._call(
            principal, sandbox_id, "open_tunnel", port
        )
        return result

    async def recent_actions(self, principal: Principal, sandbox_id: str) -> list[dict[str, Any]]:
        await self._find(principal, sandbox_id)
        return list(self._recent.get(sandbox_id, ()))

    # ------------------------------------------------------------------ failures (also used by the health monitor)

    async def mark_failed(self, record: SandboxRecord, reason: str, *, cause: FailureCause) -> None:
        """A sandbox failed: say so, and replace it when its client asked for auto_recover."""
        self.metrics.health_failure(record.spec.kind, cause)
        self._event("sandbox_failed", record, reason=reason)
        if record.spec.auto_recover:
            with contextlib.suppress(SandboxError):
                await self.recover(record.id, reason)
                return
        if record.state is SandboxState.RUNNING:
            record.state, record.error = SandboxState.UNHEALTHY, reason
            await self._save(record)

    async def recover(self, sandbox_id: str, reason: str) -> None:
        """Swap a fresh instance of the sandbox's spec (or snapshot) in for a failed one."""
        async with self._exclusive(sandbox_id):
            doc = await self.store.get(SANDBOXES, sandbox_id)
            if doc is None:
                return
            record = SandboxRecord.model_validate(doc)
            image = await self._image(Principal(record.tenant), record.spec)
            try:
                instance = await self._provision(record.spec, image, sandbox_id)
            except SandboxError as e:
                record.state, record.error = SandboxState.UNHEALTHY, f"{reason}; replacement failed: {e.message}"
                await self._save(record)
                raise
            old, record.instance = record.instance, instance
            record.state, record.error, record.replacements = SandboxState.RUNNING, None, record.replacements + 1
            await self._save(record)
        self.instances.retire_later(old)
        self.metrics.replaced(record.spec.kind)
        self._event("sandbox_replaced", record, reason=reason, old_instance=old)

    async def expire(self, record: SandboxRecord, ended: LeaseEnd) -> None:
        """End a lease: the instance goes; the record stays as a tombstone that explains why."""
        async with self._exclusive(record.id):
            record.state, record.error = SandboxState.EXPIRED, f"expired because {ended.why}"
            await self._save(record)
            self.instances.retire_later(record.instance)
        self.metrics.expired(record.spec.kind, ended.cause)
        self._event("sandbox_expired", record, reason=ended.why)

    def _event(self, kind: str, record: SandboxRecord, **details: Any) -> None:
        event = {"at": time.time(), "event": kind, "sandbox_id": record.id, "tenant": record.tenant, **details}
        self.events.append(event)
        self._log.warning("%s: %s", kind, details, extra={**_ids(record), "event": kind})

    async def refresh_metrics(self) -> None:
        """Read the fleet's gauges (sandboxes by kind and state, pool sizes) from the store, before a scrape."""
        counts: dict[tuple[SandboxKind, SandboxState], int] = {}
        for doc in (await self.store.all(SANDBOXES)).values():
            key = kind_and_state(doc)
            if key is not None:
                counts[key] = counts.get(key, 0) + 1
        self.metrics.set_fleet(counts, await self.pools.stats())

    # ------------------------------------------------------------------ helpers

    async def _provision(self, spec: SandboxSpec, image: str, sandbox_id: str) -> str:
        """An instance for ``sandbox_id``: a warm one of the same spec when a pool has one, else a new start."""
        # Whether or not this replica keeps that pool: the leader may keep it for every replica.
        instance = await self.instances.take_warm(pool_key(spec, image))
        self.metrics.provisioned(spec.kind, warm=instance is not None)
        if instance is None:
            return await self.instances.start(spec, image, sandbox=sandbox_id)
        await self.instances.assign(instance, sandbox_id)
        return instance

    async def _find(self, principal: Principal, sandbox_id: str, *, allow_expired: bool = False) -> SandboxRecord:
        doc = await self.store.get(SANDBOXES, sandbox_id) if sandbox_id else None
        if doc is None:
            raise NotFound(f"no sandbox {sandbox_id!r}")
        record = SandboxRecord.model_validate(doc)
        if not principal.can_see(record.tenant):
            raise NotFound(f"no sandbox {sandbox_id!r}")
        note_kind(record.spec.kind)
        if record.state is SandboxState.EXPIRED and not allow_expired:
            raise FailedPrecondition(f"sandbox {sandbox_id} {record.error}; create a new one")
        return record

    async def _save(self, record: SandboxRecord, *, durable: bool = True) -> None:
        await self.store.put(SANDBOXES, record.id, record.model_dump(mode="json"), durable=durable)

    async def _touch(self, record: SandboxRecord) -> None:
        now = time.time()
        if now - self._touched.get(record.id, 0.0) >= TOUCH_EVERY_S:
            self._touched[record.id] = now
            # Write onto the stored record, not the one read before the call: a reset or a
            # recovery may have swapped the instance meanwhile, and must not be undone.
            doc = await self.store.get(SANDBOXES, record.id)
            if doc is None:
                return
            fresh = SandboxRecord.model_validate(doc)
            if fresh.instance == record.instance and fresh.state is SandboxState.RUNNING:
                fresh.last_active_at = now
                await self._save(fresh, durable=False)

    def _forget_local(self, sandbox_id: str) -> None:
        self._recent.pop(sandbox_id, None)
        self._touched.pop(sandbox_id, None)

    @contextlib.asynccontextmanager
    async def _exclusive(self, sandbox_id: str, wait_s: float = 120.0) -> AsyncIterator[None]:
        """One swap of a sandbox's instance at a time, across replicas."""
        lock, owner = f"sandbox:{sandbox_id}", f"{self.replica}:{secrets.token_hex(4)}"
        give_up = time.monotonic() + wait_s
        while not await self.store.try_lock(lock, owner, LOCK_TTL_S):
            if time.monotonic() > give_up:
                raise DeadlineExceeded(f"sandbox {sandbox_id} is busy (reset or recovery in progress)")
            await asyncio.sleep(0.05)
        try:
            yield
        finally:
            await self.store.unlock(lock, owner)

    def _agent(self, record: SandboxRecord) -> AgentClient:
        if record.state is SandboxState.UNHEALTHY:
            raise FailedPrecondition(f"sandbox {record.id} is unhealthy: {record.error}")
        return self.backend.agent(record.instance)

    async def _call(self, principal: Principal, sandbox_id: str, method: str, *args: Any, **kwargs: Any) -> Any:
        record = await self._find(principal, sandbox_id)
        try:
            result = await getattr(self._agent(record), method)(*args, **kwargs)
        except Unavailable as e:
            raise await self._dead(record, e) from e
        await self._touch(record)
        return result

    async def _dead(self, record: SandboxRecord, cause: Unavailable) -> SandboxError:
        """Why a sandbox stopped answering, as the error its caller should see."""
        state = await self.backend.inspect(record.instance)
        failure: FailureCause
        if state.state is RuntimeState.RUNNING:
            health = await probe_health(self.backend, record.instance, known=state)
            if health.ok:
                return cause  # a passing fault; the sandbox itself is fine
            reason, failure = _reason(health), "probe_failed"
        elif state.state is RuntimeState.MISSING:
            reason, failure = "its container is gone", "container_gone"
        else:
            reason, failure = f"its container exited (code {state.exit_code})", "container_exited"
        await self.mark_failed(record, reason, cause=failure)
        if record.spec.auto_recover:
            return Unavailable(f"sandbox {record.id} failed ({reason}) and was replaced; retry the call")
        return FailedPrecondition(f"sandbox {record.id} is not usable: {reason}")

    def _require_display(self, record: SandboxRecord) -> None:
        if not record.spec.kind.has_display:
            raise FailedPrecondition(f"sandbox {record.id} is a {record.spec.kind.value} sandbox with no display")

    def _require_kind(self, record: SandboxRecord, kind: SandboxKind, what: str) -> None:
        if record.spec.kind is not kind:
            raise FailedPrecondition(f"{what} needs a {kind.value} sandbox; {record.id} is {record.spec.kind.value}")


def _ids(record: SandboxRecord) -> dict[str, str]:
    """The ``extra`` of a log line about a sandbox: structured logs carry these as fields."""
    return {
        "sandbox_id": record.id,
        "tenant": record.tenant,
        "kind": record.spec.kind.value,
        "instance": record.instance,
    }


def _ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 3)


def _reason(health: Health) -> str:
    return "; ".join(f"{name}: {detail}" for name, detail in health.failures.items()) or "unhealthy"
