"""The Kubernetes backend's settings (no kubernetes import here: the server reads them before choosing a backend).

The keys match what the Helm chart and the kustomize base render into ``server.json`` (``images``,
``image_pull_policy``, ``volume_access_mode`` ...), so a rendered config validates here as it is.

Shared volumes are PersistentVolumeClaims of ``storage_class`` with ``volume_access_mode`` (ReadWriteMany by
default: sandboxes on any node mount the same volume). Where the class cannot provide ReadWriteMany (most block
storage: EBS, GCE PD, Ceph RBD, local-path), the claim stays Pending, the pods that mount it stay unscheduled, and
``create`` fails after ``schedule_timeout_s`` with the scheduler's reason in its message. Choose a class that has it
(NFS, CephFS, EFS, Filestore, Longhorn RWX), or set ``volume_access_mode: ReadWriteOnce``: then every pod sharing a
volume must run on the node that mounted it first; pods placed elsewhere stay in ContainerCreating (the attach
fails with a Multi-Attach error) and ``create`` fails after ``ready_timeout_s``, with the kubelet's reason.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

DNS_LABEL = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"
QUANTITY = r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei)?$"


class Toleration(BaseModel):
    """One entry of a pod's ``tolerations``, in the Kubernetes shape (camelCase keys)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    key: str | None = Field(None, max_length=316, description="The taint key tolerated; empty with Exists: all.")
    operator: Literal["Exists", "Equal"] = Field("Equal", description="Equal: key and value match; Exists: key.")
    value: str | None = Field(None, max_length=63, description="The taint value (with Equal).")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        None, description="The taint effect tolerated; all effects when omitted."
    )
    toleration_seconds: int | None = Field(
        None, alias="tolerationSeconds", description="With NoExecute: how long the pod stays once tainted."
    )

    def manifest(self) -> dict[str, object]:
        return self.model_dump(by_alias=True, exclude_none=True)


