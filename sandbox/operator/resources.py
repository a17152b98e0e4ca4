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
==============  ==========================================================================================
"""

from __future__ import annotations

import math
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
IGNORED = (
    "ignored: Sandbox objects are made by the control plane, one per sandbox it runs. Create sandboxes through its "
    "API (sandbox create, POST /v1/sandboxes, the SDK), which checks the caller's tenant; delete this object."
)
"""The status message of a Sandbox object created by hand (see docs/kubernetes.md)."""


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
    doc: dict[str, Any], pod_name: str, pod: dict[str, Any] | None, *, generation: int | None
) -> dict[str, Any]:
    """What the control plane observes of the sandbox (``pod``: its pod as last seen, None if not seen)."""
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
    return out


def sandbox_object(namespace: str, doc: dict[str, Any], owner: str, image: str) -> dict[str, Any]:
    """A new mirrored Sandbox (its status is written next, through the status subresource)."""
    metadata = {"name": doc["id"], "namespace": namespace, **sandbox_metadata(doc, owner)}
    return {"apiVersion": API_VERSION, "kind": "Sandbox", "metadata": metadata, "spec": sandbox_spec(doc, image)}


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


def pool_status(ready: int, starting: int, key: str | None, *, generation: int | None) -> dict[str, Any]:
    out: dict[str, Any] = {"ready": ready, "starting": starting, "replicas": ready + starting}
    if key is not None:
        out["selector"] = pool_selector(key)
    if generation is not None:
        out["observedGeneration"] = generation
    return out
