"""``Sandbox`` objects mirror the fleet: one per sandbox record, kept in step by the leader; kubectl delete ends one.

Each pass (``sync``, every ``interval_s``) reads the records from the store and compares each with its object as the
informer last saw it (or as our own last write left it): only what differs is written, a merge patch of the spec or
labels, a merge patch of the status through the status subresource. A fleet that does not change costs no write,
whatever its size; a sandbox whose pod moves, fails or is replaced costs one status write. A record without an
object gets one (POST, then its status); an object of ours without a record is removed.

**Ending a sandbox with kubectl.** Mirrored objects carry the finalizer ``sandbox.platform.io/end-sandbox``, so
``kubectl delete sandbox NAME`` leaves the object Terminating; the leader sees that, deletes the sandbox (as an admin:
its pod goes, its record goes) and then removes the finalizer, and the object is gone. Why a finalizer rather than
reacting to the DELETED event alone: a delete made while no replica leads (a fail-over, the control plane down) is
not lost (the object waits, Terminating, for the next leader), where without it the next leader would find a record
with no object and mirror it again, and the sandbox would live on; and ``kubectl delete`` returns once the sandbox
has really ended. A DELETED event of one of our objects whose record still exists (someone removed the finalizer by
hand) ends the sandbox too. If the control plane is uninstalled while objects remain, they stay Terminating until
their finalizer is removed by hand (``kubectl patch sandbox NAME --type=merge -p '{"metadata":{"finalizers":null}}'``).

**Objects made by hand** (``kubectl apply`` of a Sandbox; no ``sandbox.owner`` label) are declared sandboxes:
declared.py creates one for each, through the service (``operator.declared``; when off, such an object is left alone
but for its status, ``resources.IGNORED``). Their records are not mirrored: the declared object is their object. An
object named like an existing sandbox is taken over as its mirror. Objects labelled with another control plane's
owner are never touched.

**Pods belong to their Sandbox.** Once a sandbox's object and pod are both seen, the pod gets an ownerReference to
the object (``controller: true``, ``blockOwnerDeletion: true``) and ``safe-to-evict: "false"`` for the cluster
autoscaler, in one patch (``manifests.controlled_by``); a pod that replaces it (reset, recovery) gets it on the next
pass. So ``kubectl get pod -o yaml`` names its Sandbox, and the cluster's garbage collector removes a pod whose
object was removed without the operator (a finalizer released by hand, an uninstall).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Awaitable
from typing import Any

from sandbox.backends.base import LABEL_INSTANCE
from sandbox.backends.kubernetes.api import KubeApi, core_path
from sandbox.backends.kubernetes.backend import KubernetesBackend
from sandbox.backends.kubernetes.manifests import controlled_by, kind_image, owner_selector
from sandbox.errors import FailedPrecondition, NotFound, SandboxError
from sandbox.operator import resources as res
from sandbox.operator.declared import DeclaredSandboxes
from sandbox.operator.informer import Informer
from sandbox.operator.settings import OperatorSettings
from sandbox.service import Principal, SandboxService
from sandbox.service.adoption import epoch_changed
from sandbox.service.records import SANDBOXES

OPERATOR = Principal("kubectl", admin=True)


"""Who ends a sandbox whose Sandbox object was deleted: an admin (the RBAC on the object is the check)."""


def _version(obj: dict[str, Any] | None) -> str:
    return str(((obj or {}).get("metadata") or {}).get("resourceVersion") or "")


class SandboxMirror:
    def __init__(
        self, service: SandboxService, backend: KubernetesBackend, settings: OperatorSettings, *, logger: logging.Logger
    ) -> None:
        self.service = service
        self.backend = backend
        self.settings = settings
        self.namespace = backend.config.namespace
        self.owner = backend.config.owner
        self.operator = OPERATOR
        self.log = logger
        self.objects: Informer | None = None
        self.pods: Informer | None = None
        self.pod_of: dict[str, dict[str, Any]] = {}
        """Instance id -> its pod as last seen."""
        self.writes: Counter[str] = Counter()
        """Writes made, by kind (create, spec, status, ignored, finalizer, delete, owner: a pod's ownerReference,
        declared: a declared object taken on): the tests and the bench read it."""
        self._records: set[str] = set()
        self._in_step: dict[str, tuple[int, str, str]] = {}
        """Sandbox id -> (record version, pod version, object version) when its object was last found in step."""
        self._ending: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.declared = DeclaredSandboxes(self)

    # ---------------------------------------------------------------- informers

    def informers(self, api: KubeApi) -> list[Informer]:
        """New informers (and caches): a replica that leads again starts from fresh listings."""
        self.pod_of, self._in_step = {}, {}
        timeout = self.settings.watch_timeout_s
        self.objects = Informer(
            api, res.path(self.namespace, res.SANDBOXES), what="Sandbox objects", logger=self.log,
            on_change=self._on_object, watch_timeout_s=timeout,
        )  # fmt: skip
        self.pods = Informer(
            api, core_path(self.namespace, "pods"), what="sandbox pods", logger=self.log,
            selector=owner_selector(self.backend.config), on_change=self._on_pod, watch_timeout_s=timeout,
        )  # fmt: skip
        return [self.objects, self.pods]

    def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        instance = ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_INSTANCE)
        if not instance:
            return
        if kind == "DELETED":
            self.pod_of.pop(instance, None)
        else:
            self.pod_of[instance] = pod

    def _on_object(self, kind: str, obj: dict[str, Any]) -> None:
        """A Sandbox of ours being deleted (or gone) while its sandbox exists: end the sandbox."""
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or "")
        if res.owner_of(obj) != self.owner or name in self._ending:
            return
        held = kind != "DELETED" and meta.get("deletionTimestamp") and res.FINALIZER in (meta.get("finalizers") or [])
        if res.is_declared(obj):
            if held:
                self.declared.end(obj)  # a declared object gone without it is found by the pass (its record's uid)
        elif kind == "DELETED" and name in self._records:
            self.spawn(self._end(name, finalizer=False))
        elif held:
            self.spawn(self._end(name, finalizer=True))

    def spawn(self, work: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _end(self, name: str, *, finalizer: bool) -> None:
        self._ending.add(name)
        try:
            if await self.service.store.get(SANDBOXES, name) is not None:
                self.log.warning("Sandbox %s was deleted through the API server: ending the sandbox", name,
                                  extra={"sandbox_id": name})  # fmt: skip
                with contextlib.suppress(NotFound):
                    await self.service.delete(OPERATOR, name)
            self._records.discard(name)
            if finalizer:
                await self.drop_finalizer(name)
        except SandboxError as e:
            self.log.warning("ending sandbox %s for its deleted object failed: %s (retried on the next pass)",
                              name, e.message, extra={"sandbox_id": name})  # fmt: skip
        finally:
            self._ending.discard(name)

    async def drop_finalizer(self, name: str) -> None:
        assert self.objects is not None
        obj = self.objects.cache.get(name) or {}
        left = [f for f in (obj.get("metadata") or {}).get("finalizers") or [] if f != res.FINALIZER]
        patch = {"metadata": {"finalizers": left or None}}
        with contextlib.suppress(NotFound):
            done = await self.api().merge_patch(self.path(name), patch, what=f"release Sandbox {name}")
            self.writes["finalizer"] += 1
            gone = (done.get("metadata") or {}).get("deletionTimestamp") and not left
            self.objects.forget(name) if gone else self.objects.note(done)

    # ---------------------------------------------------------------- the pass

    async def sync(self) -> None:
        """One comparison of every record with its object; writes what differs."""
        if self.objects is None or await epoch_changed(self.service):
            return  # records are being adopted again: judge them once they are back
        versioned = await self.service.store.all_versioned(SANDBOXES)
        docs = {key: found.doc for key, found in versioned.items()}
        self._records = set(docs)
        self._in_step = {k: v for k, v in self._in_step.items() if k in docs}
        objects = self.objects.cache
        work: list[Awaitable[None]] = []
        for sandbox_id, doc in docs.items():
            obj = objects.get(sandbox_id)
            if sandbox_id in self._ending or res.record_object_uid(doc) is not None:
                continue  # a declared object's sandbox: that object is its object (declared.py)
            mark = (versioned[sandbox_id].version, _version(self.pod_of.get(str(doc["instance"]))), _version(obj))
            if obj is not None and self._in_step.get(sandbox_id) == mark:
                continue  # nothing it depends on changed since it was found in step
            if obj is None:
                work.append(self._create(doc))
                continue
            owner, meta = res.owner_of(obj), obj.get("metadata") or {}
            if owner not in (None, self.owner) or res.is_declared(obj):
                continue  # another control plane's, or a declared object that happens to bear a sandbox id
            if meta.get("deletionTimestamp"):
                if res.FINALIZER in (meta.get("finalizers") or []):
                    self._on_object("MODIFIED", obj)  # retried: an end that failed last time
                continue
            write = self._update(doc, obj)
            if write is None:
                self._in_step[sandbox_id] = mark
            else:
                work.append(write)
        declared: list[dict[str, Any]] = []
        for name, obj in list(objects.items()):
            if name in self._ending or (name in docs and not res.is_declared(obj)):
                continue
            owner = res.owner_of(obj)
            if owner == self.owner and not res.is_declared(obj):
                work.append(self._remove(name, obj))
            elif owner is None and not self.settings.declared and not res.is_declared(obj):
                if (obj.get("status") or {}).get("message") != res.IGNORED:
                    work.append(self._ignore(name))
            elif owner in (None, self.owner):
                declared.append(obj)
        work += self.declared.plan(declared, docs)
        await self._run(work)

    async def _run(self, work: list[Awaitable[None]]) -> None:
        gate = asyncio.Semaphore(self.settings.write_concurrency)

        async def one(write: Awaitable[None]) -> None:
            async with gate:
                try:
                    await write
                except SandboxError as e:
                    self.log.warning("mirroring into Sandbox objects: %s", e.message)

        await asyncio.gather(*(one(w) for w in work))

    def _image(self, doc: dict[str, Any]) -> str:
        return str(doc["spec"].get("image") or kind_image(self.backend.config, str(doc["spec"]["kind"])))

    def status_of(
        self, doc: dict[str, Any], obj: dict[str, Any], *, extra: tuple[dict[str, Any], ...] = ()
    ) -> dict[str, Any]:
        """The status ``obj`` should have for the sandbox ``doc`` (its conditions' transition times kept)."""
        instance = str(doc["instance"])
        pod_name = self.backend.pod_name(instance)
        generation = (obj.get("metadata") or {}).get("generation")
        return res.sandbox_status(doc, pod_name, self.pod_of.get(instance), generation=generation,
                                  previous=obj.get("status"), extra=extra)  # fmt: skip

    def ownership(self, doc: dict[str, Any], obj: dict[str, Any]) -> Awaitable[None] | None:
        """The write making the sandbox's pod a dependent of ``obj``; None when it is one (or not seen)."""
        meta = obj.get("metadata") or {}
        pod = self.pod_of.get(str(doc["instance"]))
        if pod is None or not meta.get("uid") or doc["state"] in ("expired", "deleted"):
            return None
        owner = {"apiVersion": res.API_VERSION, "kind": "Sandbox", "name": meta["name"], "uid": meta["uid"]}
        patch = controlled_by(pod, owner)
        return None if patch is None else self._own(str(doc["instance"]), pod, patch)

    async def _own(self, instance: str, pod: dict[str, Any], patch: dict[str, Any]) -> None:
        name = str(pod["metadata"]["name"])
        with contextlib.suppress(NotFound):  # gone meanwhile (reset, recovery): its successor is owned next
            done = await self.api().merge_patch(core_path(self.namespace, "pods") + f"/{name}", patch,
                                                what=f"make pod {name} its Sandbox's dependent")  # fmt: skip
            self.writes["owner"] += 1
            if self.pod_of.get(instance) is pod:
                self.pod_of[instance] = done

    async def _create(self, doc: dict[str, Any]) -> None:
        assert self.objects is not None
        body = res.sandbox_object(self.namespace, doc, self.owner, self._image(doc))
        try:
            made = await self.api().create(self.path(), body, what=f"create Sandbox {doc['id']}")
        except FailedPrecondition:
            return  # made meanwhile (the watch had not told yet): compared on the next pass
        self.writes["create"] += 1
        self.objects.note(made)
        await self._write(doc, made, {})

    def _update(self, doc: dict[str, Any], obj: dict[str, Any]) -> Awaitable[None] | None:
        """The writes that bring ``obj`` in step with ``doc``; None when it is (most of the time: no coroutine)."""
        want = res.sandbox_metadata(doc, self.owner)
        meta = obj.get("metadata") or {}
        patch: dict[str, Any] = {}
        labels = {k: v for k, v in (meta.get("labels") or {}).items() if k in want["labels"]}
        if labels != want["labels"]:
            patch["metadata"] = {"labels": res.merge_diff(labels, want["labels"])}
        if res.FINALIZER not in (meta.get("finalizers") or []):
            patch.setdefault("metadata", {})["finalizers"] = [*(meta.get("finalizers") or []), res.FINALIZER]
        spec = res.merge_diff(obj.get("spec"), res.sandbox_spec(doc, self._image(doc)))
        if spec:
            patch["spec"] = spec
        if patch or res.merge_diff(obj.get("status"), self.status_of(doc, obj)):
            return self._write(doc, obj, patch)
        return self.ownership(doc, obj)

    async def _write(self, doc: dict[str, Any], obj: dict[str, Any], patch: dict[str, Any]) -> None:
        assert self.objects is not None
        name, api = doc["id"], self.api()
        if patch:
            obj = await api.merge_patch(self.path(name), patch, what=f"update Sandbox {name}")
            self.writes["spec"] += 1
            self.objects.note(obj)
        status = res.merge_diff(obj.get("status"), self.status_of(doc, obj))
        if status:
            done = await api.merge_patch(self.path(name, "status"), {"status": status}, what=f"status of {name}")
            self.writes["status"] += 1
            self.objects.note(done)
        owned = self.ownership(doc, obj)
        if owned is not None:
            await owned

    async def _remove(self, name: str, obj: dict[str, Any]) -> None:
        """Our object whose sandbox is gone (deleted through the API, or its tombstone expired)."""
        assert self.objects is not None
        if res.FINALIZER in ((obj.get("metadata") or {}).get("finalizers") or []):
            await self.drop_finalizer(name)
        with contextlib.suppress(NotFound):
            await self.api().delete(self.path(name), what=f"delete Sandbox {name}")
            self.writes["delete"] += 1
        self.objects.forget(name)

    async def _ignore(self, name: str) -> None:
        assert self.objects is not None
        self.log.warning("Sandbox %s was not made by this control plane: ignored (see its status)", name)
        patch = {"status": {"message": res.IGNORED, "health": "Unknown"}}
        with contextlib.suppress(NotFound):
            done = await self.api().merge_patch(self.path(name, "status"), patch, what=f"status of {name}")
            self.writes["ignored"] += 1
            self.objects.note(done)

    # ---------------------------------------------------------------- plumbing

    def api(self) -> KubeApi:
        assert self.objects is not None
        return self.objects.api

    def path(self, name: str | None = None, sub: str | None = None) -> str:
        return res.path(self.namespace, res.SANDBOXES, name, sub)

    def note(self, obj: dict[str, Any]) -> None:
        """An object as a write of ours left it."""
        if self.objects is not None:
            self.objects.note(obj)

    async def close(self) -> None:
        """Wait for the creates and ends under way (a sandbox being ended is ended)."""
        await self.declared.close()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
