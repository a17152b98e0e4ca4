"""Backend instances with their bookkeeping.

Every instance is in the store before it exists on the engine, so reconciliation can tell the platform's
own containers from orphans. Its record moves STARTING -> WARM -> SERVING -> RETIRING (see
``records.InstanceState``), each move a compare-and-set: a claim from a pool and a removal by another
replica can race, but only one of them wins, so no caller is ever handed an instance being removed.
"""

from __future__ import annotations

import asyncio
import logging
import time

from sandbox.aio import settled
from sandbox.backends.base import Backend
from sandbox.capacity.admission import Admission, Grant
from sandbox.errors import SandboxError, Unavailable
from sandbox.models import SandboxSpec
from sandbox.service.records import CREATED_COUNTER, INSTANCES, InstanceRecord, InstanceState, new_instance_id
from sandbox.store import Store

CLAIM_PING_S = 2.0
"""How long a claimed warm instance's agent has to answer its ping before the instance is dropped."""
CLAIM_FRESH_S = 10.0
"""A claimed warm instance whose agent answered within this long, on a connection its process still holds open, is
handed out without a ping (``claim_warm``); the leader's pools ping their queued instances before it runs out."""


class Instances:
    def __init__(
        self, backend: Backend, store: Store, *, replica: str, logger: logging.Logger, admission: Admission
    ) -> None:
        self.backend = backend
        self.store = store
        self.replica = replica
        self._log = logger
        self.admission = admission
        """Told of every instance that starts, is claimed or goes: its ledger is what capacity counts."""
        self._retiring: set[asyncio.Task[None]] = set()

    async def read(self, instance: str) -> InstanceRecord | None:
        found = await self.store.get_versioned(INSTANCES, instance)
        if found is None:
            return None
        record = InstanceRecord.model_validate(found.doc)
        record.version = found.version
        return record

    async def all(self) -> dict[str, InstanceRecord]:
        found = {}
        for instance, versioned in (await self.store.all_versioned(INSTANCES)).items():
            record = InstanceRecord.model_validate(versioned.doc)
            record.version = versioned.version
            found[instance] = record
        return found

    async def _move(
        self,
        record: InstanceRecord,
        state: InstanceState,
        *,
        sandbox: str | None = None,
        tenant: str | None = None,
        durable: bool = True,
    ) -> bool:
        """Compare-and-set the record into ``state`` (this replica its owner); False if it changed since it was read."""
        moved = record.moved_to(state, sandbox=sandbox, owner=self.replica, tenant=tenant)
        version = await self.store.put_if_version(
            INSTANCES, record.id, moved.model_dump(mode="json"), version=record.version, durable=durable
        )
        if version is None:
            return False
        record.state, record.sandbox, record.since, record.owner = moved.state, moved.sandbox, moved.since, moved.owner
        record.tenant = moved.tenant
        record.version = version
        return True

    async def start(
        self,
        spec: SandboxSpec,
        image: str,
        *,
        pool: str | None = None,
        sandbox: str | None = None,
        tenant: str | None = None,
        grant: Grant | None = None,
    ) -> str:
        """Start an instance of ``spec`` running ``image``; returns once its agent is healthy, WARM for ``pool``
        (the caller queues it) or SERVING ``sandbox`` of ``tenant`` (whose internal network it joins). Its
        reservation enters the admission's ledger before the engine is asked, taking a unit of ``grant``."""
        instance = new_instance_id(spec.kind)
        now = time.time()
        held_by = tenant if sandbox is not None else None
        reserved = self.admission.model.reservation(spec)
        record = InstanceRecord(
            id=instance,
            pool=pool,
            sandbox=sandbox,
            created_at=now,
            since=now,
            owner=self.replica,
            tenant=held_by,
            reserved=(reserved.cpus, reserved.memory_mb, reserved.pids),
        )
        self.admission.started(instance, spec, tenant=held_by, sandbox=sandbox)
        if grant is not None:
            grant.take()
        try:
            version = await self.store.put_if_version(INSTANCES, instance, record.model_dump(mode="json"), version=0)
        except BaseException:
            self.admission.ended(instance)
            raise
        record.version = version or 0
        await self.store.incr(CREATED_COUNTER)
        try:
            await self.backend.create(instance, spec.model_copy(update={"image": image}), pool=pool, tenant=tenant)
            moved = await settled(self._move(record, InstanceState.WARM if pool else InstanceState.SERVING))
        except BaseException:
            await settled(self._discard(instance))
            raise
        if not moved:
            # Taken for an orphan while it started (a start longer than the orphan grace): it is being removed.
            raise Unavailable(f"instance {instance} was reclaimed while it started; retry")
        return instance

    async def claim_warm(self, pool: str, sandbox: str, *, tenant: str, spec: SandboxSpec) -> str | None:
        """A warm instance from ``pool`` that still answers, handed to ``sandbox`` alone.

        The pop and the move to SERVING are compare-and-sets in the store, not flushed on their own: the caller's
        next durable write (the sandbox's record) carries them to disk. A crash before it loses both (the instance
        is WARM in its queue again) or leaves the instance SERVING a sandbox that has no record, an orphan that
        reconciliation removes, as after any create cut off by a crash.

        Liveness is the instance's agent, never the engine (whose round trip, under a burst, queues behind its
        other work): an agent that answered within ``CLAIM_FRESH_S`` on a unix-socket connection that its process
        still holds open (asked of the kernel at the claim) lives, since the kernel closes the connections of a
        process that ends; any other is pinged first (one round trip through its socket). A container that died
        while queued closes its connections and fails the ping: it is removed, never handed out. Reconciliation
        forgets queued instances whose container is gone in the meantime."""
        while (instance := await self.store.pop(pool, durable=False)) is not None:
            record = await self.read(instance)
            if record is None or record.state is not InstanceState.WARM:
                continue  # being removed, or unknown to the store: never handed out
            if not await self._move(record, InstanceState.SERVING, sandbox=sandbox, tenant=tenant, durable=False):
                continue  # a removal won the race for it
            self.admission.claimed(instance, spec, tenant=tenant, sandbox=sandbox)
            agent = self.backend.agent(instance)
            if agent.answered_lately(CLAIM_FRESH_S):
                return instance
            try:
                await agent.ping(deadline=CLAIM_PING_S)
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

    async def retire(self, instance: str, *, expected: InstanceRecord | None = None) -> bool:
        """Remove an instance. With ``expected`` (a record read earlier), only if its record has not changed since:
        False, and nothing removed, if it has (a claim won)."""
        if expected is not None:
            if not await self._move(expected, InstanceState.RETIRING):
                return False
        else:
            while (record := await self.read(instance)) is not None and record.state is not InstanceState.RETIRING:
                if await self._move(record, InstanceState.RETIRING):
                    break
        self.admission.retiring(instance)
        try:
            await self.backend.destroy(instance)
        finally:
            await self._forget(instance)
        return True

    def retire_later(self, instance: str) -> None:
        """Remove an instance in the background: the caller does not wait for the engine (a create that needs its
        room waits for it: see ``Admission``)."""
        self.admission.retiring(instance)
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
        try:
            await self.store.delete(INSTANCES, instance)
        finally:
            self.admission.ended(instance)

    async def _discard(self, instance: str) -> None:
        """Remove what a failed or cancelled start left (the backend removes its own half-made instance too)."""
        try:
            await self.backend.destroy(instance)
        finally:
            await self._forget(instance)

    async def drain(self) -> None:
        """Wait for background removals (at shutdown)."""
        while self._retiring:
            await asyncio.gather(*list(self._retiring), return_exceptions=True)
