"""The fake API server's object store: Kubernetes REST semantics for a handful of resources, in memory.

What it keeps of the real thing, because clients rely on it:

- every object gets ``metadata.uid``, ``resourceVersion`` (one counter for the whole store, increasing with every
  write, as etcd's revision) and ``creationTimestamp``; LIST answers carry the store's resourceVersion;
- errors are ``Status`` objects (``kind: Status``, ``code``, ``reason``: NotFound, AlreadyExists, Conflict, Invalid,
  BadRequest, Gone ...);
- a watch from a resourceVersion replays the changes after it (ADDED / MODIFIED / DELETED), then streams new ones;
  from an older version than the history holds it gets an ERROR event with a 410 Gone Status; without a version, it
  starts with an ADDED event per current object. The history is compacted as etcd's is: events older than
  ``history_s`` (and past ``history`` events) are dropped, so a watcher that comes back late must list again;
- every write records its writer in ``metadata.managedFields`` (manager, operation, time, a FieldsV1 tree of the
  fields it set), as the API server does for every object since 1.18; the writer is the request's User-Agent
  (``MANAGER``), the fake kubelet and controllers write as ``kubelet``;
- names and labels are validated (422 Invalid), a pod's spec cannot change after creation except container images,
  ``stringData`` of a Secret becomes base64 ``data`` and an immutable Secret's data cannot change;
- a patch or update carrying ``metadata.resourceVersion`` is refused with 409 Conflict when it is stale;
- deleting an object deletes its dependents (``ownerReferences``), as the garbage collector does; an object with
  ``metadata.finalizers`` is only marked (``deletionTimestamp``) and goes when a write empties its finalizers;
- custom resources: creating a CustomResourceDefinition serves its kind, with the status and scale subresources it
  declares (custom.py).

Everything runs on the fake server's event loop: no locks.
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import copy
import re
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sandbox.testing.fake_kube import custom
from sandbox.testing.fake_kube.rest import (
    LABEL_NAME,
    ApiError,
    merge_patch,
    not_found,
    now_rfc3339,
    parse_field_selector,
    parse_label_selector,
)

__all__ = ["RESOURCES", "ApiError", "ObjectStore", "merge_patch", "not_found", "now_rfc3339"]

RESOURCES: dict[str, tuple[str, str, bool]] = {
    "namespaces": ("v1", "Namespace", False),
    "pods": ("v1", "Pod", True),
    "secrets": ("v1", "Secret", True),
    "persistentvolumeclaims": ("v1", "PersistentVolumeClaim", True),
    "events": ("v1", "Event", True),
    "resourcequotas": ("v1", "ResourceQuota", True),
    "networkpolicies": ("networking.k8s.io/v1", "NetworkPolicy", True),
    "leases": ("coordination.k8s.io/v1", "Lease", True),
    custom.CRD_RESOURCE: ("apiextensions.k8s.io/v1", "CustomResourceDefinition", False),
}
"""resource -> (apiVersion, kind, namespaced)."""

MANAGER: contextvars.ContextVar[str] = contextvars.ContextVar("manager", default="kubelet")
"""Who writes: the HTTP side sets the client's User-Agent (its program name) for each request."""

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def invalid(resource: str, name: str, why: str) -> ApiError:
    kind = RESOURCES.get(resource, ("", resource, True))[1]
    return ApiError(422, "Invalid", f'{kind} "{name}" is invalid: {why}', name=name, kind=resource)


# ---------------------------------------------------------------------------------------------------- the store


@dataclass
class Event:
    rv: int
    type: str
    resource: str
    namespace: str
    obj: dict[str, Any]
    at: float = field(default_factory=time.monotonic)


@dataclass(eq=False)
class Watcher:
    resource: str
    namespace: str | None
    labels: Callable[[dict[str, str]], bool]
    fields: Callable[[dict[str, Any]], bool]
    queue: asyncio.Queue[Event | None] = field(default_factory=asyncio.Queue)

    def wants(self, event: Event) -> bool:
        if event.resource != self.resource or (self.namespace is not None and event.namespace != self.namespace):
            return False
        return self.labels(event.obj["metadata"].get("labels") or {}) and self.fields(event.obj)


