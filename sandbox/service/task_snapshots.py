"""Task snapshots: a task's post-setup state kept as the snapshot ``task-<digest[:16]>`` for the next reset to it,
taken once however many resets to the task begin together, and removed when nobody uses it.

The first reset rule. Resets to a task that has no snapshot yet (on one replica or several sharing the store) each
try to take the task's *snapshot lock*, ``task-snapshot:<tenant>/<name>``: a leased lock in the store, held by one
of them at a time across replicas and renewed while its reset runs the setup. The one that gets it looks again for
the snapshot (one taken under a lock released a moment ago is swapped in instead), runs the setup, checks that the
lock is still its own and that still no snapshot exists, snapshots, and releases the lock. The others run the whole
setup themselves and snapshot nothing: they do not wait for the holder, whose snapshot is usable only after its
setup, its commit and a start from the new image, later than their own setup is done. A lock left by a crashed
replica lapses after ``SNAPSHOT_LOCK_TTL_S``; until then resets to the task set up as the others do.

Last use and collection. A reset that swaps a task snapshot in marks it used (``last_used_at``, compare-and-set)
before it reads the snapshot's image. The leader's reconciliation removes the task snapshots unused for
``tasks.task_snapshot_ttl_s``, and the least recently used beyond ``tasks.max_task_snapshots``: the record first, by
delete-if-version on the version it read (a reset that marked it used meanwhile wins), then its warm instances, then
its image (the engine keeps an image a container still runs; a later reconciliation takes it). Never one a sandbox's
spec names (its plain reset and its recovery start from it), nor one used or taken in the last ``IN_USE_S``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time

from sandbox.backends.base import Backend
from sandbox.errors import SandboxError
from sandbox.models import SandboxState
from sandbox.observability.metrics import Metrics
from sandbox.service.core import Records, _ids
from sandbox.service.instances import Instances
from sandbox.service.pools import Pools
from sandbox.service.records import SANDBOXES, SNAPSHOTS, SandboxRecord, SnapshotRecord, pool_key, snapshot_key
from sandbox.service.snapshots import Snapshots
from sandbox.service.task_config import TaskSettings
from sandbox.store import Store

SNAPSHOT_LOCK_TTL_S = 30.0
"""The lease of a lock to take a task's snapshot; renewed every third of it while its reset sets the task up."""
TOUCH_EVERY_S = 60.0
"""A reset marks the snapshot it swaps in used when its last use is older than this (not every reset writes)."""
IN_USE_S = 600.0
"""A task snapshot used or taken more recently than this is never removed: a reset that found it has swapped it in
by then (its sandbox's record names it from then on). Well above ``TOUCH_EVERY_S``."""


def snapshot_lock(tenant: str, name: str) -> str:
    return f"task-snapshot:{snapshot_key(tenant, name)}"


class SnapshotLock:
    """The right to take one task's snapshot: a leased lock in the store, renewed in the background until released."""

    def __init__(self, store: Store, lock: str, owner: str, *, ttl_s: float, logger: logging.Logger) -> None:
        self.store, self.lock, self.owner, self.ttl_s = store, lock, owner, ttl_s
        self._log = logger
        self._renewer = asyncio.create_task(self._renew(), name=f"renew:{lock}")

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(self.ttl_s / 3)
            try:
                if not await self.store.try_lock(self.lock, self.owner, self.ttl_s):
                    return  # it lapsed and another reset holds it now: held() says so
            except SandboxError as e:
                self._log.warning("could not renew the lock %s: %s", self.lock, e.message)

    async def held(self) -> bool:
        """Whether the lock is still this one's (asking renews it)."""
        try:
            return await self.store.try_lock(self.lock, self.owner, self.ttl_s)
        except SandboxError:
            return False

    async def release(self) -> None:
        self._renewer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._renewer
        with contextlib.suppress(SandboxError):  # else it lapses
            await self.store.unlock(self.lock, self.owner)


