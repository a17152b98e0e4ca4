"""Leases: create, get, list, delete, renew and reset sandboxes; the fleet's gauges."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

from sandbox.capacity.admission import Admission, Grant
from sandbox.errors import InvalidArgument, SandboxError
from sandbox.models import GROUP_MAX, MAX_LEASE_S, SandboxInfo, SandboxKind, SandboxSpec, SandboxState
from sandbox.observability.metrics import Metrics, note_kind
from sandbox.service.activity import Activity
from sandbox.service.auth import Principal
from sandbox.service.core import Records, _ids, timed
from sandbox.service.instances import Instances
from sandbox.service.pools import Pools
from sandbox.service.provisioning import Provisioner
from sandbox.service.records import SANDBOXES, EpisodeRecord, SandboxRecord, kind_and_state, new_sandbox_id
from sandbox.store import Store

EMULATOR_RESET_S = 330.0
"""An android reset in place: the agent's snapshot load and boot wait (300 s at most), and some slack."""
CLEAR_WORKSPACE = 'case "$PWD" in */workspace) find . -mindepth 1 -delete;; esac'
"""Empties the agent's working directory, which is the workspace (and nothing else, whatever happens)."""


class Leases:
    def __init__(
        self,
        *,
        store: Store,
        records: Records,
        provisioner: Provisioner,
        admission: Admission,
        instances: Instances,
        pools: Pools,
        activity: Activity,
        metrics: Metrics,
        logger: logging.Logger,
    ) -> None:
        self.store = store
        self.records = records
        self.provisioner = provisioner
        self.admission = admission
        self.instances = instances
        self.pools = pools
        self.activity = activity
        self.metrics = metrics
        self._log = logger
        self._undoing: set[asyncio.Task[None]] = set()
        """Deletions of the sandboxes of a cancelled ``create_group``, still running."""

    @timed("create")
    async def create(self, principal: Principal, spec: SandboxSpec, *, wait_s: float = 0.0) -> SandboxInfo:
        """A new sandbox, admitted first (``CapacityExhausted`` when the host or the tenant's quota cannot hold it;
        with ``wait_s``, queued that long for capacity instead)."""
        note_kind(spec.kind)
        image = await self.provisioner.image(principal, spec)
        grant = await self.admission.admit(principal.tenant, spec, admin=principal.admin, wait_s=wait_s)
        try:
            return await self._create(principal, spec, image, grant)
        finally:
            grant.close()

    async def _create(self, principal: Principal, spec: SandboxSpec, image: str, grant: Grant) -> SandboxInfo:
        sandbox_id = new_sandbox_id(spec.kind)
        instance = await self.provisioner.provision(spec, image, sandbox_id, principal.tenant, grant=grant)
        now = time.time()
        record = SandboxRecord(
            id=sandbox_id,
            tenant=principal.tenant,
            spec=spec,
            state=SandboxState.RUNNING,
            instance=instance,
            created_at=now,
            last_active_at=now,
            expires_at=now + spec.ttl_s,
        )
        try:
            await self.records.insert(record)
        except BaseException:
            self.instances.retire_later(instance)
            raise
        await self.records.publish_claim(record)
        self._log.info("created sandbox %s on %s", sandbox_id, instance, extra=_ids(record))
        return record.info()

    @timed("create_group")
    async def create_group(
        self, principal: Principal, spec: SandboxSpec, count: int, *, wait_s: float = 0.0
    ) -> list[SandboxInfo]:
        """``count`` sandboxes of one spec in one call (a rollout group), made at once: all of them, or none.
        The whole group is admitted before any starts (or refused, or queued up to ``wait_s``). When one cannot be
        made, the others are deleted and its error raised; when the call is cancelled (its client gone), the
        creates run to their end and what they made is deleted."""
        if not 1 <= count <= GROUP_MAX:
            raise InvalidArgument(f"count must be 1 to {GROUP_MAX}, not {count}")
        note_kind(spec.kind)
        image = await self.provisioner.image(principal, spec)
        grant = await self.admission.admit(principal.tenant, spec, count, admin=principal.admin, wait_s=wait_s)
        try:
            return await self._create_all(principal, spec, image, grant, count)
        finally:
            grant.close()

    async def create_each(
        self, principal: Principal, spec: SandboxSpec, count: int, *, wait_s: float = 0.0
    ) -> list[SandboxInfo | SandboxError]:
        """``count`` sandboxes of one spec, each admitted and made on its own as ``count`` calls of ``create`` would
        be (not all or none): each one's sandbox or error, in order. ``wait_s`` must be 0: one call's answer waits
        for its slowest, so a create that queues for capacity is a call of its own."""
        if not 1 <= count <= GROUP_MAX:
            raise InvalidArgument(f"count must be 1 to {GROUP_MAX}, not {count}")
        if wait_s:
            raise InvalidArgument("creates made each on its own queue for capacity one call each: wait_s must be 0")
        made = await asyncio.gather(*(self.create(principal, spec) for _ in range(count)), return_exceptions=True)
        outcomes: list[SandboxInfo | SandboxError] = []
        for outcome in made:
            if not isinstance(outcome, SandboxInfo | SandboxError):
                raise outcome  # a bug, or a cancellation: not one create's answer
            outcomes.append(outcome)
        return outcomes

    async def _create_all(
        self, principal: Principal, spec: SandboxSpec, image: str, grant: Grant, count: int
    ) -> list[SandboxInfo]:
        creates = [asyncio.ensure_future(self._timed_create(principal, spec, image, grant)) for _ in range(count)]
        try:
            await asyncio.wait(creates)  # unlike gather, a cancelled wait leaves the creates running
        except asyncio.CancelledError:
            undo = asyncio.create_task(self._delete_made(principal, creates))
            self._undoing.add(undo)
            undo.add_done_callback(self._undoing.discard)
            raise
        failed = [e for e in map(_failure, creates) if e is not None]
        if failed:
            await self._delete_made(principal, creates)
            raise failed[0]
        return [create.result() for create in creates]

    @timed("create")
    async def _timed_create(self, principal: Principal, spec: SandboxSpec, image: str, grant: Grant) -> SandboxInfo:
        return await self._create(principal, spec, image, grant)

    async def _delete_made(self, principal: Principal, creates: Sequence[asyncio.Future[SandboxInfo]]) -> None:
        await asyncio.wait(creates)
        made = [create.result() for create in creates if _failure(create) is None]
        deleted = await asyncio.gather(*(self.delete(principal, info.id) for info in made), return_exceptions=True)
        for info, outcome in zip(made, deleted, strict=True):
            if isinstance(outcome, BaseException):
                self._log.warning("deleting %s of an unfinished group failed: %s", info.id, outcome)

    async def drain(self) -> None:
        """Wait for the deletions of cancelled groups' sandboxes (at shutdown)."""
        if self._undoing:
            await asyncio.wait(self._undoing)

    @timed("get")
    async def get(self, principal: Principal, sandbox_id: str) -> SandboxInfo:
        return (await self.records.find(principal, sandbox_id)).info()

    async def list_sandboxes(self, principal: Principal) -> list[SandboxInfo]:
        records = await self.store.all(SANDBOXES)
        found = [SandboxRecord.model_validate(doc) for doc in records.values()]
        return [r.info() for r in found if principal.can_see(r.tenant) and r.state is not SandboxState.EXPIRED]

    async def refresh_metrics(self) -> None:
        """Read the fleet's gauges (sandboxes by kind and state, pool sizes) from the store, before a scrape."""
        counts: dict[tuple[SandboxKind, SandboxState], int] = {}
        for doc in (await self.store.all(SANDBOXES)).values():
            key = kind_and_state(doc)
            if key is not None:
                counts[key] = counts.get(key, 0) + 1
        self.metrics.set_fleet(counts, await self.pools.stats())
        uses, tenants = self.admission.gauges()
        self.metrics.set_capacity(uses, tenants, len(self.admission.queue))
        self.metrics.set_isolation(self.provisioner.backend.isolation())

    @timed("delete")
    async def delete(self, principal: Principal, sandbox_id: str) -> None:
        record = await self.records.find(principal, sandbox_id, allow_expired=True)
        async with self.records.exclusive(sandbox_id):
            fresh = await self.records.read(sandbox_id)
            if fresh is None:
                return
            await self.store.delete(SANDBOXES, sandbox_id)
            self.activity.forget(sandbox_id)
            if fresh.state is not SandboxState.EXPIRED:
                self.instances.retire_later(fresh.instance)
        self._log.info("deleted sandbox %s", sandbox_id, extra=_ids(record))

    @timed("renew")
    async def renew(self, principal: Principal, sandbox_id: str, *, ttl_s: float | None = None) -> SandboxInfo:
        """Extend the lease: the sandbox now lives ``ttl_s`` (default: its spec's ttl) from now."""
        if ttl_s is not None and not 0 < ttl_s <= MAX_LEASE_S:
            raise InvalidArgument(f"ttl_s must be in (0, {MAX_LEASE_S}] seconds")
        await self.records.find(principal, sandbox_id)
        now = time.time()

        def extend(record: SandboxRecord) -> bool:
            if record.state is SandboxState.EXPIRED:
                return False
            record.expires_at = now + (ttl_s or record.spec.ttl_s)
            record.last_active_at = now
            return True

        async with self.records.exclusive(sandbox_id):
            renewed = await self.records.update(sandbox_id, extend)
        if renewed is None:  # expired or deleted meanwhile: say which
            return (await self.records.find(principal, sandbox_id)).info()
        await self.records.publish_claim(renewed)
        return renewed.info()

    @timed("reset")
    async def reset(self, principal: Principal, sandbox_id: str, *, snapshot: str | None = None) -> SandboxInfo:
        """Back to the sandbox's initial state (its image or snapshot, or ``snapshot``) with a fresh /workspace.

        Fast path: a warm instance of the target is swapped in and the old instance is removed in
        the background. Otherwise a new instance is started before the old one goes.
        """
        record = await self.records.find(principal, sandbox_id)
        spec = record.spec if snapshot is None else record.spec.model_copy(update={"snapshot": snapshot})
        return (await self.reset_onto(principal, sandbox_id, spec)).info()

    async def reset_onto(
        self, principal: Principal, sandbox_id: str, spec: SandboxSpec, *, episode: EpisodeRecord | None = None
    ) -> SandboxRecord:
        """Swap in an instance of ``spec`` (which the sandbox keeps from then on), the sandbox now running
        ``episode`` (None: none); the record as written."""
        image = await self.provisioner.image(principal, spec)
        async with self.records.exclusive(sandbox_id):
            record = await self.records.find(principal, sandbox_id)
            same = spec == record.spec and spec.snapshot is None and record.state is SandboxState.RUNNING
            if spec.kind is SandboxKind.ANDROID and same:  # an unhealthy one is replaced
                in_place = await self._reset_emulator(record, episode)
                if in_place is not None:
                    return in_place
            old = record.instance
            instance = await self.provisioner.provision(spec, image, sandbox_id, record.tenant)

            def swap(fresh: SandboxRecord) -> bool:
                if fresh.instance != old or fresh.state is SandboxState.EXPIRED:
                    return False
                fresh.instance, fresh.spec, fresh.episode = instance, spec, episode
                fresh.state, fresh.error, fresh.last_active_at = SandboxState.RUNNING, None, time.time()
                return True

            updated = await self.records.update(sandbox_id, swap)
            if updated is None:
                self.instances.retire_later(instance)
                await self.records.find(principal, sandbox_id)  # says what happened meanwhile (deleted, expired)
                return record
            self.activity.forget_history(sandbox_id)
        await self.records.publish_claim(updated)
        self.instances.retire_later(old)
        self._log.info("reset sandbox %s onto %s", sandbox_id, instance, extra=_ids(updated))
        return updated

    async def _reset_emulator(self, record: SandboxRecord, episode: EpisodeRecord | None) -> SandboxRecord | None:
        """Android, same spec, running: the emulator back to its quickboot snapshot in place (the agent's ``reset``:
        seconds, where a new instance cold-boots one in minutes) and the workspace emptied; the record as written, or
        None when the agent could not (the caller then replaces the instance)."""
        agent = self.records.agent(record)
        try:
            await agent.request("android", {"op": "reset"}, deadline=EMULATOR_RESET_S)
            await agent.exec(CLEAR_WORKSPACE, timeout=60)
        except SandboxError as e:
            self._log.warning("sandbox %s: emulator reset failed (%s); replacing its instance", record.id, e)
            return None
        instance = record.instance

        def reset(fresh: SandboxRecord) -> bool:
            if fresh.instance != instance or fresh.state is not SandboxState.RUNNING:
                return False
            fresh.episode, fresh.error, fresh.last_active_at = episode, None, time.time()
            return True

        updated = await self.records.update(record.id, reset)
        if updated is None:
            return None
        self.activity.forget_history(record.id)
        await self.records.publish_claim(updated)
        self._log.info("reset sandbox %s in place (emulator snapshot)", record.id, extra=_ids(updated))
        return updated


def _failure(task: asyncio.Future[SandboxInfo]) -> BaseException | None:
    return asyncio.CancelledError() if task.cancelled() else task.exception()
