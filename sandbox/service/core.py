"""What every part of the service shares: the backend, the store, the instances and pools, and the rules
for reading and writing a sandbox's record.

Every call names the principal it acts for; a sandbox of another tenant is reported exactly like a
missing one, so its existence does not leak. Records are written by compare-and-set on the version
they were read at (``_update``): a write decided before an await can never undo one made meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

from sandbox.agent_client import AgentClient
from sandbox.backends.base import Backend
from sandbox.capacity.admission import Admission, Grant
from sandbox.capacity.ledger import Entry
from sandbox.capacity.model import CapacityModel
from sandbox.capacity.pressure import MemoryPressure
from sandbox.capacity.quotas import QuotaBook
from sandbox.capacity.settings import CapacitySettings
from sandbox.capacity.usage import Usage
from sandbox.errors import DeadlineExceeded, FailedPrecondition, InvalidArgument, NotFound, SandboxError, Unavailable
from sandbox.models import NetworkPolicy, SandboxKind, SandboxSpec, SandboxState
from sandbox.observability.metrics import Metrics, note_kind
from sandbox.service.auth import Principal
from sandbox.service.instances import Instances
from sandbox.service.output_tail import OutputTails
from sandbox.service.pools import Pools
from sandbox.service.records import (
    EPOCH,
    META,
    SANDBOXES,
    SNAPSHOTS,
    InstanceRecord,
    InstanceState,
    SandboxRecord,
    SnapshotRecord,
    pool_key,
    snapshot_key,
)
from sandbox.store import Store

LOCK_TTL_S = 300.0

P = ParamSpec("P")
T = TypeVar("T")
S = TypeVar("S", bound="ServiceCore")


Method = Callable[Concatenate[S, P], Awaitable[T]]


def timed(operation: str) -> Callable[[Method[S, P, T]], Method[S, P, T]]:
    """Time every call of the method in ``sandbox_operation_duration_seconds``; ``_find`` names the sandbox's kind."""

    def decorate(method: Method[S, P, T]) -> Method[S, P, T]:
        @functools.wraps(method)
        async def timed_call(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
            with self.metrics.operation(operation):
                return await method(self, *args, **kwargs)

        return timed_call

    return decorate


class ServiceCore:
    def __init__(
        self,
        backend: Backend,
        store: Store,
        *,
        logger: logging.Logger,
        replica: str | None = None,
        metrics: Metrics | None = None,
        capacity: CapacitySettings | None = None,
        quotas: QuotaBook | None = None,
    ) -> None:
        self.backend = backend
        self.store = store
        self.replica = replica or secrets.token_hex(4)
        """This control-plane process among the others sharing the store."""
        self._log = logger
        self.metrics = metrics or Metrics()
        settings = capacity or CapacitySettings()
        self.admission = Admission(
            CapacityModel(settings, host=None),  # the host's size is asked of the backend in start()
            quotas,
            pressure=MemoryPressure(high=settings.memory_pressure_pct, low=settings.memory_pressure_clear_pct),
            logger=logger,
            on_refusal=self.metrics.refused,
        )
        self.instances = Instances(backend, store, replica=self.replica, logger=logger, admission=self.admission)
        self.pools = Pools(self.instances, store, logger=logger)
        self._recent: dict[str, deque[dict[str, Any]]] = {}
        self._touched: dict[str, float] = {}
        self.output = OutputTails()
        """The tail of each sandbox's recent command output (the web view's terminal cards)."""
        self.events: deque[dict[str, Any]] = deque(maxlen=1000)
        self._undoing: set[asyncio.Task[None]] = set()
        """Deletions of the sandboxes of a cancelled ``create_group``, still running."""
        self.epoch: str | None = None
        """The store's epoch as this replica last saw it; see ``records.EPOCH``."""

    async def start(self) -> None:
        """Mark a new store with an epoch (a store that later lacks it has lost its data); learn the host's size
        and count what the store's instances already reserve."""
        await self.store.put_if_absent(META, EPOCH, {"id": secrets.token_hex(8), "created_at": time.time()})
        doc = await self.store.get(META, EPOCH)
        self.epoch = None if doc is None else str(doc.get("id"))
        settings = self.admission.model.settings
        if settings.enabled:
            self.admission.model.host = await self.backend.host_facts(
                memory_mb=settings.host_memory_mb, cpus=settings.host_cpus, pids=settings.host_pids
            )
        if self.admission.model.host is None:
            self.admission.pressure = None  # this process's node is not where sandboxes run (Kubernetes)
        await self.count_reservations()

    async def count_reservations(self) -> None:
        """Rebuild the admission's ledger from the store's instance records (after a restart; on a store shared by
        replicas, to take in the others' instances)."""
        since = self.admission.ledger.mark()
        records = await self.instances.all()
        self.admission.ledger.resync(
            ((instance, self._reservation_of(record)) for instance, record in records.items()), since=since
        )

    def _reservation_of(self, record: InstanceRecord) -> Entry:
        if record.reserved is not None:
            usage = Usage(*record.reserved)
        else:  # written by an older version: its kind's request, the kind read from its id (``in-<kind>-...``)
            kind = next((k for k in SandboxKind if record.id.startswith(f"in-{k.value[:4]}-")), SandboxKind.DESKTOP)
            usage = self.admission.model.reservation(SandboxSpec(kind=kind))
        warm = record.state is InstanceState.WARM or (record.sandbox is None and record.pool is not None)
        return Entry(usage, warm=warm, tenant=None if warm else record.tenant, sandbox=record.sandbox)

    async def readiness(self, *, timeout_s: float = 2.0) -> dict[str, str | None]:
        """Whether this replica can serve: the store and the backend each answer within ``timeout_s``, the engine is
        not overloaded and the host not under memory pressure (both with hysteresis: see ``EngineGate`` and
        ``MemoryPressure``). Check name -> None when it passed, else why it failed."""

        async def check(call: Awaitable[Any]) -> str | None:
            try:
                await asyncio.wait_for(call, timeout_s)
            except TimeoutError:
                return f"no answer within {timeout_s:g} s"
            except SandboxError as e:
                return e.message
            return None

        store, backend = await asyncio.gather(check(self.store.get(META, EPOCH)), check(self.backend.ping()))
        pressure = self.admission.pressure
        memory = pressure.describe() if pressure is not None and pressure.under_pressure() else None
        return {"store": store, "backend": backend, "engine": self.backend.pressure(), "memory": memory}

    # ------------------------------------------------------------------ records

    async def _read(self, sandbox_id: str) -> SandboxRecord | None:
        found = await self.store.get_versioned(SANDBOXES, sandbox_id)
        if found is None:
            return None
        record = SandboxRecord.model_validate(found.doc)
        record.version = found.version
        return record

    async def _find(self, principal: Principal, sandbox_id: str, *, allow_expired: bool = False) -> SandboxRecord:
        record = await self._read(sandbox_id) if sandbox_id else None
        if record is None:
            if await self._store_was_wiped():
                raise Unavailable(
                    "the state store lost its records (did Redis restart empty?); the control plane is adopting "
                    "the running sandboxes again from the engine: retry in a few seconds"
                )
            raise NotFound(f"no sandbox {sandbox_id!r}")
        if not principal.can_see(record.tenant):
            raise NotFound(f"no sandbox {sandbox_id!r}")
        note_kind(record.spec.kind)
        if record.state is SandboxState.EXPIRED and not allow_expired:
            raise FailedPrecondition(f"sandbox {sandbox_id} {record.error}; create a new one")
        return record

    async def _store_was_wiped(self) -> bool:
        if self.epoch is None:
            return False
        doc = await self.store.get(META, EPOCH)
        if doc is None:
            return True
        self.epoch = str(doc.get("id"))  # adopted again meanwhile: this replica catches up
        return False

    async def _insert(self, record: SandboxRecord) -> None:
        version = await self.store.put_if_version(SANDBOXES, record.id, record.model_dump(mode="json"), version=0)
        if version is None:
            raise FailedPrecondition(f"sandbox {record.id} exists already")
        record.version = version

    async def _update(
        self, sandbox_id: str, change: Callable[[SandboxRecord], bool], *, durable: bool = True
    ) -> SandboxRecord | None:
        """Apply ``change`` to the stored record and write it by compare-and-set; on a conflict, read the record
        again and apply ``change`` to that. ``change`` returns False to leave the record as it is. Returns the
        record as written, or None when nothing was (the record is gone, or ``change`` declined)."""
        while True:
            record = await self._read(sandbox_id)
            if record is None or not change(record):
                return None
            doc = record.model_dump(mode="json")
            version = await self.store.put_if_version(
                SANDBOXES, sandbox_id, doc, version=record.version, durable=durable
            )
            if version is not None:
                record.version = version
                return record

    async def _publish_claim(self, record: SandboxRecord) -> None:
        """Tell the engine side which lease holds the record's instance (best effort: only a wiped store reads it)."""
        try:
            await self.backend.set_claim(record.instance, record.claim())
        except (SandboxError, OSError) as e:
            self._log.warning("could not attach the claim of %s: %s", record.id, e, extra=_ids(record))

    # ------------------------------------------------------------------ provisioning

    async def _provision(
        self, spec: SandboxSpec, image: str, sandbox_id: str, tenant: str, *, grant: Grant | None = None
    ) -> str:
        """An instance for ``sandbox_id`` of ``tenant``: a warm one of the same spec when a pool has one, else a new
        start. Never a warm one for network ``internal``: that instance joins its tenant's network when it starts
        (``Pools.add`` keeps no such pool; a queue left by an older version is not drawn from either).

        A new start takes a unit of ``grant`` (a create's admission); without one it replaces an instance (a reset,
        a recovery), admitted here within the surge. Warm instances are evicted first when the host has no room."""
        # Whether or not this replica keeps that pool: the leader may keep it for every replica.
        instance = None
        if spec.network is not NetworkPolicy.INTERNAL:
            instance = await self.instances.claim_warm(pool_key(spec, image), sandbox_id, tenant=tenant, spec=spec)
        self.metrics.provisioned(spec.kind, warm=instance is not None)
        if instance is not None:
            if grant is not None:
                grant.take()
            return instance
        own = grant is None
        if grant is None:
            grant = await self.admission.admit_replacement(tenant, spec)
        try:
            overflow = self.admission.overflow(self.admission.model.reservation(spec))
            if overflow.memory_mb > 0 or overflow.cpus > 0 or overflow.pids > 0:
                await self.pools.evict(overflow)
            return await self.instances.start(spec, image, sandbox=sandbox_id, tenant=tenant, grant=grant)
        finally:
            if own:
                grant.close()

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

    def _forget_local(self, sandbox_id: str) -> None:
        self._recent.pop(sandbox_id, None)
        self._touched.pop(sandbox_id, None)
        self.output.forget(sandbox_id)

    def _event(self, kind: str, record: SandboxRecord, **details: Any) -> None:
        event = {"at": time.time(), "event": kind, "sandbox_id": record.id, "tenant": record.tenant, **details}
        self.events.append(event)
        self._log.warning("%s: %s", kind, details, extra={**_ids(record), "event": kind})


def _ids(record: SandboxRecord) -> dict[str, str]:
    """The ``extra`` of a log line about a sandbox: structured logs carry these as fields."""
    return {
        "sandbox_id": record.id,
        "tenant": record.tenant,
        "kind": record.spec.kind.value,
        "instance": record.instance,
    }


def ms_since(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 3)


def require_display(record: SandboxRecord) -> None:
    if not record.spec.kind.has_display:
        raise FailedPrecondition(f"sandbox {record.id} is a {record.spec.kind.value} sandbox with no display")


def require_kind(record: SandboxRecord, kind: SandboxKind, what: str) -> None:
    if record.spec.kind is not kind:
        raise FailedPrecondition(f"{what} needs a {kind.value} sandbox; {record.id} is {record.spec.kind.value}")