class TaskSnapshots:
    def __init__(
        self,
        *,
        backend: Backend,
        store: Store,
        replica: str,
        records: Records,
        snapshots: Snapshots,
        pools: Pools,
        instances: Instances,
        settings: TaskSettings,
        metrics: Metrics,
        logger: logging.Logger,
    ) -> None:
        self.backend = backend
        self.store = store
        self.replica = replica
        self.records = records
        self.snapshots = snapshots
        self.pools = pools
        self.instances = instances
        self.settings = settings
        """``warm_per_task``, and what collection keeps (``task_snapshot_ttl_s``, ``max_task_snapshots``)."""
        self.metrics = metrics
        self._log = logger

    async def mark_used(self, tenant: str, name: str) -> bool:
        """Whether the task snapshot ``name`` exists; marked used (by compare-and-set) when it was not lately."""
        key = snapshot_key(tenant, name)
        while True:
            found = await self.store.get_versioned(SNAPSHOTS, key)
            if found is None:
                return False
            now = time.time()
            if now - SnapshotRecord.model_validate(found.doc).last_used() < TOUCH_EVERY_S:
                return True
            touched = {**found.doc, "last_used_at": now}
            if await self.store.put_if_version(SNAPSHOTS, key, touched, version=found.version, durable=False):
                return True

    async def lock(self, tenant: str, name: str, record: SandboxRecord) -> SnapshotLock | None:
        """The lock to take the task snapshot ``name``; None when another reset holds it (or none can be taken)."""
        if not self.backend.can_snapshot:
            self._log.info(
                "the %s backend cannot take snapshots: every reset to a task runs its setup",
                self.backend.name,
                extra=_ids(record),
            )
            return None
        lock, owner = snapshot_lock(tenant, name), f"{self.replica}:{secrets.token_hex(4)}"
        if await self.store.try_lock(lock, owner, SNAPSHOT_LOCK_TTL_S):
            return SnapshotLock(self.store, lock, owner, ttl_s=SNAPSHOT_LOCK_TTL_S, logger=self._log)
        self._log.info(
            "another reset is taking the snapshot %s of this task: this one runs the setup without snapshotting",
            name,
            extra=_ids(record),
        )
        return None

    async def snapshot_task(self, tenant: str, record: SandboxRecord, name: str, lock: SnapshotLock) -> bool:
        """Keep the post-setup state for the next reset to this task, under ``lock``; whether it was taken."""
        if not await lock.held():
            self._log.warning(
                "the lock to take the snapshot %s lapsed while the task was set up: not taken",
                name,
                extra=_ids(record),
            )
            return False
        if await self.store.get(SNAPSHOTS, snapshot_key(tenant, name)) is not None:
            return False  # taken under a lock that lapsed before this one was granted
        try:
            with self.metrics.operation("snapshot", kind=record.spec.kind):
                await self.snapshots.take(tenant, record, name, warm=self.settings.warm_per_task, task=True)
        except SandboxError as e:
            self._log.warning(
                "could not snapshot the state of task %s: %s (its next reset runs setup again)",
                name,
                e.message,
                extra=_ids(record),
            )
            return False
        return True

    async def collect_task_snapshots(self, *, now: float | None = None) -> list[str]:
        """Remove the task snapshots unused for ``task_snapshot_ttl_s`` and the least recently used beyond
        ``max_task_snapshots`` (see the module docstring); returns the names removed."""
        ttl, most = self.settings.task_snapshot_ttl_s, self.settings.max_task_snapshots
        if (ttl is None and most is None) or await self.records.store_was_wiped():
            return []
        now = time.time() if now is None else now
        tasks: dict[str, tuple[int, SnapshotRecord]] = {}
        for key, found in (await self.store.all_versioned(SNAPSHOTS)).items():
            snap = SnapshotRecord.model_validate(found.doc)
            if snap.task:
                tasks[key] = (found.version, snap)
        if not tasks:
            return []
        named = set()
        for doc in (await self.store.all(SANDBOXES)).values():
            sandbox = SandboxRecord.model_validate(doc)
            if sandbox.state is not SandboxState.EXPIRED and sandbox.spec.snapshot:
                named.add(sandbox.spec.snapshot)
        idle = {key: now - snap.last_used() for key, (_, snap) in tasks.items()}
        removable = [key for key in sorted(tasks, key=idle.__getitem__, reverse=True) if idle[key] >= IN_USE_S]
        removable = [key for key in removable if tasks[key][1].name not in named]
        doomed = {key: "unused" for key in removable if ttl is not None and idle[key] >= ttl}
        excess = 0 if most is None else len(tasks) - len(doomed) - most
        for key in (k for k in removable if k not in doomed):
            if excess <= 0:
                break
            doomed[key], excess = f"least recently used beyond max_task_snapshots={most}", excess - 1
        removed = []
        for key, why in doomed.items():
            version, snap = tasks[key]
            if await self.store.delete_if_version(SNAPSHOTS, key, version=version):
                removed.append(snap)
                self._log.info(
                    "removing task snapshot %s of tenant %s (%s, last used %.0f s ago)",
                    snap.name,
                    snap.tenant,
                    why,
                    idle[key],
                    extra={"tenant": snap.tenant, "snapshot": snap.name},
                )
        if removed:
            await self._retire_warm(removed)
            await self.snapshots.collect_snapshot_images(only={snap.image for snap in removed})
        return [snap.name for snap in removed]

    async def _retire_warm(self, removed: list[SnapshotRecord]) -> None:
        """Stop keeping warm instances of removed snapshots and remove those queued (a start under way for one of
        their pools removes what it made, its pool being gone)."""
        for snap in removed:
            spec = snap.warm_spec()
            if spec is None:
                continue
            key = pool_key(spec, snap.image)
            self.pools.remove(key)
            while (instance := await self.store.pop(key)) is not None:
                try:
                    await self.instances.retire(instance)
                except SandboxError as e:
                    self._log.warning("could not remove warm instance %s: %s", instance, e.message)
