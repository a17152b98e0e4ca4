"""Backend instances with their bookkeeping: every instance is in the store before it exists on the
engine, so reconciliation can tell the platform's own containers from orphans."""

from __future__ import annotations

import asyncio
import logging
import secrets
import time

from sandbox.backends.base import Backend, RuntimeState
from sandbox.errors import SandboxError
from sandbox.models import SandboxKind, SandboxSpec
from sandbox.service.records import CREATED_COUNTER, INSTANCES, InstanceRecord
from sandbox.store import Store


def new_instance_id(kind: SandboxKind) -> str:
    return f"{kind.value[:4]}-{secrets.token_hex(6)}"


class Instances:
    def __init__(self, backend: Backend, store: Store, *, logger: logging.Logger) -> None:
        self.backend = backend
        self.store = store
        self._log = logger
        self._retiring: set[asyncio.Task[None]] = set()

    async def start(self, spec: SandboxSpec, image: str, *, pool: str | None = None, sandbox: str | None = None) -> str:
        """Start an instance of ``spec`` running ``image``; returns once its agent is healthy."""
        instance = new_instance_id(spec.kind)
        record = InstanceRecord(id=instance, pool=pool, sandbox=sandbox, created_at=time.time())
        await self.store.put(INSTANCES, instance, record.model_dump(mode="json"))
        await self.store.incr(CREATED_COUNTER)
        try:
            await self.backend.create(instance, spec.model_copy(update={"image": image}))
        except BaseException:
            await asyncio.shield(self._forget(instance))
            raise
        return instance

    async def assign(self, instance: str, sandbox: str) -> None:
        record = InstanceRecord(id=instance, pool=None, sandbox=sandbox, created_at=time.time())
        await self.store.put(INSTANCES, instance, record.model_dump(mode="json"))

    async def take_warm(self, pool: str) -> str | None:
        """A warm instance from ``pool`` that still answers, handed out to this caller only."""
        while (instance := await self.store.pop(pool)) is not None:
            state = await self.backend.inspect(instance)
            if state.state is RuntimeState.RUNNING:
                try:
                    await self.backend.agent(instance).ping(deadline=2)
                    return instance
                except SandboxError as e:
                    self._log.warning(
                        "warm instance %s does not answer (%s); dropping it",
                        instance,
                        e.message,
                        extra={"instance": instance, "pool": pool},
                    )
            self.retire_later(instance)
        return None

    async def retire(self, instance: str) -> None:
        try:
            await self.backend.destroy(instance)
        finally:
            await self._forget(instance)

    def retire_later(self, instance: str) -> None:
        """Remove an instance in the background: the caller does not wait for the engine."""
        task = asyncio.create_task(self._retire_logged(instance))
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def _retire_logged(self, instance: str) -> None:
        try:
            await self.retire(instance)
        except SandboxError as e:
            self._log.warning(
                "could not remove instance %s: %s (reconciliation will retry)",
                instance,
                e.message,
                extra={"instance": instance},
            )

    async def _forget(self, instance: str) -> None:
        await self.store.delete(INSTANCES, instance)

    async def drain(self) -> None:
        """Wait for background removals (at shutdown)."""
        if self._retiring:
            await asyncio.gather(*self._retiring, return_exceptions=True)