Key = tuple[str, str, str]
Hook = Callable[[str, dict[str, Any]], None]
"""Called with ("ADDED" | "DELETED", the object) for every pod created or deleted."""
Validator = Callable[[dict[str, Any]], None]
"""Sees each custom object as it is about to be stored; raises (AssertionError, ValueError) to refuse it."""


class ObjectStore:
    def __init__(self, *, history: int = 20_000, history_s: float | None = None) -> None:
        self.objects: dict[Key, dict[str, Any]] = {}
        self.revision = 1000
        self.events: deque[Event] = deque(maxlen=history)
        self.history_s = history_s
        """Events older than this are compacted away (None: only ``history`` bounds them)."""
        self.compacted = 0
        """The newest revision compacted away: a watch must start at or after it, else 410 Gone."""
        self.watchers: set[Watcher] = set()
        self._dependents: dict[str, set[Key]] = {}
        """Owner uid -> objects that named it in their ownerReferences (checked again when the owner goes)."""
        self.pod_hooks: list[Hook] = []
        self.event_hooks: list[Callable[[Event], None]] = []
        """Called with every event (any resource), before watchers get it."""
        self.resources: dict[str, tuple[str, str, bool]] = dict(RESOURCES)
        """resource -> (apiVersion, kind, namespaced): the built-in ones and those of the CRDs created."""
        self.custom: dict[str, custom.CustomKind] = {}
        self.validate: Validator | None = None
        self.validated = 0
        """How many custom objects ``validate`` passed."""
        self.refused: list[str] = []
        """Why ``validate`` refused each custom object it refused."""
        for ns in ("default", "kube-system"):
            self.create("namespaces", "", {"metadata": {"name": ns}})

    # ---------------------------------------------------------------- reading

    def get(self, resource: str, namespace: str, name: str) -> dict[str, Any]:
        obj = self.objects.get((resource, namespace, name))
        if obj is None:
            raise not_found(resource, name)
        return copy.deepcopy(obj)

    def list(
        self, resource: str, namespace: str | None, *, labels: str = "", fields: str = "", copies: bool = True
    ) -> tuple[list[dict[str, Any]], int]:
        """The matching objects, sorted by namespace and name. ``copies=False``: the stored objects themselves,
        for a caller that only serializes them at once (a LIST answer of thousands of pods)."""
        match_labels, match_fields = parse_label_selector(labels), parse_field_selector(fields)
        keep: Callable[[dict[str, Any]], dict[str, Any]] = copy.deepcopy if copies else (lambda obj: obj)
        items = [
            keep(obj)
            for (res, ns, _), obj in sorted(self.objects.items())
            if res == resource
            and (namespace is None or ns == namespace)
            and match_labels(obj["metadata"].get("labels") or {})
            and match_fields(obj)
        ]
        return items, self.revision

    def watch(self, resource: str, namespace: str | None, *, since: str, labels: str = "", fields: str = "") -> Watcher:
        """A watcher whose queue holds, first, what happened after ``since`` (or every object, without it)."""
        watcher = Watcher(resource, namespace, parse_label_selector(labels), parse_field_selector(fields))
        if since in ("", "0"):
            for obj in self.list(resource, namespace, labels=labels, fields=fields)[0]:
                watcher.queue.put_nowait(
                    Event(self.revision, "ADDED", resource, obj["metadata"].get("namespace", ""), obj)
                )
        else:
            version = int(since) if since.isdigit() else -1
            self.compact()
            if version < 0 or version < self.compacted:
                raise ApiError(410, "Expired", f"too old resource version: {since} ({self.compacted})")
            newer = []
            for event in reversed(self.events):  # from the newest back: a recent version reads only a few
                if event.rv <= version:
                    break
                newer.append(event)
            for event in reversed(newer):
                if watcher.wants(event):
                    watcher.queue.put_nowait(event)
        self.watchers.add(watcher)
        return watcher

    def compact(self) -> None:
        """Drop the events older than ``history_s`` (etcd's compaction, the watch cache's window)."""
        if self.history_s is None:
            return
        horizon = time.monotonic() - self.history_s
        while self.events and self.events[0].at < horizon:
            self.compacted = self.events.popleft().rv

    def unwatch(self, watcher: Watcher) -> None:
        self.watchers.discard(watcher)

    def close_watches(self) -> None:
        for watcher in list(self.watchers):
            watcher.queue.put_nowait(None)
        self.watchers.clear()

    # ---------------------------------------------------------------- writing

    def _emit(self, kind: str, resource: str, namespace: str, obj: dict[str, Any]) -> None:
        event = Event(self.revision, kind, resource, namespace, copy.deepcopy(obj))
        if len(self.events) == self.events.maxlen:
            self.compacted = self.events[0].rv
        self.events.append(event)
        if kind != "DELETED":
            for ref in obj["metadata"].get("ownerReferences") or []:
                self._dependents.setdefault(str(ref.get("uid")), set()).add(
                    (resource, namespace, obj["metadata"]["name"])
                )
        for hook in self.event_hooks:
            hook(event)
        for watcher in list(self.watchers):
            if watcher.wants(event):
                watcher.queue.put_nowait(event)

    def _bump(self, obj: dict[str, Any], *, manager: str | None = None, sub: str = "", fields: Any = None) -> None:
        """A new resourceVersion for a write of ``obj``; ``fields`` (the body sent, else the object): what the
        writer's managedFields entry says it set."""
        self.revision += 1
        meta = obj["metadata"]
        meta["resourceVersion"] = str(self.revision)
        who = manager or MANAGER.get()
        entry = {
            "manager": who,
            "operation": "Update",
            "apiVersion": obj.get("apiVersion", "v1"),
            "time": now_rfc3339(),
            "fieldsType": "FieldsV1",
            "fieldsV1": _fields_v1(fields if isinstance(fields, dict) else obj, depth=4),
        }
        if sub:
            entry["subresource"] = sub
        mine = (who, sub)
        kept = [m for m in meta.get("managedFields") or [] if (m.get("manager"), m.get("subresource", "")) != mine]
        meta["managedFields"] = [*kept, entry]

    def create(self, resource: str, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        if resource not in self.resources:
            raise not_found(resource, "")
        api_version, kind, namespaced = self.resources[resource]
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        name = str(meta.get("name") or "")
        if not name or len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
            raise invalid(resource, name, f"metadata.name: Invalid value: {name!r}: a lowercase RFC 1123 subdomain")
        if namespaced and ("namespaces", "", namespace) not in self.objects:
            raise not_found("namespaces", namespace)
        if meta.get("namespace") not in (None, namespace if namespaced else ""):
            raise ApiError(400, "BadRequest", "the namespace of the object does not match the namespace on the request")
        if (resource, namespace, name) in self.objects:
            raise ApiError(409, "AlreadyExists", f'{resource} "{name}" already exists', name=name, kind=resource)
        _validate_meta(resource, name, meta)
        obj["apiVersion"], obj["kind"] = api_version, kind
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=now_rfc3339())
        meta.pop("resourceVersion", None)
        if namespaced:
            meta["namespace"] = namespace
        _defaults(resource, name, obj)
        if resource in self.custom:
            custom.on_create(self.custom[resource], obj)
            self._validate(resource, obj)
        elif resource == custom.CRD_RESOURCE:
            self._serve(custom.kind_of(obj))
        self._bump(obj)
        self.objects[(resource, namespace, name)] = obj
        self._emit("ADDED", resource, namespace, obj)
        if resource == "pods":
            for hook in self.pod_hooks:
                hook("ADDED", copy.deepcopy(obj))
        return copy.deepcopy(obj)

    def update(
        self, resource: str, namespace: str, name: str, change: Callable[[dict[str, Any]], None]
    ) -> dict[str, Any]:
        """Apply ``change`` to the stored object (the fake kubelet's and controllers' status writes)."""
        obj = self.objects.get((resource, namespace, name))
        if obj is None:
            raise not_found(resource, name)
        change(obj)
        self._bump(obj, manager="kubelet", fields={"status": obj.get("status") or {}})
        self._emit("MODIFIED", resource, namespace, obj)
        return copy.deepcopy(obj)

    def patch(
        self, resource: str, namespace: str, name: str, patch: Any, *, strategic: bool, sub: str = ""
    ) -> dict[str, Any]:
        """A merge patch of the object, or of its ``sub``resource ("status")."""
        current = self.get(resource, namespace, name)
        if not isinstance(patch, dict):
            raise ApiError(400, "BadRequest", "a merge patch must be a JSON object")
        new = merge_patch(current, patch, strategic=strategic)
        return self._write(resource, namespace, name, current, new, patch, sub=sub)

    def replace(
        self, resource: str, namespace: str, name: str, body: dict[str, Any], *, sub: str = ""
    ) -> dict[str, Any]:
        current = self.get(resource, namespace, name)
        return self._write(resource, namespace, name, current, copy.deepcopy(body), body, sub=sub)

    def scale(self, resource: str, namespace: str, name: str, scale: dict[str, Any] | None = None) -> dict[str, Any]:
        """The object's Scale; with ``scale``, first write the replicas it asks for (PUT or a patched Scale)."""
        kind = self._custom_kind(resource)
        current = self.get(resource, namespace, name)
        if scale is not None:
            sent = {"metadata": {"resourceVersion": (scale.get("metadata") or {}).get("resourceVersion")}}
            current = self._write(resource, namespace, name, current, custom.scaled(kind, current, scale), sent)
        return custom.scale_of(kind, current)

    def _custom_kind(self, resource: str) -> custom.CustomKind:
        if resource not in self.custom:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return self.custom[resource]

    def _serve(self, kind: custom.CustomKind) -> None:
        if kind.plural in self.resources and kind.plural not in self.custom:
            raise ApiError(409, "Conflict", f"{kind.plural} is a built-in resource of the fake API server")
        self.custom[kind.plural] = kind
        self.resources[kind.plural] = (kind.api_version, kind.kind, kind.namespaced)

    def _validate(self, resource: str, obj: dict[str, Any]) -> None:
        if self.validate is None:
            return
        try:
            self.validate(copy.deepcopy(obj))
        except (AssertionError, ValueError) as e:
            self.refused.append(str(e))
            raise invalid(resource, obj["metadata"].get("name", ""), str(e)) from e
        self.validated += 1

    def _write(
        self,
        resource: str,
        namespace: str,
        name: str,
        old: dict[str, Any],
        new: dict[str, Any],
        sent: dict[str, Any],
        *,
        sub: str = "",
    ) -> dict[str, Any]:
        wanted = (sent.get("metadata") or {}).get("resourceVersion")
        if wanted and wanted != old["metadata"]["resourceVersion"]:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {resource} "{name}": the object has been modified; please apply '
                "your changes to the latest version and try again",
                name=name,
                kind=resource,
            )
        if sub == "status":
            new = custom.on_status_update(self._custom_kind(resource), old, new)
        elif sub:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({sub})")
        meta = new.setdefault("metadata", {})
        kept = ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp", "generation", "managedFields")
        for key in kept:
            if key in old["metadata"]:
                meta[key] = old["metadata"][key]
        _validate_meta(resource, name, meta)
        if resource in self.custom:
            if not sub:
                custom.on_update(self.custom[resource], old, new)
            self._validate(resource, new)
        if resource == "pods":
            _check_pod_update(name, old, new)
            new["status"] = old.get("status", {})  # the status subresource is the kubelet's
        if resource == "secrets":
            _defaults(resource, name, new)
            if old.get("immutable") and (new.get("data") != old.get("data") or not new.get("immutable")):
                raise invalid(resource, name, "data: Forbidden: field is immutable when `immutable` is set")
        new["apiVersion"], new["kind"] = old["apiVersion"], old["kind"]
        self._bump(new, sub=sub, fields=sent)
        self.objects[(resource, namespace, name)] = new
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            return self.delete(resource, namespace, name)  # the last finalizer went: the deletion completes
        self._emit("MODIFIED", resource, namespace, new)
        return copy.deepcopy(new)

    def delete(self, resource: str, namespace: str, name: str) -> dict[str, Any]:
        """Remove the object now, then its dependents (what the garbage collector would do shortly after); an object
        with finalizers is only marked for deletion, and goes when a write empties them."""
        found = self.objects.get((resource, namespace, name))
        if found is not None and found["metadata"].get("finalizers"):
            if not found["metadata"].get("deletionTimestamp"):
                return self.update(resource, namespace, name, _marked_for_deletion)
            return copy.deepcopy(found)
        obj = self.objects.pop((resource, namespace, name), None)
        if obj is None:
            raise not_found(resource, name)
        self.revision += 1
        obj["metadata"]["resourceVersion"] = str(self.revision)
        self._emit("DELETED", resource, namespace, obj)
        if resource == "pods":
            for hook in self.pod_hooks:
                hook("DELETED", copy.deepcopy(obj))
        uid = obj["metadata"]["uid"]
        for key in sorted(self._dependents.pop(uid, ())):
            other = self.objects.get(key)
            if other is not None and any(
                ref.get("uid") == uid for ref in other["metadata"].get("ownerReferences") or []
            ):
                self.delete(*key)
        if resource == "namespaces":
            for key in [k for k in self.objects if k[1] == name]:
                if key in self.objects:
                    self.delete(*key)
        if resource == custom.CRD_RESOURCE:
            plural = custom.kind_of(obj).plural
            for key in [k for k in self.objects if k[0] == plural]:
                self.objects.pop(key, None)  # as the API server: the custom objects go with their definition
            self.custom.pop(plural, None)
            self.resources.pop(plural, None)
        return copy.deepcopy(obj)