class KubernetesConfig(BaseModel):
    """Instances as pods in one namespace of a Kubernetes cluster."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["kubernetes"] = Field("kubernetes", description="Selects this backend in server.json.")
    namespace: str = Field("sandboxes", pattern=DNS_LABEL, description="The namespace the sandbox pods live in.")
    kubeconfig: str | None = Field(
        None, description="Path of a kubeconfig file; None: the in-cluster ServiceAccount (the control plane's pod)."
    )
    context: str | None = Field(None, description="Context of the kubeconfig; None: its current context.")
    owner: str = Field(
        "default",
        pattern=r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$",
        description="Value of the sandbox.owner label: this control plane's pods, and only them, are its own. "
        "Stricter than the Docker backend's (a DNS label of at most 40): it is part of pod and secret names.",
    )
    image_prefix: str = Field("sandbox", description="Images are <prefix>/<kind>:latest unless named otherwise.")
    images: dict[str, str] = Field(
        default_factory=dict, description="Image per kind (terminal, desktop, browser); wins over image_prefix."
    )
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        "IfNotPresent", description="The pods' imagePullPolicy."
    )
    image_pull_secrets: list[str] = Field(
        default_factory=list, description="Names of docker-registry Secrets in the namespace, for private registries."
    )
    agent_port: int = Field(7000, ge=1, le=65535, description="TCP port the agent listens on inside the pod.")
    ready_timeout_s: float = Field(
        180.0,
        gt=0,
        description="How long a new pod may take, once the scheduler has placed it, to pull its image and become "
        "healthy.",
    )
    schedule_timeout_s: float = Field(
        300.0,
        gt=0,
        description="How long a new pod may wait for the scheduler to place it (Pending, PodScheduled False: no node "
        "has room, or none matches): the create logs the scheduler's reason meanwhile, and then fails with "
        "CapacityExhausted quoting it, the pod deleted. Long enough for a cluster autoscaler to add a node.",
    )
    api_timeout_s: float = Field(30.0, gt=0, description="Deadline of one call to the API server.")
    api_qps: float = Field(
        200.0,
        ge=0,
        description="Calls a second this replica makes to the API server at most, on average (a token bucket; "
        "0: no limit). A 429 answer is retried after its Retry-After either way.",
    )
    api_burst: int = Field(400, ge=1, description="Calls at once above api_qps (the bucket's size).")
    runtime_class: str | None = Field(
        None, description="RuntimeClass of the pods (e.g. gvisor, kata); the cluster's default runtime if None."
    )
    node_selector: dict[str, str] = Field(default_factory=dict, description="The pods' nodeSelector.")
    tolerations: list[Toleration] = Field(default_factory=list, description="The pods' tolerations.")
    priority_class: str | None = Field(None, description="The pods' priorityClassName.")
    cpu_request_fraction: float = Field(
        1.0,
        gt=0,
        le=1,
        description="CPU request = limit x this. 1: requests equal limits (Guaranteed QoS, the last to be evicted); "
        "lower packs more idle sandboxes per node. Memory is always requested in full (not compressible).",
    )
    storage_class: str | None = Field(
        None, description="StorageClass of shared volumes (PVCs); the cluster's default class if None."
    )
    volume_access_mode: Literal["ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"] = Field(
        "ReadWriteMany",
        description="Access mode of shared volumes. Without RWX in the class, see the module docstring.",
    )
    volume_size: str = Field("1Gi", pattern=QUANTITY, description="Size requested for a new shared volume.")
    snapshot_dir: str = Field(
        "/var/lib/sandbox/snapshots",
        description="Directory on the control plane (a PVC, ReadWriteMany when several replicas run) where "
        "snapshot archives and their records live.",
    )
    sandbox_uid: int = Field(1000, ge=1, description="User and group the images run as (runAsUser, fsGroup).")
    control_plane_labels: dict[str, str] = Field(
        default_factory=lambda: {"app.kubernetes.io/component": "control-plane"},
        description="Labels of the control plane's pods. Unused since the baseline NetworkPolicies (which admit the "
        "control plane) are the chart's; accepted so that existing server.json files stay valid.",
    )
    control_plane_namespace: str | None = Field(
        None,
        pattern=DNS_LABEL,
        description="Namespace of the control plane's pods. Unused since the baseline NetworkPolicies are the "
        "chart's; accepted so that existing server.json files stay valid.",
    )
    manage_network_policies: bool = Field(
        True,
        description="Create one NetworkPolicy per tenant with internal sandboxes: its internal pods reach each other "
        "and no other tenant's (netpolicy.py). The baseline policies (default deny, egress, the control plane's "
        "ingress) are the chart's, not the backend's. Off: internal sandboxes reach nothing but the control plane "
        "(under the chart's default deny) unless the cluster's admin allows more.",
    )
    internal_dns: bool = Field(
        False,
        description="Let internal sandboxes resolve names through the cluster DNS (dns_namespace, dns_pod_labels) in "
        "their tenant's policy. Off: they reach their peers by IP only.",
    )
    dns_namespace: str = Field("kube-system", pattern=DNS_LABEL, description="Namespace of the cluster DNS pods.")
    dns_pod_labels: dict[str, str] = Field(
        default_factory=lambda: {"k8s-app": "kube-dns"}, description="Labels of the cluster DNS pods."
    )
    check_network_policies: bool = Field(
        True,
        description="At start, check once in the background whether the cluster's CNI enforces NetworkPolicies "
        "(two short-lived probe pods; cni_check.py): the result is logged and kept in network_policy_check. Never "
        "blocks the start. Off where no probe pod may run (the fake API server: its pods share one network).",
    )
    delete_grace_s: int = Field(
        5,
        ge=1,
        le=300,
        description="Grace period of a pod's delete (gracePeriodSeconds): the kubelet stops the container, then the "
        "API server removes the pod. Never 0: a forced delete removes the object at once, and a pod on a node the "
        "API cannot reach would run on, untracked.",
    )
    delete_wait_s: float = Field(
        30.0,
        ge=0,
        description="How long a destroy waits, after the grace period, for the API server to say the pod is gone; "
        "past it the pod is left terminating (listed, being deleted) and the destroy returns.",
    )
    android_kvm_resource: str | None = Field(
        "devices.kubevirt.io/kvm",
        description="Extended resource through which a device plugin hands a node's /dev/kvm to a pod (KubeVirt's "
        "by default); android pods ask for one in their limits. None: the cluster has no KVM plugin, and android "
        "sandboxes are refused.",
    )
    android_kvm_group: int | None = Field(
        None,
        ge=1,
        description="Group owning /dev/kvm on the nodes, added to android pods' supplementalGroups, when the device "
        "is not open to every user (0660 root:kvm); None where it is 0666 or the runtime sets device ownership from "
        "the security context.",
    )
