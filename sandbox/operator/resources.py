"""The custom objects, as pure functions: a sandbox record (the store's document) and its pod in, the ``Sandbox``
object's metadata, spec and status out; a ``SandboxPool`` object in, the pool it asks for out. Everything here
matches the CRDs' openAPIV3Schema (deploy/helm/sandbox/crds); the tests validate what it makes against them.

``Sandbox`` status:

==============  ==========================================================================================
state           the record's: creating, running, unhealthy, expired (the tombstone, kept an hour), deleted
pod, node       the pod serving it now (it changes on reset and recovery) and the node it runs on
leaseExpiresAt  the end of the TTL lease, RFC 3339 (``renew`` moves it; the idle timeout is in the spec)
health          Healthy: running, its pod runs, and the leader's deep probes (every ``health_interval_s``)
                have not failed it. Failing: marked unhealthy (message: the failed probes), or its pod is
                not running (message: why, e.g. its node was lost) until the health pass replaces or marks
                it. Unknown: creating, expired, or its pod not seen yet or still starting
message         why it is unhealthy or expired, or what its pod is doing; empty when all is well
replacements    how often a failed pod was replaced
phase           Creating, Running, Unhealthy, Ended (expired or deleted); a declared object also Pending (no
                sandbox yet) and Failed (it could not be created)
sandboxId       the sandbox's id (a mirror's name; the one made for a declared object)
conditions      Ready (True: running and healthy; False with a reason: Creating, PodStarting, PodNotSeen,
                PodFailing, Unhealthy, Expired, Deleted, CapacityExhausted, InvalidSpec ...) and on declared
                objects SpecApplied (False, reason NotAppliedInPlace, when the spec changed after the create);
                ``lastTransitionTime`` moves only when a condition's status does
==============  ==========================================================================================

**Declared objects** (sandboxes.py, declared.py): ``declared_spec`` reads the sandbox spec of a Sandbox applied with
kubectl, ``declared_tenant`` its tenant (``spec.tenant``, else the annotation ``sandbox.platform.io/tenant``, else the
configured default); the record of the sandbox made for one carries the object's name and uid in two labels
(``RECORD_OBJECT``, ``RECORD_OBJECT_UID``), which is how a new leader finds it again.
"""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime
from typing import Any

from sandbox.backends.base import LABEL_MANAGED_BY, LABEL_OWNER, LABEL_POOL, MANAGED_BY, RuntimeState
from sandbox.backends.kubernetes import status as pod_status
from sandbox.backends.kubernetes.manifests import label_value
from sandbox.models import MAX_LEASE_S, SandboxKind, SandboxSpec

GROUP = "sandbox.platform.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
SANDBOXES = "sandboxes"
POOLS = "sandboxpools"
FINALIZER = f"{GROUP}/end-sandbox"
"""On every mirrored Sandbox: ``kubectl delete`` leaves the object (Terminating) until the sandbox has ended."""
LABEL_KIND = f"{GROUP}/kind"
LABEL_TENANT = f"{GROUP}/tenant"
LABEL_DECLARED = f"{GROUP}/declared"
"""``"true"`` on a Sandbox applied with kubectl once a control plane took it on (with its owner label and finalizer)."""
ANNOTATION_TENANT = f"{GROUP}/tenant"
"""A declared Sandbox's tenant, when its spec names none."""
RECORD_OBJECT = f"{GROUP}/object"
RECORD_OBJECT_UID = f"{GROUP}/object-uid"
"""Labels of the sandbox made for a declared object: the object's name and uid."""
IGNORED = (
    "ignored: this control plane does not create sandboxes from Sandbox objects (operator.declared is false). "
    "Create sandboxes through its API (sandbox create, POST /v1/sandboxes, the SDK); delete this object."
)
"""The status message of a Sandbox object created by hand when declared sandboxes are off (see docs/kubernetes.md)."""
READY = "Ready"
SPEC_APPLIED = "SpecApplied"
PHASES = {"creating": "Creating", "running": "Running", "unhealthy": "Unhealthy", "expired": "Ended",
          "deleted": "Ended"}  # fmt: skip
"""Record state -> status.phase."""


