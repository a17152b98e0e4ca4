"""What a pod's status means for the platform: pure functions of the pod as the API server returns it (a dict).

The engine states (``RuntimeState``) of a pod:

==================================================  ===========  ==================================================
pod                                                 state        why
==================================================  ===========  ==================================================
phase Pending                                       STARTING     scheduled, pulling, creating
phase Running, container running, never restarted   RUNNING
phase Running, container terminated or waiting      EXITED       it died (exit code from its last termination)
phase Running, container restarted by the kubelet   EXITED       the new container started from the image: the
                                                                 sandbox's files went with the old one
phase Succeeded / Failed                            EXITED       incl. evicted (reason Evicted) and node lost
phase Unknown, or reason NodeLost                   EXITED       the node stopped reporting
condition DisruptionTarget (DeletionByTaintManager) EXITED       its node stopped reporting, and the taint eviction
                                                                 deletes it (it may stay Terminating for long)
being deleted (deletionTimestamp)                   EXITED       someone is removing it
==================================================  ===========  ==================================================

A pod the API server does not have is MISSING. Every pod not running comes with a detail for people
(``BackendInstance.detail``): the health pass and a failed call put it in the reason a sandbox is marked with.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime
from typing import Any

from sandbox.backends.base import (
    LABEL_INSTANCE,
    LABEL_KIND,
    LABEL_POOL,
    LABEL_USER_PREFIX,
    BackendInstance,
    RuntimeState,
)
from sandbox.backends.kubernetes.manifests import ANNOTATION_POOL, ANNOTATION_USER_LABELS, CONTAINER
from sandbox.models import SandboxKind

IMAGE_FAILURES = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})
START_FAILURES = frozenset(
    {"CreateContainerConfigError", "CreateContainerError", "RunContainerError", "CrashLoopBackOff", "PreStartHookError"}
)


def created_at(pod: dict[str, Any]) -> float:
    raw = str(pod.get("metadata", {}).get("creationTimestamp") or "")
    try:
        return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def container_status(pod: dict[str, Any]) -> dict[str, Any]:
    for status in pod.get("status", {}).get("containerStatuses") or []:
        if status.get("name") == CONTAINER:
            return dict(status)
    return {}


def _exit_code(container: dict[str, Any]) -> int | None:
    for where in ("state", "lastState"):
        terminated = (container.get(where) or {}).get("terminated")
        if terminated and terminated.get("exitCode") is not None:
            return int(terminated["exitCode"])
    return None


def judge(pod: dict[str, Any]) -> tuple[RuntimeState, int | None, str]:
    """The pod's engine state, the exit code of its container when it has one, and a detail for people."""
    status = pod.get("status") or {}
    phase, reason, message = status.get("phase", "Pending"), status.get("reason"), status.get("message")
    container = container_status(pod)
    code = _exit_code(container)
    said = f": {message}" if message else ""
    disruption = _condition(pod, "DisruptionTarget")
    if disruption is not None and disruption.get("status") == "True":
        if disruption.get("reason") == "DeletionByTaintManager":
            return RuntimeState.EXITED, code, f"its node was lost: the pod is evicted ({disruption.get('message')})"
        return RuntimeState.EXITED, code, f"the pod is being disrupted ({disruption.get('reason')})"
    if pod.get("metadata", {}).get("deletionTimestamp"):
        return RuntimeState.EXITED, code, "the pod is being deleted"
    if phase == "Unknown" or reason == "NodeLost":
        return RuntimeState.EXITED, code, f"its node was lost (pod phase {phase}){said}"
    if phase in ("Failed", "Succeeded"):
        why = {"Evicted": "the pod was evicted", "NodeLost": "its node was lost"}.get(str(reason), f"pod {phase}")
        if reason and reason not in ("Evicted", "NodeLost"):
            why += f" ({reason})"
        return RuntimeState.EXITED, code, why + said
    if phase == "Pending":
        return RuntimeState.STARTING, None, pending_reason(pod)
    state = container.get("state") or {}
    if "terminated" in state:
        return RuntimeState.EXITED, code, f"its container exited ({state['terminated'].get('reason') or 'no reason'})"
    if "waiting" in state and container.get("restartCount", 0):
        return RuntimeState.EXITED, code, f"its container is down ({state['waiting'].get('reason') or 'waiting'})"
    if container.get("restartCount", 0):
        return (
            RuntimeState.EXITED,
            code,
            f"the kubelet restarted its container {container['restartCount']} time(s): the sandbox's files and "
            "processes were lost with the old container",
        )
    if "running" in state:
        return RuntimeState.RUNNING, None, "running"
    return RuntimeState.STARTING, None, pending_reason(pod)


