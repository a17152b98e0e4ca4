"""The ResourceQuota admission of the fake API server: a pod create that would take a namespace past a quota's
``spec.hard`` is refused with 403 Forbidden, in the API server's words:

    pods "p" is forbidden: exceeded quota: sandboxes, requested: requests.memory=2Gi, used: requests.memory=7Gi,
    limited: requests.memory=8Gi

and one that does not state a resource a quota limits, with 403 "failed quota: <name>: must specify limits.cpu for:
agent". Usage is counted from the namespace's pods that have not ended (phase Succeeded or Failed), as the quota
controller counts it. Kept: ``pods`` and ``count/pods``, ``cpu``/``memory`` (= ``requests.*``), ``requests.*`` and
``limits.*`` of any resource. Not kept: ``status.used`` (not written), scopes, other object counts.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from sandbox.testing.fake_kube.objects import ApiError, ObjectStore
from sandbox.testing.fake_kube.quantities import ZERO, parse, pod_resources, show, states

ENDED = ("Succeeded", "Failed")


def usage(pod: dict[str, Any]) -> dict[str, Fraction]:
    """What ``pod`` counts against a quota, under each name a quota may use."""
    counted = pod_resources(pod)
    for short in ("cpu", "memory"):
        if f"requests.{short}" in counted:
            counted[short] = counted[f"requests.{short}"]
    counted["pods"] = counted["count/pods"] = Fraction(1)
    return counted


def admit_pod(store: ObjectStore, namespace: str, pod: dict[str, Any]) -> None:
    """Raise the ApiError the API server answers when a quota of ``namespace`` refuses ``pod``; None: admitted."""
    quotas, _ = store.list("resourcequotas", namespace)
    if not quotas:
        return
    name = str((pod.get("metadata") or {}).get("name") or "")
    try:
        asked = usage(pod)
    except ValueError as e:
        raise ApiError(422, "Invalid", f'Pod "{name}" is invalid: {e}', name=name, kind="pods") from e
    pods, _ = store.list("pods", namespace)
    used: dict[str, Fraction] = {}
    for other in pods:
        if (other.get("status") or {}).get("phase") not in ENDED:
            for key, value in usage(other).items():
                used[key] = used.get(key, ZERO) + value
    for quota in quotas:
        quota_name = quota["metadata"]["name"]
        hard = {str(k): parse(v) for k, v in ((quota.get("spec") or {}).get("hard") or {}).items()}
        unstated = [
            key
            for key in sorted(hard)
            if key.startswith(("requests.", "limits.")) and key != "requests.storage" and not states(pod, key)
        ]
        if unstated:
            containers = ",".join(c.get("name", "") for c in (pod.get("spec") or {}).get("containers") or [])
            missing = "; ".join(f"{key} for: {containers}" for key in unstated)
            raise ApiError(403, "Forbidden", f'pods "{name}" is forbidden: failed quota: {quota_name}: must specify '
                           f"{missing}", name=name, kind="pods")  # fmt: skip
        over = [key for key in sorted(hard) if used.get(key, ZERO) + asked.get(key, ZERO) > hard[key] and key in asked]
        if over:
            requested, taken, limited = (_listed(over, values) for values in (asked, used, hard))
            raise ApiError(
                403,
                "Forbidden",
                f'pods "{name}" is forbidden: exceeded quota: {quota_name}, requested: {requested}, used: {taken}, '
                f"limited: {limited}",
                name=name,
                kind="pods",
            )


def _listed(keys: list[str], values: dict[str, Fraction]) -> str:
    return ",".join(f"{key}={show(key, values.get(key, ZERO))}" for key in keys)