def _fields_v1(obj: dict[str, Any], *, depth: int) -> dict[str, Any]:
    """The FieldsV1 tree of an object's fields (``f:<key>`` a level, lists as leaves), ``depth`` levels deep."""
    tree: dict[str, Any] = {}
    for key, value in obj.items():
        if key in ("apiVersion", "kind") or (key in ("resourceVersion", "managedFields", "uid", "creationTimestamp")):
            continue
        tree[f"f:{key}"] = _fields_v1(value, depth=depth - 1) if isinstance(value, dict) and depth > 1 else {}
    return tree


def _marked_for_deletion(obj: dict[str, Any]) -> None:
    obj["metadata"].update(deletionTimestamp=now_rfc3339(), deletionGracePeriodSeconds=0)


def _validate_meta(resource: str, name: str, meta: dict[str, Any]) -> None:
    for key, value in (meta.get("labels") or {}).items():
        prefix, _, short = str(key).rpartition("/")
        if not LABEL_NAME.match(short) or len(short) > 63 or (prefix and not _DNS_SUBDOMAIN.match(prefix)):
            raise invalid(resource, name, f"metadata.labels: Invalid value: {key!r}: not a qualified name")
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            raise invalid(resource, name, f"metadata.labels: Invalid value: {value!r}: not a valid label value")
    for key, value in (meta.get("annotations") or {}).items():
        if not isinstance(value, str):
            raise invalid(resource, name, f"metadata.annotations[{key}]: Invalid value: must be a string")


