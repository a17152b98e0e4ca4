"""Claims on Kubernetes: the lease that holds an instance, as JSON in its pod's ``sandbox.claim`` annotation.

The annotation lives on the API server, outside the sandbox's reach (the pod has no ServiceAccount token), and goes
with the pod. One LIST of the owner's pods reads every claim, as a wiped store's adoption needs.
"""

from __future__ import annotations

import json
from typing import Any

from sandbox.backends.base import LABEL_INSTANCE, encode_claim
from sandbox.backends.kubernetes.manifests import ANNOTATION_CLAIM, ANNOTATION_SAFE_TO_EVICT, LABEL_TENANT, tenant_scope


def claim_patch(claim: dict[str, Any]) -> dict[str, Any]:
    """The merge patch attaching ``claim`` to a pod (replacing the one it had), and labelling the pod with the
    claim's tenant (a warm pod was started for none). That label scopes only network ``internal`` (whose pods are
    never warm: ``service.pools``) and volumes (mounted at the pod's start), so relabelling opens nothing; it lets
    ``kubectl get pods -l sandbox.tenant-hash=...`` find every pod a tenant holds. A claimed pod holds a sandbox's
    state, which the cluster autoscaler must not evict (a warm pod was safe to evict)."""
    meta: dict[str, Any] = {"annotations": {ANNOTATION_CLAIM: encode_claim(claim), ANNOTATION_SAFE_TO_EVICT: "false"}}
    tenant = claim.get("tenant")
    if isinstance(tenant, str):
        meta["labels"] = {LABEL_TENANT: tenant_scope(tenant)}
    return {"metadata": meta}


def read_claims(pods: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Instance id -> claim, for each pod that carries a readable one."""
    found: dict[str, dict[str, Any]] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        instance = (meta.get("labels") or {}).get(LABEL_INSTANCE)
        raw = (meta.get("annotations") or {}).get(ANNOTATION_CLAIM)
        if not instance or not isinstance(raw, str):
            continue
        try:
            claim = json.loads(raw)
        except ValueError:
            continue
        if isinstance(claim, dict):
            found[instance] = claim
    return found
