"""When a sandbox fails: say so, start it again in place or replace it, and end leases that ran out.

Every write here names the instance it is about: a failure seen on an instance that a reset or a
recovery has meanwhile swapped out, or of a sandbox deleted meanwhile, changes nothing.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any

from sandbox.backends.base import Backend, RuntimeState, probe_health
from sandbox.errors import FailedPrecondition, SandboxError, Unavailable
from sandbox.models import Health, SandboxState
from sandbox.observability.metrics import FailureCause, Metrics
from sandbox.service.auth import Principal
from sandbox.service.core import Records, _ids
from sandbox.service.instances import Instances
from sandbox.service.provisioning import Provisioner
from sandbox.service.records import LeaseEnd, SandboxRecord


def reason(health: Health) -> str:
    """A failed health report in one line, for people."""
    return "; ".join(f"{name}: {detail}" for name, detail in health.failures.items()) or "unhealthy"


class Failures:
    def __init__(
        self,
        *,
        backend: Backend,
        records: Records,
        provisioner: Provisioner,
        instances: Instances,
        metrics: Metrics,
        logger: logging.Logger,
    ) -> None:
        self.backend = backend
        self.records = records
        self.provisioner = provisioner
        self.instances = instances
        self.metrics = metrics
        self._log = logger
        self.events: deque[dict[str, Any]] = deque(maxlen=1000)
        """What happened to sandboxes lately (failed, restarted, replaced, expired), newest last."""

    async def mark_failed(self, record: SandboxRecord, why: str, *, cause: FailureCause) -> None:
        """The instance ``record`` names failed: say so, and recover it when its client asked for auto_recover.
        A failure seen on an instance that is no longer the sandbox's (a reset, a recovery, a delete or an expiry
        came first while the caller probed it) is nobody's news: no event, no metric, no change."""
        fresh = await self.records.read(record.id)
        if fresh is None or fresh.instance != record.instance or fresh.state is SandboxState.EXPIRED:
            return
        self.metrics.health_failure(record.spec.kind, cause)
        self._event("sandbox_failed", record, reason=why)
        if record.spec.auto_recover:
            try:
                await self.recover(record.id, record.instance, why)
                return
            except SandboxError as e:
                self._log.warning("recovering %s failed: %s", record.id, e.message, extra=_ids(record))
        failed = record.instance

        def unhealthy(fresh: SandboxRecord) -> bool:
            if fresh.instance != failed or fresh.state is not SandboxState.RUNNING:
                return False
            fresh.state, fresh.error = SandboxState.UNHEALTHY, why
            return True

        await self.records.update(record.id, unhealthy)

    async def recover(self, sandbox_id: str, failed: str, why: str) -> None:
        """Bring a sandbox whose instance ``failed`` back: a stopped container is started again in place, with its
        files; otherwise (or when that fails) a fresh instance of its spec or snapshot is swapped in."""
        async with self.records.exclusive(sandbox_id):
            record = await self.records.read(sandbox_id)
            if record is None or record.instance != failed or record.state is SandboxState.EXPIRED:
                return  # deleted, expired or already recovered meanwhile
            if await self._restarted_in_place(record, why):
                return
            image = await self.provisioner.image(Principal(record.tenant), record.spec)
            try:
                instance = await self.provisioner.provision(record.spec, image, sandbox_id, record.tenant)
            except SandboxError as e:
                message = f"{why}; replacement failed: {e.message}"
                await self.records.update(sandbox_id, lambda r: _set_unhealthy(r, failed, message))
                raise

            def swap(fresh: SandboxRecord) -> bool:
                if fresh.instance != failed:
                    return False
                fresh.instance, fresh.state, fresh.error = instance, SandboxState.RUNNING, None
                fresh.replacements += 1
                return True

            updated = await self.records.update(sandbox_id, swap)
        if updated is None:  # deleted while the replacement started
            self.instances.retire_later(instance)
            return
        await self.records.publish_claim(updated)
        self.instances.retire_later(failed)
        self.metrics.replaced(updated.spec.kind)
        self._event("sandbox_replaced", updated, reason=why, old_instance=failed, files_kept=False)

    async def _restarted_in_place(self, record: SandboxRecord, why: str) -> bool:
        if not self.backend.can_restart:
            return False
        engine = await self.backend.inspect(record.instance)
        # A running container whose agent or X server failed is restarted too (files kept), and so is one caught
        # while it stops; only a missing or still-starting instance goes straight to a replacement.
        if engine.state not in (RuntimeState.EXITED, RuntimeState.RUNNING):
            return False
        try:
            await self.backend.restart(record.instance)
        except SandboxError as e:
            self._log.warning("starting %s again failed: %s", record.id, e.message, extra=_ids(record))
            return False
        failed = record.instance

        def running(fresh: SandboxRecord) -> bool:
            if fresh.instance != failed:
                return False
            fresh.state, fresh.error, fresh.replacements = SandboxState.RUNNING, None, fresh.replacements + 1
            return True

        updated = await self.records.update(record.id, running)
        if updated is not None:
            self.metrics.restarted(updated.spec.kind)
            self._event("sandbox_restarted", updated, reason=why, files_kept=True)
        return True

    async def expire(self, record: SandboxRecord, ended: LeaseEnd) -> None:
        """End a lease: the instance goes; the record stays as a tombstone that explains why."""
        async with self.records.exclusive(record.id):

            def tombstone(fresh: SandboxRecord) -> bool:
                renewed = fresh.expires_at != record.expires_at
                active = ended.cause == "idle" and fresh.last_active_at != record.last_active_at
                if fresh.state is SandboxState.EXPIRED or renewed or active:
                    return False  # expired already, or renewed or used since the lease's end was judged
                fresh.state, fresh.error = SandboxState.EXPIRED, f"expired because {ended.why}"
                return True

            expired = await self.records.update(record.id, tombstone)
            if expired is None:
                return
            self.instances.retire_later(expired.instance)
        self.metrics.expired(expired.spec.kind, ended.cause)
        self._event("sandbox_expired", expired, reason=ended.why)

    async def dead(self, record: SandboxRecord, cause: Unavailable) -> SandboxError:
        """Why a sandbox stopped answering, as the error its caller should see."""
        state = await self.backend.inspect(record.instance)
        failure: FailureCause
        if state.state is RuntimeState.RUNNING:
            health = await probe_health(self.backend, record.instance, known=state)
            if health.ok:
                return cause  # a passing fault; the sandbox itself is fine
            why, failure = reason(health), "probe_failed"
        elif state.state is RuntimeState.MISSING:
            why, failure = "its container is gone", "container_gone"
        else:
            why, failure = f"its container exited (code {state.exit_code})", "container_exited"
        if state.detail and state.state is not RuntimeState.RUNNING:
            why += f": {state.detail}"  # the engine's word: evicted, its node lost ...
        await self.mark_failed(record, why, cause=failure)
        if record.spec.auto_recover:
            return Unavailable(f"sandbox {record.id} failed ({why}) and was recovered; retry the call")
        return FailedPrecondition(f"sandbox {record.id} is not usable: {why}")

    def _event(self, kind: str, record: SandboxRecord, **details: Any) -> None:
        event = {"at": time.time(), "event": kind, "sandbox_id": record.id, "tenant": record.tenant, **details}
        self.events.append(event)
        self._log.warning("%s: %s", kind, details, extra={**_ids(record), "event": kind})


def _set_unhealthy(record: SandboxRecord, failed: str, message: str) -> bool:
    if record.instance != failed or record.state is SandboxState.EXPIRED:
        return False
    record.state, record.error = SandboxState.UNHEALTHY, message
    return True
