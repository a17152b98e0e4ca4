"""The control plane's background work: health probes, lease expiry, warm-pool refills and
reconciliation with the engine. Every replica runs the loop; only the one holding the leader
lock in the store acts, so two replicas never double the work (or the containers)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from pydantic import BaseModel, ConfigDict, Field

from sandbox.backends.base import BackendSandbox, RuntimeState, probe_health
from sandbox.errors import SandboxError
from sandbox.models import SandboxState
from sandbox.observability.metrics import FailureCause
from sandbox.service.records import INSTANCES, LEADER_LOCK, SANDBOXES, InstanceRecord, SandboxRecord
from sandbox.service.sandboxes import SandboxService, _reason

TOMBSTONE_S = 3600.0
"""How long an expired sandbox's record stays to tell its client why it is gone."""


class LifecycleSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    tick_s: float = Field(0.5, gt=0, description="How often the loop wakes.")
    health_interval_s: float = Field(2.0, gt=0, description="Deep health probe of every running sandbox.")
    reconcile_interval_s: float = Field(30.0, gt=0, description="Engine vs store comparison.")
    orphan_grace_s: float = Field(60.0, ge=0, description="An unknown container younger than this is left alone.")
    leader_ttl_s: float = Field(5.0, gt=0, description="Leader lease; another replica takes over after it.")
    probe_concurrency: int = Field(16, ge=1, description="Health probes at once.")


class Lifecycle:
    def __init__(self, service: SandboxService, settings: LifecycleSettings, *, logger: logging.Logger) -> None:
        self.service = service
        self.settings = settings
        self._log = logger
        self._leader = False
        self._last_health = 0.0
        self._last_reconcile = 0.0
        self._probing: set[str] = set()
        self._suspects: set[str] = set()

    @property
    def is_leader(self) -> bool:
        return self._leader

    async def run(self) -> None:
        while True:
            try:
                await self.tick()
            except SandboxError as e:
                self._log.warning("lifecycle tick failed: %s", e.message)
            except Exception:
                self._log.exception("lifecycle tick crashed")
            await asyncio.sleep(self.settings.tick_s)

    async def tick(self) -> None:
        store, now = self.service.store, time.monotonic()
        was_leader = self._leader
        self._leader = await store.try_lock(LEADER_LOCK, self.service.replica, self.settings.leader_ttl_s)
        self.service.metrics.set_leader(self._leader)
        if not self._leader:
            return
        if not was_leader:
            self._log.info(
                "replica %s leads the background work", self.service.replica, extra={"replica": self.service.replica}
            )
            self._last_health = self._last_reconcile = 0.0  # a new leader checks (and syncs snapshot pools) at once
        await self.service.pools.refill()
        await self.expire_leases()
        if now - self._last_health >= self.settings.health_interval_s:
            self._last_health = now
            await self.service.sync_snapshot_pools()
            await self.check_health()
        if now - self._last_reconcile >= self.settings.reconcile_interval_s:
            self._last_reconcile = now
            await self.reconcile()

    async def stop(self) -> None:
        if self._leader:
            await self.service.store.unlock(LEADER_LOCK, self.service.replica)
            self._leader = False
            self.service.metrics.set_leader(False)

    async def _records(self) -> list[SandboxRecord]:
        docs = await self.service.store.all(SANDBOXES)
        return [SandboxRecord.model_validate(doc) for doc in docs.values()]

    async def expire_leases(self) -> None:
        now = time.time()
        for record in await self._records():
            if record.state is SandboxState.EXPIRED:
                if now - record.expires_at > TOMBSTONE_S:
                    await self.service.store.delete(SANDBOXES, record.id)
                continue
            ended = record.lease_end()
            if ended is not None:
                await self.service.expire(record, ended)

    async def check_health(self) -> None:
        """Engine state of every sandbox in one listing, then deep probes of the running ones."""
        # Records first: every instance they name was started before they were saved, so the listing
        # taken after them shows it; the other way round, a sandbox created in between looks dead.
        records = await self._records()
        listing = {s.id: s for s in await self.service.backend.list_sandboxes()}
        semaphore = asyncio.Semaphore(self.settings.probe_concurrency)
        checks = []
        for record in records:
            if record.state is not SandboxState.RUNNING or record.id in self._probing:
                continue
            engine = listing.get(record.instance)
            if engine is None or engine.state is not RuntimeState.RUNNING:
                state = "gone" if engine is None else f"{engine.state.value} (exit code {engine.exit_code})"
                cause: FailureCause = "container_gone" if engine is None else "container_exited"
                checks.append(self._fail(record, f"its container is {state}", cause))
            else:
                checks.append(self._probe(record, engine, semaphore))
        await asyncio.gather(*checks)

    async def _probe(self, record: SandboxRecord, engine: BackendSandbox, semaphore: asyncio.Semaphore) -> None:
        async with semaphore:
            health = await probe_health(self.service.backend, record.instance, known=engine)
            if not health.ok:  # the container may have died since the listing: say so if it did
                health = await probe_health(self.service.backend, record.instance)
        if not health.ok:
            await self._fail(record, _reason(health), "probe_failed")

    async def _fail(self, record: SandboxRecord, reason: str, cause: FailureCause) -> None:
        self._probing.add(record.id)
        try:
            fresh = await self.service.store.get(SANDBOXES, record.id)
            if fresh is None or SandboxRecord.model_validate(fresh).instance != record.instance:
                return  # deleted or already swapped meanwhile
            await self.service.mark_failed(record, reason, cause=cause)
        except SandboxError as e:
            self._log.warning(
                "handling the failure of %s failed: %s", record.id, e.message, extra={"sandbox_id": record.id}
            )
        finally:
            self._probing.discard(record.id)

    async def reconcile(self) -> None:
        """Remove containers nobody uses; forget instance records whose container is gone.

        An instance is used when a sandbox runs on it or it waits in a pool queue. One that is
        unused in two passes in a row (and old enough) is an orphan: a create cut off by a
        crash, a container someone else left with our labels. Two passes, because a warm
        instance is briefly in neither place while a sandbox takes it.
        """
        store, backend = self.service.store, self.service.backend
        known = {i: InstanceRecord.model_validate(d) for i, d in (await store.all(INSTANCES)).items()}
        on_engine = {s.id: s for s in await backend.list_sandboxes()}
        # Only queues of pools still kept count: a replica waiting for a deleted snapshot is unused.
        queues = {k.pool for k in known.values() if k.pool} & self.service.pools.keys()
        waiting = {item for key in queues for item in await store.items(key)}
        serving = {r.instance for r in await self._records() if r.state is not SandboxState.EXPIRED}
        now = time.time()
        unused = set()
        for instance in set(on_engine) | set(known):
            record = known.get(instance)
            born = record.created_at if record else on_engine[instance].created_at
            if instance not in serving and instance not in waiting and now - born >= self.settings.orphan_grace_s:
                unused.add(instance)
        for instance in unused & self._suspects:
            self._log.warning("removing orphan instance %s", instance, extra={"instance": instance})
            with contextlib.suppress(SandboxError):
                await self.service.instances.retire(instance)
            pool = known[instance].pool if instance in known else None
            if pool:
                await store.remove(pool, instance)
        self._suspects = unused - self._suspects
        for instance, record in known.items():  # a warm instance whose container died
            if instance not in on_engine and record.pool and instance in waiting:
                await store.remove(record.pool, instance)
        await self.service.collect_snapshot_images()