def _condition(pod: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return dict(condition)
    return None


_DESCRIBED: dict[tuple[str, str], BackendInstance] = {}
"""(uid, resourceVersion) -> the pod described: a pod that did not change is not judged again (a health round reads
every pod of the cache each round; most did not change since the last)."""
_DESCRIBED_MAX = 50_000


def describe(pod: dict[str, Any]) -> BackendInstance:
    meta = pod.get("metadata") or {}
    key = (str(meta.get("uid") or ""), str(meta.get("resourceVersion") or ""))
    if key[0] and key[1]:
        known = _DESCRIBED.get(key)
        if known is None:
            if len(_DESCRIBED) >= _DESCRIBED_MAX:
                _DESCRIBED.clear()
            known = _DESCRIBED[key] = _describe(pod)
        return dataclasses.replace(known, labels=dict(known.labels))
    return _describe(pod)


def _describe(pod: dict[str, Any]) -> BackendInstance:
    meta = pod.get("metadata") or {}
    labels = dict(meta.get("labels") or {})
    annotations = meta.get("annotations") or {}
    if ANNOTATION_POOL in annotations:
        labels[LABEL_POOL] = annotations[ANNOTATION_POOL]
    user = _json_object(annotations.get(ANNOTATION_USER_LABELS))
    labels.update({LABEL_USER_PREFIX + str(k): str(v) for k, v in user.items()})
    state, code, detail = judge(pod)
    try:
        kind = SandboxKind(labels.get(LABEL_KIND, "terminal"))
    except ValueError:
        kind = SandboxKind.TERMINAL
    return BackendInstance(
        id=labels.get(LABEL_INSTANCE, ""),
        kind=kind,
        ref=str(meta.get("name", "")),
        state=state,
        labels=labels,
        created_at=created_at(pod),
        exit_code=code if state is RuntimeState.EXITED else None,
        detail=None if state is RuntimeState.RUNNING else f"pod {meta.get('name', '')}: {detail}",
        serving=state is not RuntimeState.RUNNING or (_condition(pod, "Ready") or {}).get("status") != "False",
    )


def pending_reason(pod: dict[str, Any]) -> str:
    """Why a pod is not up yet, for people: the scheduler's or the kubelet's word."""
    status = pod.get("status") or {}
    waiting = (container_status(pod).get("state") or {}).get("waiting") or {}
    if waiting.get("reason"):
        return f"{waiting['reason']}: {waiting.get('message') or ''}".rstrip(": ")
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return f"not scheduled ({condition.get('reason')}): {condition.get('message') or ''}".rstrip(": ")
    return f"pod phase {status.get('phase', 'Pending')}"


def scheduled(pod: dict[str, Any]) -> bool:
    """Whether the scheduler has placed the pod on a node (bound: ``spec.nodeName``, or PodScheduled True)."""
    if (pod.get("spec") or {}).get("nodeName"):
        return True
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "PodScheduled" and c.get("status") == "True" for c in conditions)


def unschedulable(pod: dict[str, Any]) -> str | None:
    """The scheduler's word on a pod it tried and could not place (condition PodScheduled False: reason
    Unschedulable, e.g. "0/3 nodes are available: 3 Insufficient memory."), or None (placed, or not tried yet)."""
    if scheduled(pod):
        return None
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return str(condition.get("message") or condition.get("reason") or "Unschedulable")
    return None


def requests_of(pod: dict[str, Any]) -> str:
    """What the pod asks the scheduler for, for people: ``cpu=2, memory=4096Mi``."""
    asked: dict[str, str] = {}
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        for key, value in {**(resources.get("limits") or {}), **(resources.get("requests") or {})}.items():
            asked.setdefault(str(key), str(value))
    return ", ".join(f"{k}={v}" for k, v in sorted(asked.items())) or "no resources"


def startup_failure(pod: dict[str, Any]) -> tuple[str, bool] | None:
    """While waiting for a new pod: (why it will not come up, whether its image is the cause), or None (wait on)."""
    state, _, detail = judge(pod)
    waiting = (container_status(pod).get("state") or {}).get("waiting") or {}
    if waiting.get("reason") in IMAGE_FAILURES:
        return pending_reason(pod), True
    if waiting.get("reason") in START_FAILURES:
        return pending_reason(pod), False
    if state is RuntimeState.EXITED:
        return detail, False
    return None


def pod_ip(pod: dict[str, Any]) -> str | None:
    """The pod's IP once it runs, else None."""
    state, _, _ = judge(pod)
    ip = (pod.get("status") or {}).get("podIP")
    return str(ip) if state is RuntimeState.RUNNING and ip else None


def _json_object(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, str):
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
