"""``SandboxPool`` objects are warm pools: the leader applies each to the service's pools and writes its status back.

Each pass compares the objects (as the informer last saw them) with what was applied:

- a new object, or one whose spec changed (``kubectl edit``, ``kubectl scale sandboxpool NAME --replicas=N``, which
  sets ``spec.min`` through the scale subresource): ``service.pools.add(spec, image, min, max, max_starting)``; the
  leader's refill then starts (or stops starting) instances, within ``max`` and ``maxStarting``; a pool scaled down
  has its queued warm instances beyond ``min`` removed, oldest first (a pool never shrinks by itself), so the scale
  subresource's ``status.replicas`` follows ``spec.replicas`` both ways, as ``kubectl scale`` and an HPA expect;
- an object deleted: the pool is no longer kept and its queued warm instances are removed (instances starting for it
  are removed when their start ends); a pool that server.json also configures goes back to the configured sizes;
- status: ``ready`` (warm instances queued), ``starting``, ``replicas`` (their sum, the scale subresource's
  status), ``selector`` (the label of the pods started for the pool) and the condition Ready (``pool_status``: why
  an object is not applied, e.g. an unknown snapshot, shows there), written only when it changed.

``spec.snapshot`` ("<tenant>/<name>", or "<name>" of the anonymous tenant "default") keeps replicas of that snapshot
warm: it sets the snapshot's ``warm`` count (as ``snapshot(name, warm=N)`` does; at most 32; ``max`` and
``maxStarting`` do not apply), and deleting the object sets it back to 0. Two objects of the same spec are one pool:
the last one applied sets its sizes, and the pool goes with the last of them. Objects labelled with another control
plane's owner are left alone. A pool only lives in the leader: when this replica stops leading, it stops keeping
the pools (queued warm instances stay, for the next leader, which applies the objects again).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any

from sandbox.backends.kubernetes.api import KubeApi
from sandbox.backends.kubernetes.backend import KubernetesBackend
from sandbox.errors import NotFound, SandboxError
from sandbox.models import SandboxSpec
from sandbox.operator import resources as res
from sandbox.operator.informer import Informer
from sandbox.operator.settings import OperatorSettings
from sandbox.service import SandboxService
from sandbox.service.auth import ANONYMOUS_TENANT
from sandbox.service.pools import PoolConfig
from sandbox.service.records import SNAPSHOTS, SnapshotRecord, pool_key
from sandbox.service.snapshots import MAX_WARM


@dataclass(frozen=True)
class Want:
    """What one SandboxPool object asks for."""

    key: str
    spec: SandboxSpec
    image: str
    snapshot: str | None
    """The snapshot's store key ("<tenant>/<name>") for a snapshot pool."""
    min: int
    max: int
    max_starting: int


