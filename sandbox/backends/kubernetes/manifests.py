"""What the backend asks the API server for, as pure functions: spec in, manifest (a plain dict) out.

Nothing here talks to a cluster, so every manifest is unit-tested and checked against the Kubernetes OpenAPI
schemas (``kubernetes-validate --strict``) for the versions the platform supports.

A sandbox is one Pod ``sbx-<owner>-<instance id>`` and one Secret ``<pod>-agent`` holding its agent's token (owned by
the pod, so the cluster removes it with the pod). What the pod spec does and why:

- **Identity and clean-up**: labels ``sandbox.managed-by``, ``sandbox.owner``, ``sandbox.instance``, ``sandbox.kind``,
  ``sandbox.pool`` (warm instances; the pool key made a valid label value, the exact key in an annotation) and
  ``sandbox.platform.io/network`` and ``sandbox.tenant-hash`` (what the NetworkPolicies select on: the chart's
  baseline ones on the network, the backend's per-tenant internal ones on both; netpolicy.py).
- **Confinement**: non-root (``sandbox_uid``), no privilege escalation, every capability dropped, seccomp
  RuntimeDefault, no ServiceAccount token, no service links; optional RuntimeClass (gVisor, Kata), node selector,
  tolerations and priority class. The root file system stays writable: the apps write to it.
- **Resources**: CPU and memory limits from the spec (memory requested in full; CPU requested at
  ``cpu_request_fraction`` of the limit). /dev/shm is a memory-backed emptyDir of ``shm_mb`` (it counts toward the
  memory limit). An android pod also asks for one ``android_kvm_resource`` (a device plugin's extended resource
  handing it the node's /dev/kvm; the scheduler then places it on a KVM node) and gets ``android_kvm_group`` as a
  supplemental group; without that resource in the config android is refused (``android_limits``). Not
  expressible per pod: the process limit (``pids``): set the kubelet's ``podPidsLimit`` on the
  sandbox nodes. The spec's ``disk_mb`` is the container's ``ephemeral-storage`` limit (its request defaults to it),
  which the kubelet enforces by evicting a pod that writes past it; without it none is set (the namespace's
  LimitRange, when there is one, applies).
- **/workspace and /home/sandbox** stay the image's own directories, not emptyDirs: an image may ship files there
  (an emptyDir would hide them), the desktop's home holds the image's config, and it is what runs on Docker. The
  cost: if the kubelet restarts the container, the new container starts from the image, so the backend reports a
  restarted container as failed (see ``status.describe``) rather than letting a sandbox go on without its files.
- **The agent** listens on TCP (``agent_port``) and serves only peers that present the token mounted read-only at
  ``/run/sandbox-secret/token``. The tcpSocket readiness probe only says the port is open (kubelet probes come from
  the node, which NetworkPolicies always allow); the real readiness gate is ``create`` calling the agent's health
  over the authenticated channel.
- ``restartPolicy: Always`` keeps the pod (its IP, node and emptyDirs) when the kubelet restarts a crashed
  container; ``shareProcessNamespace`` makes the pod's pause process PID 1, which reaps orphans (Docker's --init).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from sandbox.backends import android
from sandbox.backends.base import (
    INSTANCE_ENV,
    LABEL_INSTANCE,
    LABEL_KIND,
    LABEL_MANAGED_BY,
    LABEL_OWNER,
    LABEL_POOL,
    LABEL_TENANT_HASH,
    MANAGED_BY,
    tenant_hash,
)
from sandbox.backends.kubernetes.config import KubernetesConfig
from sandbox.errors import FailedPrecondition
from sandbox.models import SandboxSpec
from sandbox.protocol import LISTEN_ENV, TOKEN_FILE_ENV

POD_PREFIX = "sbx-"
SECRET_SUFFIX = "-agent"
VOLUME_PREFIX = "sbxvol-"
CONTAINER = "sandbox"
SECRET_MOUNT = "/run/sandbox-secret"
TOKEN_KEY = "token"
TOKEN_FILE = f"{SECRET_MOUNT}/{TOKEN_KEY}"
AGENT_PORT_NAME = "agent"

LABEL_NETWORK = "sandbox.platform.io/network"
"""On every pod: the spec's network (none, internal, egress); the chart's NetworkPolicies select on it."""
LABEL_TENANT = LABEL_TENANT_HASH
"""On every pod and volume claim: the tenant's scope (``tenant_scope``), which the per-tenant internal NetworkPolicy
selects on (netpolicy.py). The Docker backend's containers and networks carry the same label; the ``Sandbox``
objects' ``sandbox.platform.io/tenant`` holds the tenant itself, a different value, hence a different key."""
NO_TENANT = "none"
"""The scope of an instance started for no tenant (a warm pod before its claim, a caller outside the service): not
hexadecimal, so no tenant's hash can equal it."""
LABEL_VOLUME = "sandbox.volume"
ANNOTATION_CLAIM = "sandbox.claim"
"""The claim (JSON): which lease holds the instance; see ``Backend.set_claim``."""
ANNOTATION_POOL = "sandbox.pool"
"""The exact warm-pool key (the label holds a sanitized copy)."""
ANNOTATION_IMAGE = "sandbox.image"
"""The image the spec asked for: an image, or ``archive:<name>`` for a pod restored from a snapshot archive."""
ANNOTATION_USER_LABELS = "sandbox.user-labels"
"""The spec's free-form labels (JSON): keys and values need not be valid Kubernetes labels."""
ANNOTATION_SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
"""``"false"`` on a pod that serves a sandbox (its files and processes live in the pod: an eviction loses them),
``"true"`` on a warm pool's pod (it holds nothing yet; a claim checks it answers): the cluster autoscaler may move
warm pods to empty a node, never sandboxes, whatever its --skip-nodes-with-local-storage and
--skip-nodes-with-custom-controller-pods. The claim (claims.py) and ``controlled_by`` set it to "false"."""

