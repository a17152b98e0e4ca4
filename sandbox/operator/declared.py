"""Declared sandboxes: a ``Sandbox`` applied with kubectl (``kubectl apply -f sandbox.yaml``) that the control plane
did not make is created through the service, as a call of its API would be: the same image checks, admission,
capacity and tenant quotas. The leader's pass (``plan``, from ``SandboxMirror.sync``) takes each such object through:

1. **taken on**: one write adds this control plane's owner labels, ``sandbox.platform.io/declared: "true"`` and the
   finalizer ``sandbox.platform.io/end-sandbox``, conditional on the object's resourceVersion (two control planes
   sharing the namespace cannot both take it: the second gets 409 and leaves it);
2. **created**: its tenant (``resources.declared_tenant``: spec.tenant, else the annotation, else
   ``default_tenant``; refused outside ``declared_tenants``) and spec (``resources.declared_spec``) go to
   ``service.create`` as that tenant (not an admin). The record is labelled with the object's name and uid, so a
   leader that failed over between the create and the status write finds it again instead of creating another.
   Phase Creating while it runs; CapacityExhausted or Unavailable: phase Pending with that reason, tried again after
   ``declared_retry_s``; any other refusal (an unknown image, a snapshot the tenant lacks, no KVM for android, a spec
   the API refuses): phase Failed with the error's name as the reason, tried again when the spec changes;
3. **kept in step**: its status is the sandbox's (as a mirror's, with ``sandboxId``) plus the condition SpecApplied:
   a sandbox cannot change in place, so a spec edited after the create is reported there (NotAppliedInPlace and the
   fields) and not applied; its pod is made the object's dependent (sandboxes.py). When the sandbox ends otherwise
   (expired, deleted through the API) the object stays, phase Ended: it is never created again (as a finished Pod);
4. **deleted** (``kubectl delete sandbox NAME``): the sandbox is deleted (a create still running is waited for),
   then the finalizer released. Only a sandbox whose record names this object's uid is deleted: a status edited by
   hand cannot point the operator at another. A record whose object is gone altogether (its finalizer removed by
   hand) is deleted on the next pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, Protocol

from sandbox.backends.base import LABEL_MANAGED_BY, LABEL_OWNER, MANAGED_BY
from sandbox.errors import CapacityExhausted, FailedPrecondition, NotFound, SandboxError, Unavailable
from sandbox.operator import resources as res
from sandbox.service import Principal
from sandbox.service.records import SANDBOXES

if TYPE_CHECKING:
    import logging
    from collections import Counter

    from sandbox.backends.kubernetes.api import KubeApi
    from sandbox.operator.informer import Informer
    from sandbox.operator.settings import OperatorSettings
    from sandbox.service import SandboxService


class Mirror(Protocol):
    """What the declared objects take from the mirror of Sandbox objects (``sandboxes.SandboxMirror``), which holds
    them: named here so that neither module imports the other."""

    service: SandboxService
    settings: OperatorSettings
    owner: str
    operator: Principal
    log: logging.Logger
    objects: Informer | None
    writes: Counter[str]

    def spawn(self, work: Awaitable[None]) -> None: ...
    def api(self) -> KubeApi: ...
    def path(self, name: str | None = None, sub: str | None = None) -> str: ...
    def note(self, obj: dict[str, Any]) -> None: ...
    async def drop_finalizer(self, name: str) -> None: ...
    def status_of(
        self, doc: dict[str, Any], obj: dict[str, Any], *, extra: tuple[dict[str, Any], ...] = ()
    ) -> dict[str, Any]: ...
    def ownership(self, doc: dict[str, Any], obj: dict[str, Any]) -> Awaitable[None] | None: ...


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("metadata") or {}


async def _all(writes: list[Awaitable[None]]) -> None:
    for write in writes:
        await write


class DeclaredSandboxes:
    def __init__(self, mirror: Mirror) -> None:
        self.mirror = mirror
        self.creating: dict[str, asyncio.Task[None]] = {}
        """Object uid -> its create, under way."""
        self.made: dict[str, str] = {}
        """Object uid -> the sandbox made for it, until the object goes (a pass may have read the records before)."""
        self._refused: dict[str, int] = {}
        """Object uid -> the generation that was refused (tried again when the spec changes)."""
        self._retry_at: dict[str, float] = {}
        self._by_uid: dict[str, dict[str, Any]] = {}
        """Object uid -> the record made for it, as the last pass read the records."""
        self._ending: set[str] = set()

    # ---------------------------------------------------------------- the pass

    def plan(self, objects: list[dict[str, Any]], docs: dict[str, dict[str, Any]]) -> list[Awaitable[None]]:
        """The writes for the declared ``objects`` (taken on, or not yet taken by any control plane) given every
        record; creates and ends are started in the background."""
        self._by_uid = {uid: doc for doc in docs.values() if (uid := res.record_object_uid(doc))}
        work: list[Awaitable[None]] = []
        for obj in objects:
            meta = _meta(obj)
            uid = str(meta.get("uid") or "")
            if not uid:
                continue
            if meta.get("deletionTimestamp"):
                if res.FINALIZER in (meta.get("finalizers") or []) and res.is_declared(obj):
                    self.end(obj)
                continue
            if not self._taken(obj):
                work.append(self._take(obj))
                continue
            write = self._reconcile(uid, obj)
            if write is not None:
                work.append(write)
        cached = self.mirror.objects.cache if self.mirror.objects is not None else {}
        alive = {str(_meta(o).get("uid") or "") for o in cached.values()}
        for uid, doc in self._by_uid.items():
            if uid not in alive and uid not in self._ending:
                self.mirror.spawn(self._end_orphan(uid, doc))
        for kept in (self.made, self._refused, self._retry_at):
            for gone in [u for u in kept if u not in alive]:
                del kept[gone]
        return work

    def _taken(self, obj: dict[str, Any]) -> bool:
        meta = _meta(obj)
        return (
            res.is_declared(obj)
            and res.owner_of(obj) == self.mirror.owner
            and res.FINALIZER in (meta.get("finalizers") or [])
        )

    async def _take(self, obj: dict[str, Any]) -> None:
        meta = _meta(obj)
        name = str(meta["name"])
        labels = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_OWNER: self.mirror.owner, res.LABEL_DECLARED: "true"}
        finalizers = [f for f in meta.get("finalizers") or [] if f != res.FINALIZER]
        patch = {"metadata": {"resourceVersion": meta.get("resourceVersion"), "labels": labels,
                              "finalizers": [*finalizers, res.FINALIZER]}}  # fmt: skip
        with contextlib.suppress(NotFound, FailedPrecondition):  # gone, or changed (another control plane took it)
            done = await self.mirror.api().merge_patch(self.mirror.path(name), patch, what=f"take on Sandbox {name}")
            self.mirror.writes["declared"] += 1
            self.mirror.note(done)
            self.mirror.log.info("Sandbox %s declared with kubectl: taken on", name)

    def _reconcile(self, uid: str, obj: dict[str, Any]) -> Awaitable[None] | None:
        doc = self._by_uid.get(uid)
        if doc is not None:
            return self._in_step(obj, doc)
        if uid in self.creating or uid in self.made:
            return None
        tenant = res.declared_tenant(obj, self.mirror.settings.default_tenant)
        made = str((obj.get("status") or {}).get("sandboxId") or "")
        if made:  # its sandbox ended (and its tombstone went): never created again
            message = (f"sandbox {made} no longer exists (deleted through the API, or expired): delete this object, "
                       "and apply it again for a new sandbox")  # fmt: skip
            return self._status(obj, res.declared_status(obj, "Ended", "Deleted", message, tenant=tenant,
                                                         sandbox_id=made))  # fmt: skip
        generation = int(_meta(obj).get("generation") or 0)
        status = obj.get("status") or {}
        if status.get("phase") == "Failed" and status.get("observedGeneration") == generation:
            return None  # refused for this spec (by this leader or an earlier one): tried again when it changes
        if self._refused.get(uid) == generation or time.monotonic() < self._retry_at.get(uid, 0.0):
            return None
        task = asyncio.ensure_future(self._create(uid, obj, tenant, generation))
        self.creating[uid] = task
        task.add_done_callback(lambda _: self.creating.pop(uid, None))
        return None

    def _in_step(self, obj: dict[str, Any], doc: dict[str, Any]) -> Awaitable[None] | None:
        tenant = res.declared_tenant(obj, self.mirror.settings.default_tenant)
        try:
            changed = res.spec_changes(obj, doc, tenant)
        except ValueError as e:
            applied = res.condition(res.SPEC_APPLIED, False, "InvalidSpec", f"the spec changed and is invalid: {e}")
        else:
            applied = res.condition(res.SPEC_APPLIED, True, "Applied", "the sandbox runs this spec")
            if changed:
                message = (f"{', '.join(changed)} changed after sandbox {doc['id']} was created; a sandbox cannot "
                           "change in place: delete this object and apply it again for a new one (its files are "
                           "lost)")  # fmt: skip
                applied = res.condition(res.SPEC_APPLIED, False, "NotAppliedInPlace", message)
        status = self.mirror.status_of(doc, obj, extra=(applied,))
        writes = [w for w in (self._status(obj, status), self.mirror.ownership(doc, obj)) if w is not None]
        return _all(writes) if writes else None

    async def _create(self, uid: str, obj: dict[str, Any], tenant: str, generation: int) -> None:
        name = str(_meta(obj)["name"])
        allowed = self.mirror.settings.declared_tenants
        try:
            if allowed is not None and tenant not in allowed:
                raise PermissionError(f"tenant {tenant!r} is not one declared Sandboxes may name: {', '.join(allowed)}")
            spec = res.declared_spec(obj)
            marked = {**spec.labels, res.RECORD_OBJECT: name, res.RECORD_OBJECT_UID: uid}
            await self._write(obj, res.declared_status(obj, "Creating", "Creating", "creating the sandbox",
                                                       tenant=tenant))  # fmt: skip
            info = await self.mirror.service.create(Principal(tenant), spec.model_copy(update={"labels": marked}))
        except (CapacityExhausted, Unavailable) as e:
            self._retry_at[uid] = time.monotonic() + self.mirror.settings.declared_retry_s
            message = f"{e.message}; tried again in {self.mirror.settings.declared_retry_s:g} s"
            await self._write(obj, res.declared_status(obj, "Pending", type(e).__name__, message, tenant=tenant))
            return
        except (SandboxError, ValueError, PermissionError) as e:
            self._refused[uid] = generation
            if isinstance(e, SandboxError):
                reason, message = type(e).__name__, e.message
            else:
                reason, message = ("TenantNotAllowed" if isinstance(e, PermissionError) else "InvalidSpec"), str(e)
            self.mirror.log.warning("Sandbox %s: no sandbox created: %s", name, message)
            await self._write(obj, res.declared_status(obj, "Failed", reason, message, tenant=tenant))
            return
        self.made[uid] = info.id  # its status follows from its record, on the next pass
        self._refused.pop(uid, None)
        self._retry_at.pop(uid, None)
        self.mirror.log.info("Sandbox %s declared with kubectl: sandbox %s created for tenant %s", name, info.id,
                             tenant, extra={"sandbox_id": info.id})  # fmt: skip

    # ---------------------------------------------------------------- ending

    def end(self, obj: dict[str, Any]) -> None:
        """The object is being deleted: end its sandbox, then release it (in the background, once)."""
        uid = str(_meta(obj).get("uid") or "")
        if uid and uid not in self._ending:
            self._ending.add(uid)
            self.mirror.spawn(self._end(uid, obj))

    async def _end(self, uid: str, obj: dict[str, Any]) -> None:
        name = str(_meta(obj)["name"])
        try:
            creating = self.creating.get(uid)
            if creating is not None:
                await asyncio.wait([creating])
            candidates = [self.made.get(uid), (self._by_uid.get(uid) or {}).get("id"),
                          (obj.get("status") or {}).get("sandboxId")]  # fmt: skip
            for sandbox_id in dict.fromkeys(str(c) for c in candidates if c):
                doc = await self.mirror.service.store.get(SANDBOXES, sandbox_id)
                if doc is not None and res.record_object_uid(doc) == uid:
                    self.mirror.log.info("Sandbox %s deleted: ending sandbox %s", name, sandbox_id,
                                         extra={"sandbox_id": sandbox_id})  # fmt: skip
                    with contextlib.suppress(NotFound):
                        await self.mirror.service.delete(self.mirror.operator, sandbox_id)
            await self.mirror.drop_finalizer(name)
            self.made.pop(uid, None)
        except SandboxError as e:
            self.mirror.log.warning("ending the sandbox of Sandbox %s failed: %s (retried on the next pass)", name,
                                    e.message)  # fmt: skip
        finally:
            self._ending.discard(uid)

    async def _end_orphan(self, uid: str, doc: dict[str, Any]) -> None:
        """A record made for an object that no longer exists at all (its finalizer was removed by hand)."""
        self._ending.add(uid)
        try:
            self.mirror.log.warning("the Sandbox object of sandbox %s is gone: ending the sandbox", doc["id"],
                                    extra={"sandbox_id": doc["id"]})  # fmt: skip
            with contextlib.suppress(NotFound):
                await self.mirror.service.delete(self.mirror.operator, str(doc["id"]))
        except SandboxError as e:
            self.mirror.log.warning("ending sandbox %s failed: %s (retried on the next pass)", doc["id"], e.message)
        finally:
            self._ending.discard(uid)

    # ---------------------------------------------------------------- writes

    def _status(self, obj: dict[str, Any], status: dict[str, Any]) -> Awaitable[None] | None:
        return self._write(obj, status) if res.merge_diff(obj.get("status"), status) else None

    async def _write(self, obj: dict[str, Any], status: dict[str, Any]) -> None:
        name = str(_meta(obj)["name"])
        current = (self.mirror.objects.cache.get(name) if self.mirror.objects is not None else None) or obj
        patch = res.merge_diff(current.get("status"), status)
        if not patch:
            return
        with contextlib.suppress(NotFound):
            done = await self.mirror.api().merge_patch(self.mirror.path(name, "status"), {"status": patch},
                                                       what=f"status of {name}")  # fmt: skip
            self.mirror.writes["status"] += 1
            self.mirror.note(done)

    async def close(self) -> None:
        await asyncio.gather(*list(self.creating.values()), return_exceptions=True)