class PoolSync:
    def __init__(
        self,
        service: SandboxService,
        backend: KubernetesBackend,
        settings: OperatorSettings,
        *,
        configured: list[PoolConfig],
        logger: logging.Logger,
    ) -> None:
        self.service = service
        self.backend = backend
        self.settings = settings
        self.namespace = backend.config.namespace
        self._configured = {pool_key(p.spec, backend.image_for(p.spec)): p for p in configured}
        self._log = logger
        self.informer: Informer | None = None
        self.applied: dict[str, Want] = {}
        """Object name -> what was applied for it."""
        self.writes: Counter[str] = Counter()
        self._refused: dict[str, tuple[str, str]] = {}
        """Object name -> (the generation refused, why)."""

    def informers(self, api: KubeApi) -> list[Informer]:
        self.informer = Informer(
            api, res.path(self.namespace, res.POOLS), what="SandboxPool objects", logger=self._log,
            watch_timeout_s=self.settings.watch_timeout_s,
        )  # fmt: skip
        return [self.informer]

    async def sync(self) -> None:
        if self.informer is None:
            return
        wanted: dict[str, Want] = {}
        for name, obj in list(self.informer.cache.items()):
            meta = obj.get("metadata") or {}
            if res.owner_of(obj) not in (None, self.backend.config.owner) or meta.get("deletionTimestamp"):
                continue
            want = await self._want(name, obj)
            if want is not None:
                wanted[name] = want
        for name in [n for n in self.applied if n not in wanted]:
            await self._release(name)
        for name, want in wanted.items():
            if self.applied.get(name) != want:
                await self._apply(name, want)
        await self._trim()
        await self._write_status()

    async def _want(self, name: str, obj: dict[str, Any]) -> Want | None:
        generation = str((obj.get("metadata") or {}).get("generation", ""))
        try:
            spec, snapshot, minimum, maximum, starting = res.pool_spec(obj)
            if snapshot is None:
                image = self.backend.image_for(spec)
                self._refused.pop(name, None)
                return Want(pool_key(spec, image), spec, image, None, minimum, maximum, starting)
            tenant, _, snap = snapshot.rpartition("/")
            key = f"{tenant or ANONYMOUS_TENANT}/{snap}"
            doc = await self.service.store.get(SNAPSHOTS, key)
            record = SnapshotRecord.model_validate(doc) if doc is not None else None
            warm = record.warm_spec() if record is not None else None
            if record is None or warm is None:
                raise ValueError(f"no snapshot {key!r} with a spec to start (take it with snapshot(name))")
        except (ValueError, TypeError, SandboxError) as e:
            why = e.message if isinstance(e, SandboxError) else str(e)
            if self._refused.get(name, ("", ""))[0] != generation:
                self._log.warning("SandboxPool %s is not applied: %s", name, why, extra={"pool": name})
            self._refused[name] = (generation, why)
            return None
        self._refused.pop(name, None)
        return Want(pool_key(warm, record.image), warm, record.image, key, min(minimum, MAX_WARM), maximum, starting)

    async def _apply(self, name: str, want: Want) -> None:
        before = self.applied.get(name)
        self.applied[name] = want
        if want.snapshot is not None:
            await self._set_warm(want.snapshot, want.min)
        else:
            self.service.pools.add(want.spec, want.image, min=want.min, max=want.max, max_starting=want.max_starting)
        self._log.info("SandboxPool %s applied: %s min %d max %d", name, want.key, want.min, want.max,
                       extra={"pool": want.key})  # fmt: skip
        if before is not None and before.key != want.key:
            await self._let_go(before)

    async def _release(self, name: str) -> None:
        gone = self.applied.pop(name)
        self._log.info("SandboxPool %s deleted: pool %s released", name, gone.key, extra={"pool": gone.key})
        await self._let_go(gone)

    async def _let_go(self, gone: Want) -> None:
        """No object asks for ``gone`` any more: re-apply another object of the same pool, else the configured sizes,
        else stop keeping the pool and remove its queued instances."""
        others = [(n, w) for n, w in self.applied.items() if w.key == gone.key]
        if others:
            await self._apply(*others[-1])
            return
        if gone.snapshot is not None:
            await self._set_warm(gone.snapshot, 0)
            return
        configured = self._configured.get(gone.key)
        if configured is not None:
            self.service.pools.add(gone.spec, gone.image, min=configured.min, max=configured.max,
                                   max_starting=configured.max_starting)  # fmt: skip
            return
        self.service.pools.remove(gone.key)
        while (instance := await self.service.store.pop(gone.key)) is not None:
            self.service.instances.retire_later(instance)

    async def _trim(self) -> None:
        """Remove the queued warm instances beyond ``min`` of the pools the objects keep (scaled down)."""
        keys = {w.key for w in self.applied.values() if w.snapshot is None}
        for pool in await self.service.pools.stats():
            if pool.key not in keys or pool.ready <= pool.min:
                continue
            for _ in range(pool.ready - pool.min):
                instance = await self.service.store.pop(pool.key)
                if instance is None:
                    break
                self.service.instances.retire_later(instance)
                self.writes["trimmed"] += 1
            self._log.info("SandboxPool of %s scaled down to %d: removed %d warm instances", pool.key, pool.min,
                           pool.ready - pool.min, extra={"pool": pool.key})  # fmt: skip

    async def _set_warm(self, key: str, warm: int) -> None:
        doc = await self.service.store.get(SNAPSHOTS, key)
        if doc is not None and doc.get("warm") != warm:
            await self.service.store.put(SNAPSHOTS, key, {**doc, "warm": warm})
        await self.service.sync_snapshot_pools()

    async def _write_status(self) -> None:
        assert self.informer is not None
        stats = {s.key: s for s in await self.service.pools.stats()}
        for name, obj in list(self.informer.cache.items()):
            if res.owner_of(obj) not in (None, self.backend.config.owner):
                continue
            want = self.applied.get(name)
            found = stats.get(want.key) if want is not None else None
            ready, starting = (found.ready, found.starting) if found is not None else (0, 0)
            generation = (obj.get("metadata") or {}).get("generation")
            status = res.pool_status(
                ready, starting, want.key if want else None, generation=generation,
                minimum=want.min if want else 0, why=self._refused.get(name, ("", ""))[1],
                short=want is not None and want.key in self.service.pools.short, previous=obj.get("status"),
            )  # fmt: skip
            patch = res.merge_diff(obj.get("status"), status)
            if not patch:
                continue
            path = res.path(self.namespace, res.POOLS, name, "status")
            try:
                done = await self.informer.api.merge_patch(
                    path, {"status": patch}, what=f"status of SandboxPool {name}"
                )
            except NotFound:
                continue
            self.writes["status"] += 1
            self.informer.note(done)

    async def stop(self) -> None:
        """This replica no longer leads: stop keeping the pools the objects asked for (queued instances stay)."""
        for want in {w.key: w for w in self.applied.values()}.values():
            configured = self._configured.get(want.key)
            if configured is not None:
                self.service.pools.add(want.spec, want.image, min=configured.min, max=configured.max,
                                       max_starting=configured.max_starting)  # fmt: skip
            elif want.snapshot is None:
                self.service.pools.remove(want.key)
        self.applied.clear()
        await asyncio.sleep(0)
