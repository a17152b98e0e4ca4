"""Who leads the background work: an elector, pluggable. The store's lock (Redis or the embedded store) by default,
on every backend; the Kubernetes backend offers a ``coordination.k8s.io`` Lease instead
(``KubernetesBackend.leader_elector``: sandbox/backends/kubernetes/lease.py), whose updates carry a resourceVersion,
so a stale leader's renewal fails rather than overwriting the new leader's (fencing the store's lock lacks)."""

from __future__ import annotations

from typing import Any, Protocol

from sandbox.service.records import LEADER_LOCK
from sandbox.store import Store


class Elector(Protocol):
    async def acquire(self) -> bool:
        """Take the leadership, or keep it; whether this replica leads now."""

    async def release(self) -> None:
        """Give it up, if held (the next replica takes it without waiting for it to expire)."""

    async def holder(self) -> str | None:
        """Who leads now (None: nobody)."""


class StoreElector:
    """The store's lock ``leader``, held ``ttl_s`` and renewed by every ``acquire``."""

    def __init__(self, store: Store, identity: str, ttl_s: float) -> None:
        self.store, self.identity, self.ttl_s = store, identity, ttl_s
        self._held = False

    async def acquire(self) -> bool:
        self._held = await self.store.try_lock(LEADER_LOCK, self.identity, self.ttl_s)
        return self._held

    async def release(self) -> None:
        if self._held:
            await self.store.unlock(LEADER_LOCK, self.identity)
            self._held = False

    async def holder(self) -> str | None:
        return await self.store.holder(LEADER_LOCK)


def elector_for(backend: Any, store: Store, identity: str, ttl_s: float) -> Elector:
    """The backend's own elector when it offers one (``leader_elector(identity, ttl_s)``), else the store's lock."""
    make = getattr(backend, "leader_elector", None)
    if callable(make):
        elector: Elector = make(identity, ttl_s)
        return elector
    return StoreElector(store, identity, ttl_s)