ARCHIVE_PREFIX = "archive:"
"""An image reference naming a snapshot archive (see snapshots.py)."""

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def label_value(raw: str) -> str:
    """``raw`` as a valid label value: invalid characters become dots; too long or empty, a hash of it."""
    value = re.sub(r"[^A-Za-z0-9_.-]", ".", raw).strip("._-")
    if len(value) > 63 or not _LABEL_VALUE.match(value) or (raw and not value):
        value = "h-" + hashlib.sha256(raw.encode()).hexdigest()[:16]
    return value


def dns_name(raw: str, *, max_len: int = 63) -> str:
    """``raw`` as a DNS label; a hash suffix keeps names that had to change apart."""
    slug = re.sub(r"[^a-z0-9-]+", "-", raw.lower()).strip("-")
    if slug == raw and _DNS_NAME.match(slug) and len(slug) <= max_len:
        return slug
    suffix = hashlib.sha256(raw.encode()).hexdigest()[:8]
    return f"{slug[: max_len - 9].rstrip('-')}-{suffix}".lstrip("-") if slug else f"h-{suffix}"


def pod_name(owner: str, instance_id: str) -> str:
    return f"{POD_PREFIX}{owner}-{instance_id}"


def secret_name(pod: str) -> str:
    return f"{pod}{SECRET_SUFFIX}"


def tenant_scope(tenant: str | None) -> str:
    """The label value naming ``tenant`` on what is made for it: ``base.tenant_hash`` (12 hex digits), or
    ``NO_TENANT``."""
    return NO_TENANT if tenant is None else tenant_hash(tenant)


def volume_claim_name(volume: str, tenant: str | None) -> str:
    """The PVC of ``tenant``'s shared volume ``volume``: ``sbxvol-<tenant scope>-<volume>`` (a DNS label), so two
    tenants' volumes of one name are two claims."""
    prefix = f"{VOLUME_PREFIX}{tenant_scope(tenant)}-"
    return prefix + dns_name(volume, max_len=63 - len(prefix))


def unscoped_volume_claim_name(volume: str) -> str:
    """The claim name of ``volume`` before volumes were scoped by tenant (``sbxvol-<volume>``): such a claim is
    refused, with how to migrate it (volumes.py)."""
    return VOLUME_PREFIX + dns_name(volume, max_len=63 - len(VOLUME_PREFIX))


