"""Provisioning: an instance for a sandbox (a warm one when a pool has one, else a new start, admitted), the image a
spec starts from, and what the host holds (its size, learnt at the start; the reservations of the store's
instances, counted again after a restart and on a shared store).

The admission (``sandbox.capacity``) is told of every start through ``Instances``; a create's admission is taken
by its caller (``Leases``) and handed in as a ``Grant``; a replacement (a reset, a recovery) is admitted here, within
the surge. Warm instances are evicted first when the host has no room for one that a sandbox needs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from sandbox.backends.base import Backend
from sandbox.capacity.admission import Admission, Grant
from sandbox.capacity.ledger import Entry
from sandbox.capacity.usage import Usage
from sandbox.errors import InvalidArgument, NotFound, SandboxError
from sandbox.models import SandboxKind, SandboxSpec
from sandbox.observability.metrics import Metrics
from sandbox.service.auth import Principal
from sandbox.service.instances import Instances
from sandbox.service.pools import Pools, per_tenant
from sandbox.service.records import (
    EPOCH,
    META,
    SNAPSHOTS,
    InstanceRecord,
    InstanceState,
    SnapshotRecord,
    pool_key,
    snapshot_key,
)
from sandbox.store import Store


class Provisioner:
    def __init__(
        self,
        *,
        backend: Backend,
        store: Store,
        admission: Admission,
        instances: Instances,
        pools: Pools,
        metrics: Metrics,
    ) -> None:
        self.backend = backend
        self.store = store
        self.admission = admission
        self.instances = instances
        self.pools = pools
        self.metrics = metrics

    async def learn_host(self) -> None:
        """Ask the backend how large the host is (when admission is enabled; settings may name its size)."""
        settings = self.admission.model.settings
        if settings.enabled:
            self.admission.model.host = await self.backend.host_facts(
                memory_mb=settings.host_memory_mb, cpus=settings.host_cpus, pids=settings.host_pids
            )
        if self.admission.model.host is None:
            self.admission.pressure = None  # this process's node is not where sandboxes run (Kubernetes)

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

    async def provision(
        self, spec: SandboxSpec, image: str, sandbox_id: str, tenant: str, *, grant: Grant | None = None
    ) -> str:
        """An instance for ``sandbox_id`` of ``tenant``: a warm one of the same spec when a pool has one, else a new
        start. Never a warm one for network ``internal`` or volumes: that instance joins its tenant's network and mounts
        its tenant's volumes when it starts (``pools.per_tenant``: no such pool is kept; a queue left by an older
        version is not drawn from either).

        A new start takes a unit of ``grant`` (a create's admission); without one it replaces an instance (a reset,
        a recovery), admitted here within the surge. Warm instances are evicted first when the host has no room."""
        # Whether or not this replica keeps that pool: the leader may keep it for every replica.
        instance = None
        if per_tenant(spec) is None:
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

    async def image(self, principal: Principal, spec: SandboxSpec) -> str:
        """The image ``spec`` starts from: its kind's (or its own), or that of ``principal``'s snapshot it names."""
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