def _defaults(resource: str, name: str, obj: dict[str, Any]) -> None:
    if resource == "secrets":
        data = dict(obj.get("data") or {})
        for key, value in (obj.pop("stringData", None) or {}).items():
            data[key] = base64.b64encode(str(value).encode()).decode()
        obj["data"] = data
        obj.setdefault("type", "Opaque")
    elif resource == "pods":
        spec = obj.setdefault("spec", {})
        containers = spec.get("containers") or []
        if not containers or not all(c.get("name") and c.get("image") for c in containers):
            raise invalid(resource, name, "spec.containers: Required value: every container needs a name and image")
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("dnsPolicy", "ClusterFirst")
        obj["status"] = {"phase": "Pending", "qosClass": "Guaranteed"}
    elif resource == "persistentvolumeclaims":
        obj["status"] = {"phase": "Bound", "accessModes": obj.get("spec", {}).get("accessModes", [])}
    elif resource == "namespaces":
        obj.setdefault("metadata", {}).setdefault("labels", {})["kubernetes.io/metadata.name"] = name
        obj["status"] = {"phase": "Active"}


def _check_pod_update(name: str, old: dict[str, Any], new: dict[str, Any]) -> None:
    def without_images(spec: dict[str, Any]) -> dict[str, Any]:
        spec = copy.deepcopy(spec)
        for container in spec.get("containers") or []:
            container.pop("image", None)
        return spec

    if without_images(new.get("spec") or {}) != without_images(old.get("spec") or {}):
        raise invalid(
            "pods", name, "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`"
        )