def path(namespace: str, plural: str, name: str | None = None, sub: str | None = None) -> str:
    """``/apis/sandbox.platform.io/v1alpha1/namespaces/<ns>/<plural>[/<name>[/<sub>]]``."""
    out = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{plural}"
    return out + (f"/{name}" if name else "") + (f"/{sub}" if sub else "")


def rfc3339(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def owner_of(obj: dict[str, Any]) -> str | None:
    """The control plane that mirrors this object (its ``sandbox.owner`` label); None: made by hand."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return labels.get(LABEL_OWNER) if labels.get(LABEL_MANAGED_BY) == MANAGED_BY else None


def merge_diff(current: Any, desired: dict[str, Any]) -> dict[str, Any]:
    """The JSON merge patch that turns ``current`` into ``desired`` (None: remove); empty when they agree."""
    current = current if isinstance(current, dict) else {}
    patch: dict[str, Any] = {key: None for key in current if key not in desired}
    for key, value in desired.items():
        if isinstance(value, dict) and isinstance(current.get(key), dict):
            sub = merge_diff(current[key], value)
            if sub:
                patch[key] = sub
        elif key not in current or current[key] != value:
            patch[key] = value
    return patch


# ---------------------------------------------------------------------------------------------------- Sandbox


def sandbox_metadata(doc: dict[str, Any], owner: str) -> dict[str, Any]:
    """The labels and finalizer a mirrored Sandbox carries."""
    labels = {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_OWNER: owner,
        LABEL_KIND: str(doc["spec"]["kind"]),
        LABEL_TENANT: label_value(str(doc["tenant"])),
    }
    return {"labels": labels, "finalizers": [FINALIZER]}


def _seconds(value: Any) -> int:
    return max(1, min(int(MAX_LEASE_S), math.ceil(float(value))))


def sandbox_spec(doc: dict[str, Any], image: str) -> dict[str, Any]:
    """What the sandbox was created with (``image``: what its pods run)."""
    spec = doc["spec"]
    resources = spec.get("resources") or {}
    out: dict[str, Any] = {
        "kind": spec["kind"],
        "tenant": doc["tenant"],
        "image": image,
        "resources": {
            "cpus": max(0.001, float(resources.get("cpus", 1.0))),
            "memoryMb": int(resources.get("memory_mb", 2048)),
            "pids": int(resources.get("pids", 512)),
            "shmMb": int(resources.get("shm_mb", 256)),
        },
        "network": spec.get("network", "none"),
        "ttlSeconds": _seconds(spec.get("ttl_s", 6 * 3600)),
        "autoRecover": bool(spec.get("auto_recover", False)),
        "labels": {str(k): str(v) for k, v in (spec.get("labels") or {}).items()},
    }
    if resources.get("disk_mb") is not None:
        out["resources"]["diskMb"] = int(resources["disk_mb"])
    if spec.get("idle_timeout_s") is not None:
        out["idleTimeoutSeconds"] = _seconds(spec["idle_timeout_s"])
    if spec.get("snapshot"):
        out["snapshot"] = str(spec["snapshot"])
    return out


def sandbox_status(
    doc: dict[str, Any],
    pod_name: str,
    pod: dict[str, Any] | None,
    *,
    generation: int | None,
    previous: dict[str, Any] | None = None,
    extra: tuple[dict[str, Any], ...] = (),
) -> dict[str, Any]:
    """What the control plane observes of the sandbox (``pod``: its pod as last seen, None if not seen;
    ``previous``: the object's status now, whose conditions' transition times are kept when they still hold;
    ``extra``: conditions after Ready)."""
    state = str(doc["state"])
    out: dict[str, Any] = {
        "state": state,
        "kind": doc["spec"]["kind"],
        "tenant": doc["tenant"],
        "pod": pod_name,
        "leaseExpiresAt": rfc3339(float(doc["expires_at"])),
        "replacements": int(doc.get("replacements") or 0),
    }
    node = ((pod or {}).get("spec") or {}).get("nodeName")
    if node:
        out["node"] = str(node)
    health, message = "Unknown", str(doc.get("error") or "")
    if state == "unhealthy":
        health = "Failing"
    elif state == "running" and pod is None:
        message = f"pod {pod_name} not seen yet"
    elif state == "running" and pod is not None:
        judged, _, detail = pod_status.judge(pod)
        if judged is RuntimeState.RUNNING:
            health = "Healthy"
        else:
            health = "Failing" if judged is RuntimeState.EXITED else "Unknown"
            message = f"pod {pod_name}: {detail}"
    out["health"], out["message"] = health, message
    if generation is not None:
        out["observedGeneration"] = generation
    out["phase"], out["sandboxId"] = PHASES[state], str(doc["id"])
    out["conditions"] = conditions([_ready(out, pod), *extra], previous)
    return out


def _ready(status: dict[str, Any], pod: dict[str, Any] | None) -> dict[str, Any]:
    """The Ready condition of a sandbox's status."""
    state, health, message = status["state"], status["health"], status["message"]
    if health == "Healthy":
        return condition(READY, True, "Healthy", "running; its pod runs and its health checks pass")
    reason = {"creating": "Creating", "unhealthy": "Unhealthy", "expired": "Expired", "deleted": "Deleted"}.get(state)
    if reason is None:  # running, its pod not (yet) running
        reason = "PodNotSeen" if pod is None else "PodFailing" if health == "Failing" else "PodStarting"
    return condition(READY, False, reason, message or state)


def condition(kind: str, ok: bool, reason: str, message: str) -> dict[str, Any]:
    return {"type": kind, "status": "True" if ok else "False", "reason": reason, "message": message}


def conditions(
    wanted: list[dict[str, Any]], previous: dict[str, Any] | None, *, now: float | None = None
) -> list[dict[str, Any]]:
    """``wanted`` with their ``lastTransitionTime``: the previous one's when the condition had that status already,
    else now (so that a status that does not change costs no write)."""
    before = {c.get("type"): c for c in (previous or {}).get("conditions") or [] if isinstance(c, dict)}
    stamp = rfc3339(time.time() if now is None else now)
    out = []
    for c in wanted:
        old = before.get(c["type"]) or {}
        kept = old.get("lastTransitionTime") if old.get("status") == c["status"] else None
        out.append({**c, "lastTransitionTime": kept or stamp})
    return out


def sandbox_object(namespace: str, doc: dict[str, Any], owner: str, image: str) -> dict[str, Any]:
    """A new mirrored Sandbox (its status is written next, through the status subresource)."""
    metadata = {"name": doc["id"], "namespace": namespace, **sandbox_metadata(doc, owner)}
    return {"apiVersion": API_VERSION, "kind": "Sandbox", "metadata": metadata, "spec": sandbox_spec(doc, image)}


# ---------------------------------------------------------------------------------------------------- declared

_RESOURCES = {"cpus": "cpus", "memoryMb": "memory_mb", "pids": "pids", "shmMb": "shm_mb", "diskMb": "disk_mb"}


def is_declared(obj: dict[str, Any]) -> bool:
    """A Sandbox applied with kubectl that a control plane took on."""
    return ((obj.get("metadata") or {}).get("labels") or {}).get(LABEL_DECLARED) == "true"


def declared_tenant(obj: dict[str, Any], default: str) -> str:
    """``spec.tenant``, else the annotation ``sandbox.platform.io/tenant``, else ``default``."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return str((obj.get("spec") or {}).get("tenant") or annotations.get(ANNOTATION_TENANT) or default)


def declared_spec(obj: dict[str, Any]) -> SandboxSpec:
    """The sandbox a declared object asks for (what the schema leaves out takes the API's defaults, except the idle
    timeout: absent, never). ValueError (pydantic's ValidationError is one): not a spec the platform runs."""
    spec = obj.get("spec") or {}
    given = spec.get("resources") or {}
    fields: dict[str, Any] = {
        "kind": spec.get("kind"),
        "resources": {name: given[key] for key, name in _RESOURCES.items() if key in given},
        "labels": dict(spec.get("labels") or {}),
        "idle_timeout_s": spec.get("idleTimeoutSeconds"),
    }
    for key, name in (("image", "image"), ("network", "network"), ("ttlSeconds", "ttl_s"), ("snapshot", "snapshot"),
                      ("autoRecover", "auto_recover")):  # fmt: skip
        if spec.get(key) is not None:
            fields[name] = spec[key]
    return SandboxSpec.model_validate(fields)


def record_object_uid(doc: dict[str, Any]) -> str | None:
    """The uid of the declared object a sandbox record was made for; None: made through the API."""
    uid = (doc["spec"].get("labels") or {}).get(RECORD_OBJECT_UID)
    return str(uid) if uid else None


def spec_changes(obj: dict[str, Any], doc: dict[str, Any], tenant: str) -> list[str]:
    """The fields of a declared object's spec (and its tenant) that differ from what its sandbox was made with."""
    made = {**doc["spec"], "labels": {k: v for k, v in (doc["spec"].get("labels") or {}).items()
                                      if k not in (RECORD_OBJECT, RECORD_OBJECT_UID)}}  # fmt: skip
    have = sandbox_spec({"spec": made, "tenant": doc["tenant"]}, str(made.get("image") or ""))
    asked = declared_spec(obj)
    want = sandbox_spec({"spec": asked.model_dump(mode="json"), "tenant": tenant}, asked.image or "")
    changed = []
    for key, value in sorted(merge_diff(have, want).items()):
        nested = sorted(value) if key == "resources" and isinstance(value, dict) else []
        changed += [f"spec.{key}.{sub}" for sub in nested] or [f"spec.{key}"]
    return changed


def declared_status(
    obj: dict[str, Any], phase: str, reason: str, message: str, *, tenant: str, sandbox_id: str | None = None
) -> dict[str, Any]:
    """The status of a declared object that has no sandbox (Pending, Creating, Failed, Ended)."""
    previous = obj.get("status") or {}
    out: dict[str, Any] = {"phase": phase, "tenant": tenant, "health": "Unknown", "message": message}
    kind = (obj.get("spec") or {}).get("kind")
    if kind:
        out["kind"] = kind
    if sandbox_id:
        out["sandboxId"] = sandbox_id
    generation = (obj.get("metadata") or {}).get("generation")
    if generation is not None:
        out["observedGeneration"] = generation
    out["conditions"] = conditions([condition(READY, False, reason, message)], previous)
    return out


# ---------------------------------------------------------------------------------------------------- SandboxPool


def pool_spec(obj: dict[str, Any]) -> tuple[SandboxSpec, str | None, int, int, int]:
    """A SandboxPool's (sandbox spec, snapshot "<tenant>/<name>" or None, min, max, max_starting). The schema's
    defaults apply (max 10, maxStarting 4); a max below min is raised to min. ValueError: unusable."""
    spec = obj.get("spec") or {}
    kind = SandboxKind(str(spec.get("kind")))
    image = spec.get("image") or None
    minimum = int(spec.get("min", 0))
    maximum = max(int(spec.get("max", 10)), minimum, 1)
    starting = int(spec.get("maxStarting", 4))
    if minimum < 0 or starting < 1:
        raise ValueError("min must be >= 0 and maxStarting >= 1")
    snapshot = str(spec["snapshot"]) if spec.get("snapshot") else None
    return SandboxSpec(kind=kind, image=image), snapshot, minimum, maximum, starting


def pool_selector(key: str) -> str:
    """The label selector of the pods started for a pool (they keep the label once claimed)."""
    return f"{LABEL_POOL}={label_value(key)}"


def pool_status(
    ready: int,
    starting: int,
    key: str | None,
    *,
    generation: int | None,
    minimum: int = 0,
    why: str = "",
    short: bool = False,
    previous: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A SandboxPool's status; its Ready condition: True once ``minimum`` are warm; else False, reason Filling, Short
    (the warm share is full, or held sandboxes need the room) or NotApplied (``why``: the object cannot be applied)."""
    out: dict[str, Any] = {"ready": ready, "starting": starting, "replicas": ready + starting}
    if key is not None:
        out["selector"] = pool_selector(key)
    if generation is not None:
        out["observedGeneration"] = generation
    if key is None:
        ok = condition(READY, False, "NotApplied", why or "not applied")
    elif ready >= minimum:
        ok = condition(READY, True, "Warm", f"{ready} warm, at least {minimum} kept")
    elif short:
        ok = condition(READY, False, "Short", f"{ready} of {minimum} warm: no room to start more (the warm share is "
                       "full, or held sandboxes need it)")  # fmt: skip
    else:
        ok = condition(READY, False, "Filling", f"{ready} of {minimum} warm, {starting} starting")
    out["conditions"] = conditions([ok], previous)
    return out