def owner_labels(config: KubernetesConfig) -> dict[str, str]:
    return {LABEL_MANAGED_BY: MANAGED_BY, LABEL_OWNER: config.owner}


def owner_selector(config: KubernetesConfig) -> str:
    """The labelSelector of every object this control plane owns."""
    return ",".join(f"{k}={v}" for k, v in owner_labels(config).items())


def kind_image(config: KubernetesConfig, kind: str) -> str:
    return config.images.get(kind) or f"{config.image_prefix}/{kind}:latest"


def cpu_quantity(cpus: float) -> str:
    return f"{max(1, round(cpus * 1000))}m"


def android_limits(config: KubernetesConfig, spec: SandboxSpec) -> dict[str, str]:
    """The extended resource an android pod asks for (the node's KVM through a device plugin); FailedPrecondition
    when the cluster has none configured, or the spec's memory cannot hold the emulator."""
    if config.android_kvm_resource is None:
        raise FailedPrecondition(
            "android sandboxes need KVM on the node, through a device plugin (e.g. KubeVirt's "
            "devices.kubevirt.io/kvm): this backend's android_kvm_resource is not set, so the cluster is taken to "
            "have none"
        )
    android.check_resources(spec)
    return {config.android_kvm_resource: "1"}


def pod_manifest(
    config: KubernetesConfig,
    *,
    instance_id: str,
    spec: SandboxSpec,
    image: str,
    pool: str | None = None,
    tenant: str | None = None,
) -> dict[str, Any]:
    """The Pod of one instance. ``image``: what the container runs (for a spec restored from an archive, the kind's
    image; ``spec.image`` then names the archive and is kept in an annotation). ``tenant``: whose it is (its label
    scopes network ``internal`` and its volumes)."""
    name = pod_name(config.owner, instance_id)
    r, screen, uid = spec.resources, spec.screen, config.sandbox_uid
    labels = {
        **owner_labels(config),
        LABEL_INSTANCE: instance_id,
        LABEL_KIND: spec.kind.value,
        LABEL_NETWORK: spec.network.value,
        LABEL_TENANT: tenant_scope(tenant),
        **({LABEL_POOL: label_value(pool)} if pool else {}),
    }
    annotations = {ANNOTATION_IMAGE: spec.image or image, ANNOTATION_SAFE_TO_EVICT: "true" if pool else "false"}
    if pool:
        annotations[ANNOTATION_POOL] = pool
    if spec.labels:
        annotations[ANNOTATION_USER_LABELS] = json.dumps(spec.labels, separators=(",", ":"), sort_keys=True)
    env = {
        **spec.env,
        "SANDBOX_KIND": spec.kind.value,
        "SANDBOX_SCREEN": f"{screen.width}x{screen.height}x{screen.depth}",
        INSTANCE_ENV: instance_id,
        LISTEN_ENV: f"0.0.0.0:{config.agent_port}",
        TOKEN_FILE_ENV: TOKEN_FILE,
        **(android.environment(spec) if android.is_android(spec) else {}),
    }
    devices = android_limits(config, spec) if android.is_android(spec) else {}
    disk = {} if r.disk_mb is None else {"ephemeral-storage": f"{r.disk_mb}Mi"}
    mounts: list[dict[str, Any]] = [
        {"name": "agent-secret", "mountPath": SECRET_MOUNT, "readOnly": True},
        {"name": "shm", "mountPath": "/dev/shm"},
    ]
    volumes: list[dict[str, Any]] = [
        {"name": "agent-secret", "secret": {"secretName": secret_name(name), "defaultMode": 0o440}},
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{r.shm_mb}Mi"}},
    ]
    for i, mount in enumerate(spec.volumes):
        claim = {"claimName": volume_claim_name(mount.name, tenant), "readOnly": mount.read_only}
        volumes.append({"name": f"vol-{i}", "persistentVolumeClaim": claim})
        mounts.append({"name": f"vol-{i}", "mountPath": mount.path, "readOnly": mount.read_only})
    container = {
        "name": CONTAINER,
        "image": image,
        "imagePullPolicy": config.image_pull_policy,
        "env": [{"name": k, "value": v} for k, v in env.items()],
        "ports": [{"name": AGENT_PORT_NAME, "containerPort": config.agent_port, "protocol": "TCP"}],
        "resources": {
            "requests": {"cpu": cpu_quantity(r.cpus * config.cpu_request_fraction), "memory": f"{r.memory_mb}Mi"},
            "limits": {"cpu": cpu_quantity(r.cpus), "memory": f"{r.memory_mb}Mi", **disk, **devices},
        },
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": uid,
            "runAsGroup": uid,
            "privileged": False,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
            "readOnlyRootFilesystem": False,
        },
        "readinessProbe": {
            "tcpSocket": {"port": AGENT_PORT_NAME},
            "periodSeconds": 10,
            "timeoutSeconds": 2,
            "failureThreshold": 3,
        },
        "volumeMounts": mounts,
    }
    pod_spec: dict[str, Any] = {
        "hostname": "sandbox",
        "restartPolicy": "Always",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "shareProcessNamespace": True,
        "terminationGracePeriodSeconds": 10,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": uid,
            "runAsGroup": uid,
            "fsGroup": uid,
            "fsGroupChangePolicy": "OnRootMismatch",
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": volumes,
    }
    if devices and config.android_kvm_group is not None:
        pod_spec["securityContext"]["supplementalGroups"] = [config.android_kvm_group]
    if config.runtime_class:
        pod_spec["runtimeClassName"] = config.runtime_class
    if config.node_selector:
        pod_spec["nodeSelector"] = dict(config.node_selector)
    if config.tolerations:
        pod_spec["tolerations"] = [t.manifest() for t in config.tolerations]
    if config.priority_class:
        pod_spec["priorityClassName"] = config.priority_class
    if config.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": s} for s in config.image_pull_secrets]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": config.namespace, "labels": labels, "annotations": annotations},
        "spec": pod_spec,
    }


