"""Warm pools: running instances waiting for a sandbox to take them.

A pool is a FIFO queue in the store, so a warm instance is popped by exactly one caller on
any replica. Only the leader refills, and it counts what it is starting, so the pool never
holds or starts more than ``max`` at once: instances ever created stay within
``handed out + max`` — never the over-creation of a refill race.

A closed pool set starts nothing more; an instance whose start was under way when it closed is
removed, never left running with nobody to hand it to.

No pool is kept for a spec with network ``internal`` or with volumes: its instance joins its tenant's internal network
and mounts its tenant's volumes when it starts (``Backend.create``'s ``tenant``), and a warm one is started before any
tenant is known. ``add`` names the key such a pool would have and starts nothing for it; those specs always start a
new instance (``per_tenant``).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from sandbox.aio import settled
from sandbox.capacity.usage import Usage
from sandbox.errors import SandboxError
from sandbox.models import NetworkPolicy, SandboxSpec
from sandbox.observability.metrics import PoolStats
from sandbox.service.instances import Instances
from sandbox.service.records import pool_key
from sandbox.store import Store


def per_tenant(spec: SandboxSpec) -> str | None:
    """What an instance of ``spec`` takes from its tenant when it starts, so that no warm one can serve it; None
    when a warm one can."""
    if spec.network is NetworkPolicy.INTERNAL:
        return "network internal is per tenant"
    if spec.volumes:
        return "volumes are per tenant"
    return None


class PoolConfig(BaseModel):
    """A warm pool for one spec (kind, image, resources, screen, network, volumes, env)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    spec: SandboxSpec
    min: int = Field(2, ge=0, le=1000, description="Warm instances kept ready.")
    max: int = Field(10, ge=1, le=1000, description="Most warm plus starting instances at once.")
    max_starting: int = Field(4, ge=1, le=100, description="Most instances started at once.")


@dataclass
class _Pool:
    key: str
    spec: SandboxSpec
    image: str
    min: int
    max: int
    max_starting: int
    starting: int = 0


class Pools:
    def __init__(self, instances: Instances, store: Store, *, logger: logging.Logger) -> None:
        self._instances = instances
        self._store = store
        self._log = logger
        self._pools: dict[str, _Pool] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self._refused: set[str] = set()
        self.short: set[str] = set()
        """Pools held below their size by capacity (the warm share, or held sandboxes' room) at the last refill."""

    def add(self, spec: SandboxSpec, image: str, *, min: int, max: int, max_starting: int = 4) -> str:
        """Keep a pool (again: the sizes of a pool already kept are updated, its starts still count); its key.
        A spec with network ``internal`` or volumes gets none (see above): its key is returned, and nothing is kept."""
        key = pool_key(spec, image)
        if (why := per_tenant(spec)) is not None:
            if key not in self._refused:
                self._refused.add(key)
                self._log.warning(
                    "no warm pool for %s: %s, so its instances start for their tenant", key, why, extra={"pool": key}
                )
            return key
        pool = self._pools.get(key)
        if pool is None:
            self._pools[key] = _Pool(key, spec, image, min, max, max_starting)
        else:
            pool.min, pool.max, pool.max_starting = min, max, max_starting
        return key

    def remove(self, key: str) -> None:
        self._pools.pop(key, None)

    def remove_snapshot_pools(self, *, keep: set[str]) -> list[str]:
        """Stop keeping the pools of snapshot replicas not in ``keep``; returns their keys (their
        queued instances are the caller's to retire)."""
        keys = [key for key, pool in self._pools.items() if pool.spec.snapshot is not None and key not in keep]
        for key in keys:
            del self._pools[key]
        return keys

    def keys(self) -> set[str]:
        return set(self._pools)

    async def sizes(self) -> dict[str, int]:
        return {pool.key: pool.ready for pool in await self.stats()}

    async def stats(self) -> list[PoolStats]:
        """Each pool's bounds, its warm instances (from the store) and what this replica is starting for it."""
        return [
            PoolStats(p.key, p.spec.kind, len(await self._store.items(p.key)), p.starting, p.min)
            for p in list(self._pools.values())
        ]

    async def refill(self) -> None:
        """Start what each pool lacks, within its bounds (leader only; returns without waiting)."""
        if self._closed:
            return
        for pool in list(self._pools.values()):
            ready = len(await self._store.items(pool.key))
            wanted = min(pool.min - ready - pool.starting, pool.max - ready - pool.starting)
            wanted = min(wanted, pool.max_starting - pool.starting)
            for _ in range(max(0, wanted)):
                if not self._instances.admission.may_warm(pool.spec):
                    self.short.add(pool.key)
                    break  # the warm share is full, or held sandboxes need the room: the pool stays short
                self.short.discard(pool.key)
                pool.starting += 1
                task = asyncio.create_task(self._start_one(pool))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _start_one(self, pool: _Pool) -> None:
        try:
            instance = await self._instances.start(pool.spec, pool.image, pool=pool.key)
            await settled(self._hand_over(pool, instance))
        except SandboxError as e:
            self._log.warning("could not warm an instance for %s: %s", pool.key, e.message, extra={"pool": pool.key})
            await asyncio.sleep(1)  # do not spin on a broken image or engine
        finally:
            pool.starting -= 1

    async def _hand_over(self, pool: _Pool, instance: str) -> None:
        """Queue a started instance, or remove it if its pool was closed or removed while it started."""
        if self._closed or self._pools.get(pool.key) is not pool:
            await self._instances.retire(instance)
        else:
            await self._store.push(pool.key, instance)

    async def evict(self, need: Usage) -> int:
        """Remove queued warm instances, from the fullest pool first, until ``need`` is freed or none is left (a
        held sandbox needs the room; a pool never takes it back while it is needed). How many went."""
        admission, freed, evicted = self._instances.admission, Usage(), 0
        while not need.fits_in(freed):
            sizes = {key: len(await self._store.items(key)) for key in self._pools}
            key = max(sizes, key=lambda k: sizes[k], default=None)
            if key is None or sizes[key] == 0:
                break
            instance = await self._store.pop(key)
            if instance is None:
                continue
            entry = admission.ledger.get(instance)
            record = await self._instances.read(instance)
            if record is None or not await self._instances.retire(instance, expected=record):
                continue
            freed = freed + (entry.usage if entry is not None else Usage())
            evicted += 1
            self._log.info("evicted warm instance %s of %s to make room", instance, key, extra={"pool": key})
        return evicted

    async def close(self) -> None:
        """Start nothing more; stop the starts under way (what they made is removed). Queued warm instances stay
        in the store for the next leader."""
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
