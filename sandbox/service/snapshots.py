"""Snapshots: a sandbox's file system (and, on a desktop, its open programs) kept under a name, with warm
instances of it kept running when asked, so that a reset to it is a swap."""

from __future__ import annotations

import re
import time

from sandbox.backends.base import Backend
from sandbox.capacity.admission import Admission
from sandbox.errors import InvalidArgument, NotFound
from sandbox.models import SandboxKind, SnapshotInfo
from sandbox.models.rules import SNAPSHOT_NAME as SNAPSHOT_NAME_RULE
from sandbox.observability.metrics import Metrics
from sandbox.service.auth import Principal
from sandbox.service.autostart import capture_autostart
from sandbox.service.core import Records, timed
from sandbox.service.instances import Instances
from sandbox.service.pools import Pools
from sandbox.service.records import SNAPSHOTS, SandboxRecord, SnapshotRecord, snapshot_key
from sandbox.store import Store

SNAPSHOT_NAME = re.compile(SNAPSHOT_NAME_RULE)
MAX_WARM = 32


class Snapshots:
    def __init__(
        self,
        *,
        backend: Backend,
        store: Store,
        records: Records,
        admission: Admission,
        pools: Pools,
        instances: Instances,
        metrics: Metrics,
    ) -> None:
        self.backend = backend
        self.store = store
        self.records = records
        self.admission = admission
        self.pools = pools
        self.instances = instances
        self.metrics = metrics

    @timed("snapshot")
    async def snapshot(self, principal: Principal, sandbox_id: str, name: str, *, warm: int = 0) -> SnapshotInfo:
        """Keep the sandbox's file system, and the GUI apps it runs, under ``name``."""
        if not SNAPSHOT_NAME.match(name):
            raise InvalidArgument("snapshot name must be 1-63 of [a-z0-9_.-], starting with a letter or digit")
        if not 0 <= warm <= MAX_WARM:
            raise InvalidArgument(f"warm must be between 0 and {MAX_WARM}")
        record = await self.records.find(principal, sandbox_id)
        self.admission.check_warm_request(record.spec, warm, tenant=principal.tenant)
        await self._check_snapshot_quota(principal, name, warm)
        return (await self.take(principal.tenant, record, name, warm=warm)).info()

    async def _check_snapshot_quota(self, principal: Principal, name: str, warm: int) -> None:
        """The tenant's max_snapshots and max_warm, counting its named snapshots but the one ``name`` replaces."""
        quota = self.admission.quotas.for_tenant(principal.tenant, admin=principal.admin)
        if quota.max_snapshots is None and quota.max_warm is None:
            return
        others = [
            snap
            for key, doc in (await self.store.all(SNAPSHOTS)).items()
            if key != snapshot_key(principal.tenant, name)
            and (snap := SnapshotRecord.model_validate(doc)).tenant == principal.tenant
            and not snap.task
        ]
        tenant = repr(principal.tenant)
        if quota.max_snapshots is not None and len(others) + 1 > quota.max_snapshots:
            raise self.admission.refuse(
                principal.tenant,
                "quota",
                f"tenant {tenant} keeps {len(others)} snapshots, its quota max_snapshots is {quota.max_snapshots}: "
                "delete a snapshot first, or ask an operator to raise the quota (the tokens file)",
            )
        kept = sum(snap.warm for snap in others)
        if quota.max_warm is not None and kept + warm > quota.max_warm:
            raise self.admission.refuse(
                principal.tenant,
                "quota",
                f"tenant {tenant}'s snapshots keep {kept} warm replicas; {warm} more exceed its quota max_warm of "
                f"{quota.max_warm}: ask for at most {max(0, quota.max_warm - kept)}, or lower another snapshot's warm",
            )

    async def take(
        self, tenant: str, record: SandboxRecord, name: str, *, warm: int, task: bool = False
    ) -> SnapshotRecord:
        """Commit the instance ``record`` names as ``tenant``'s snapshot ``name``, store its record (replacing any of
        that name) and keep its warm instances; the record as stored."""
        if record.spec.kind is SandboxKind.DESKTOP:
            await capture_autostart(self.records.agent(record))
        snap = SnapshotRecord(
            name=name,
            tenant=tenant,
            kind=record.spec.kind,
            image="",
            source=record.id,
            created_at=time.time(),
            warm=warm,
            spec=record.spec,
            task=task,
        )
        # The image carries its record, so a store that loses its data can adopt the snapshot again.
        image = await self.backend.snapshot(
            record.instance, f"{tenant}.{name}", record=snap.model_dump(mode="json", exclude={"image"})
        )
        snap = snap.model_copy(update={"image": image})
        await self.store.put(SNAPSHOTS, snapshot_key(tenant, name), snap.model_dump(mode="json"))
        await self.sync_snapshot_pools()
        return snap

    async def sync_snapshot_pools(self) -> None:
        """Keep warm instances of the stored snapshots that ask for them, and of no others.

        The leader calls this on every health pass, so a snapshot taken (or deleted) through
        another replica gets (or loses) its warm instances here too.
        """
        kept = set()
        for doc in (await self.store.all(SNAPSHOTS)).values():
            snap = SnapshotRecord.model_validate(doc)
            spec = snap.warm_spec()
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
        await self.collect_snapshot_images(only={str(doc["image"])})

    async def collect_snapshot_images(self, *, only: set[str] | None = None, min_age_s: float = 0.0) -> list[str]:
        """Remove snapshot images no snapshot names and no instance runs (of ``only``, and at least ``min_age_s``
        old, when given: a snapshot taken a moment ago is committed before its record is stored); returns what
        was removed."""
        if await self.records.store_was_wiped():
            return []  # the records naming them are being adopted again
        docs = await self.store.all(SNAPSHOTS)
        named = {str(doc["image"]) for doc in docs.values()}
        return await self.backend.collect_snapshots(keep=named, only=only, min_age_s=min_age_s)