def secret_manifest(config: KubernetesConfig, *, instance_id: str, token: str) -> dict[str, Any]:
    """The Secret holding an instance's agent token (immutable: a new token means a new instance)."""
    labels = {**owner_labels(config), LABEL_INSTANCE: instance_id}
    name = secret_name(pod_name(config.owner, instance_id))
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": config.namespace, "labels": labels},
        "type": "Opaque",
        "immutable": True,
        "stringData": {TOKEN_KEY: token},
    }


def owned_by_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """A merge patch making an object a dependent of ``pod``: the cluster's garbage collector removes it with it."""
    meta = pod["metadata"]
    reference = {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}
    return {"metadata": {"ownerReferences": [reference]}}


def controlled_by(pod: dict[str, Any], owner: dict[str, Any]) -> dict[str, Any] | None:
    """The merge patch making ``pod`` a dependent of ``owner`` (an ownerReference: apiVersion, kind, name, uid), as
    its controller that blocks the owner's foreground deletion, and marking it not safe to evict; None when it is
    so already. Other owners the pod names stay; a previous controller is replaced."""
    reference = {**owner, "controller": True, "blockOwnerDeletion": True}
    meta = pod.get("metadata") or {}
    references = meta.get("ownerReferences") or []
    if reference in references and (meta.get("annotations") or {}).get(ANNOTATION_SAFE_TO_EVICT) == "false":
        return None
    kept = [r for r in references if not r.get("controller") and r.get("uid") != owner["uid"]]
    return {"metadata": {"ownerReferences": [*kept, reference], "annotations": {ANNOTATION_SAFE_TO_EVICT: "false"}}}


def volume_claim_manifest(config: KubernetesConfig, volume: str, tenant: str | None) -> dict[str, Any]:
    """The PVC behind ``tenant``'s shared volume (kept until removed by hand: volumes outlive sandboxes, as on
    Docker)."""
    spec: dict[str, Any] = {
        "accessModes": [config.volume_access_mode],
        "resources": {"requests": {"storage": config.volume_size}},
    }
    if config.storage_class:
        spec["storageClassName"] = config.storage_class
    labels = {**owner_labels(config), LABEL_VOLUME: label_value(volume), LABEL_TENANT: tenant_scope(tenant)}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": volume_claim_name(volume, tenant), "namespace": config.namespace, "labels": labels},
        "spec": spec,
    }
