"""Shared volumes on Kubernetes: one PersistentVolumeClaim per tenant and volume name.

A spec's volume ``data`` is the claim ``sbxvol-<tenant scope>-data`` (``manifests.volume_claim_name``: the scope is
``base.tenant_hash`` of the tenant), made at the first sandbox of that tenant that mounts it and kept until removed
by hand (volumes outlive sandboxes). Tenant A's ``data`` and tenant B's ``data`` are two claims: neither mounts the
other's.

**Claims from before the scoping** (``sbxvol-data``, mounted by every tenant that asked for ``data``) are refused,
not migrated: which tenant's data such a claim holds is not known (possibly several tenants'), and binding it to one
tenant's name means deleting the old claim, which loses the data unless its PersistentVolume is retained first, a
cluster-scoped step the control plane's Role does not (and should not) allow. The refusal says how to hand it to a
tenant (docs/kubernetes.md, "Tenancy and network policies") or to delete it. A tenant's own claim, once it exists,
is used without looking for an old one; only its first creation costs the extra read.
"""

from __future__ import annotations

import contextlib

from sandbox.aio import settled
from sandbox.backends.base import LABEL_OWNER
from sandbox.backends.kubernetes import manifests
from sandbox.backends.kubernetes.api import KubeApi, core_path
from sandbox.backends.kubernetes.config import KubernetesConfig
from sandbox.errors import FailedPrecondition, NotFound


async def ensure_volume(api: KubeApi, config: KubernetesConfig, volume: str, tenant: str | None) -> str:
    """The name of ``tenant``'s claim of ``volume``, made if missing; FailedPrecondition when an unscoped claim of
    that volume (from before tenant scoping) still exists."""
    claim = manifests.volume_claim_manifest(config, volume, tenant)
    path = core_path(config.namespace, "persistentvolumeclaims")
    name = claim["metadata"]["name"]
    try:
        found = await api.get(f"{path}/{name}", what=f"read volume claim {name}")
    except NotFound:
        found = None
    if found is not None:
        scope = (found["metadata"].get("labels") or {}).get(manifests.LABEL_TENANT)
        if scope != manifests.tenant_scope(tenant):  # an old unscoped volume whose name looks like this one's
            raise FailedPrecondition(
                f"volume claim {name} exists but is not {volume!r} of this tenant (its label "
                f"{manifests.LABEL_TENANT} is {scope!r}): an unscoped claim from before tenant scoping? Rename the "
                "volume, or move that claim's data as docs/kubernetes.md (Tenancy and network policies) says"
            )
        return name
    legacy = manifests.unscoped_volume_claim_name(volume)
    try:
        old = await api.get(f"{path}/{legacy}", what=f"read volume claim {legacy}")
    except NotFound:
        old = None
    old_labels = (old or {}).get("metadata", {}).get("labels") or {}
    if old is not None and old_labels.get(LABEL_OWNER) == config.owner and manifests.LABEL_VOLUME in old_labels:
        raise FailedPrecondition(unscoped_message(config, volume, legacy, name, old))
    with contextlib.suppress(FailedPrecondition):  # 409: made meanwhile by another start
        await settled(api.create(path, claim, what=f"create volume claim {name}"))
    return name


def unscoped_message(config: KubernetesConfig, volume: str, legacy: str, scoped: str, old: dict[str, object]) -> str:
    """Why a volume from before tenant scoping is refused, and the commands that hand it to one tenant."""
    spec = old.get("spec")
    pv = spec.get("volumeName") if isinstance(spec, dict) else None
    ns = config.namespace
    pv_name = pv if isinstance(pv, str) and pv else "<its PersistentVolume>"
    return (
        f"volume {volume!r} is the claim {legacy}, made before shared volumes were scoped by tenant: every tenant "
        f"that asked for {volume!r} mounted it, so it is handed to none now. To give its data to this tenant, bind "
        f"its volume to the tenant's claim {scoped}: kubectl patch pv {pv_name} -p "
        """'{"spec":{"persistentVolumeReclaimPolicy":"Retain"}}'; """
        f"kubectl -n {ns} delete pvc {legacy}; kubectl patch pv {pv_name} --type=json -p "
        """'[{"op":"remove","path":"/spec/claimRef"}]'; """
        f"then create the claim {scoped} with spec.volumeName {pv_name} (docs/kubernetes.md, Tenancy and network "
        f"policies). If its data is not needed: kubectl -n {ns} delete pvc {legacy}"
    )
