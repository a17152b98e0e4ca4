"""Warm pools: running instances waiting for a sandbox to take them.

A pool is a FIFO queue in the store, so a warm instance is popped by exactly one caller on
any replica. Only the leader refills, and it counts what it is starting, so the pool never
holds or starts more than ``max`` at once: instances ever created stay within
``handed out + max`` — never the over-creation of a refill race.

A closed pool set starts nothing more; an instance whose start was under way when it closed is
removed, never left running with nobody to hand it to.

The leader also keeps its queued instances' liveness fresh: an instance whose agent has not answered for
``FRESHEN_AFTER_S`` is pinged in the background (a few at a time), so that a claim finds its answer fresh and hands it
out without a ping of its own (``Instances.claim_warm``); one that does not answer is removed from its queue and the
engine. Only where an open connection vouches for the agent's process (a unix socket); over TCP each claim pings.

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
from sandbox.service.instances import CLAIM_FRESH_S, CLAIM_PING_S, Instances
from sandbox.service.records import InstanceState, pool_key
from sandbox.store import Store

FRESHEN_AFTER_S = CLAIM_FRESH_S / 2
"""A queued warm instance whose agent has not answered for this long is pinged in the background."""
FRESHEN_AT_ONCE = 16
"""Background pings of queued warm instances in flight at most."""


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
        self._freshening: set[str] = set()
        """Queued instances whose agent is being pinged in the background."""
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
            queued = await self._store.items(pool.key)
            self._freshen(pool, queued)
            ready = len(queued)
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

    def _freshen(self, pool: _Pool, queued: list[str]) -> None:
        """Ping, in the background, the queued instances whose agent's answer is getting old (see above)."""
        for instance in queued:
            if len(self._freshening) >= FRESHEN_AT_ONCE:
                return
            if instance in self._freshening:
                continue
            agent = self._instances.backend.agent(instance)
            if not agent.vouches_by_connection or agent.answered_lately(FRESHEN_AFTER_S):
                continue
            self._freshening.add(instance)
            task = asyncio.create_task(self._ping_queued(pool, instance))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _ping_queued(self, pool: _Pool, instance: str) -> None:
        try:
            await self._instances.backend.agent(instance).ping(deadline=CLAIM_PING_S)
        except SandboxError as e:
            fields = {"instance": instance, "pool": pool.key}
            try:
                if await self._remove_unanswering(pool, instance):
                    self._log.warning(
                        "warm instance %s did not answer (%s); removed it", instance, e.message, extra=fields
                    )
            except SandboxError as failed:
                self._log.warning("could not remove warm instance %s: %s", instance, failed.message, extra=fields)
        finally:
            self._freshening.discard(instance)

    async def _remove_unanswering(self, pool: _Pool, instance: str) -> bool:
        """Remove a queued instance whose agent did not answer, unless a claim took it meanwhile (that claim pings
        it) or it is being removed already; whether it was removed."""
        record = await self._instances.read(instance)
        if record is None or record.state is not InstanceState.WARM:
            return False
        # Out of the queue first: once it is, no claim can pop it, and the record's compare-and-set settles a claim
        # that popped it before.
        if not await self._store.remove(pool.key, instance):
            return False
        return await self._instances.retire(instance, expected=record)

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
