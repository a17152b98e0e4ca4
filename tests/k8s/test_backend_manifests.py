"""The Kubernetes backend's pure parts: the manifests it sends (checked against the Kubernetes OpenAPI schemas with
kubernetes-validate --strict, for every version it claims), how it reads a pod's status, its error table, its
config and the factory's choice. No server, no container."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import aiohttp
import kubernetes_validate
import pytest
from kubernetes_asyncio.client.exceptions import ApiException
from pydantic import TypeAdapter, ValidationError

from sandbox.backends.base import LABEL_POOL, LABEL_USER_PREFIX, RuntimeState, tenant_hash
from sandbox.backends.docker.config import DockerConfig
from sandbox.backends.factory import BackendConfig, make_backend
from sandbox.backends.kubernetes import cni_check, manifests, netpolicy, status
from sandbox.backends.kubernetes.backend import KubernetesBackend
from sandbox.backends.kubernetes.config import KubernetesConfig
from sandbox.backends.kubernetes.errors import STATUS_TABLE, for_status, translate
from sandbox.errors import BackendError, FailedPrecondition, InvalidArgument, NotFound, Unavailable
from sandbox.models import SandboxSpec
from sandbox.server import ServerSettings

VERSIONS = ("1.29", "1.31", "1.33")
ROOT = Path(__file__).resolve().parents[2]
INSTANCE = "in-term-0123456789ab"
POOL = "pool:terminal:0123456789abcdef"

PLAIN = KubernetesConfig(owner="prod")
TUNED = KubernetesConfig.model_validate(
    {
        "owner": "prod",
        "runtime_class": "gvisor",
        "node_selector": {"sandbox.platform.io/pool": "sandboxes", "kubernetes.io/arch": "amd64"},
        "tolerations": [
            {"key": "sandbox.platform.io/dedicated", "operator": "Equal", "value": "sandboxes", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 30},
        ],
        "priority_class": "sandbox-low",
        "image_pull_secrets": ["registry-cred"],
        "cpu_request_fraction": 0.25,
        "storage_class": "nfs-client",
    }
)  # fmt: skip


def validate(obj: dict[str, Any], version: str) -> None:
    kubernetes_validate.validate(obj, version, strict=True)


TENANT = "team-a"


def pod(kind: str = "terminal", config: KubernetesConfig = PLAIN, **spec: Any) -> dict[str, Any]:
    full = SandboxSpec.model_validate({"kind": kind, **spec})
    image = manifests.kind_image(config, kind)
    return manifests.pod_manifest(config, instance_id=INSTANCE, spec=full, image=image, pool=POOL, tenant=TENANT)


TUNED_SPEC = {
    "network": "egress",
    "volumes": [{"name": "Data_Set.v1", "path": "/workspace/data", "read_only": True}],
    "labels": {"run": "exp 7", "weird key!": "x" * 100},
    "resources": {"cpus": 2.5, "memory_mb": 4096, "shm_mb": 512},
    "env": {"FOO": "bar"},
}

ANDROID_SPEC = {"resources": {"cpus": 4, "memory_mb": 4096}}
KVM_GROUP = KubernetesConfig.model_validate({"owner": "prod", "android_kvm_group": 36})

MANIFESTS = {
    **{f"pod {kind}": pod(kind) for kind in ("terminal", "desktop", "browser")},
    "pod android": pod("android", **ANDROID_SPEC),
    "pod with a disk limit": pod("terminal", resources={"disk_mb": 10240}),
    "pod android with the kvm group": pod("android", KVM_GROUP, **ANDROID_SPEC),
    "pod with runtime class, node selector, tolerations, egress, a volume": pod("desktop", TUNED, **TUNED_SPEC),
    "secret": manifests.secret_manifest(PLAIN, instance_id=INSTANCE, token="t0ken"),
    "volume claim": manifests.volume_claim_manifest(TUNED, "Data_Set.v1", TENANT),
    "internal network policy": netpolicy.internal_policy(PLAIN, TENANT),
    "cni check probe pod": cni_check.probe_pod(PLAIN, "client", "0a1b"),
    "internal network policy with DNS": netpolicy.internal_policy(
        KubernetesConfig(owner="prod", internal_dns=True), None
    ),
}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", sorted(MANIFESTS))
def test_every_manifest_passes_strict_schema_validation(name: str, version: str) -> None:
    validate(MANIFESTS[name], version)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_validator_rejects_a_broken_pod(version: str) -> None:
    """The check above can fail: an unknown field, a wrong type, a missing required field are each refused."""
    misspelt = copy.deepcopy(MANIFESTS["pod terminal"])
    misspelt["spec"]["containers"][0]["securityContext"]["runAsNonRot"] = True
    wrong_type = copy.deepcopy(MANIFESTS["pod terminal"])
    wrong_type["spec"]["containers"][0]["ports"][0]["containerPort"] = "seven thousand"
    no_name = copy.deepcopy(MANIFESTS["pod terminal"])
    del no_name["spec"]["containers"][0]["name"]
    for broken in (misspelt, wrong_type, no_name):
        with pytest.raises(kubernetes_validate.ValidationError):
            validate(broken, version)


def test_the_pod_is_confined() -> None:
    manifest = MANIFESTS["pod terminal"]
    spec = manifest["spec"]
    (container,) = spec["containers"]
    sc = container["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 1000 and sc["runAsGroup"] == 1000
    assert sc["allowPrivilegeEscalation"] is False and sc["privileged"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert sc["readOnlyRootFilesystem"] is False
    assert spec["automountServiceAccountToken"] is False and spec["enableServiceLinks"] is False
    assert spec["securityContext"]["fsGroup"] == 1000 and spec["securityContext"]["runAsNonRoot"] is True
    assert spec["restartPolicy"] == "Always"
    assert "runtimeClassName" not in spec and "nodeSelector" not in spec and "tolerations" not in spec


def test_the_pod_carries_the_agent_setup_resources_and_identity() -> None:
    manifest = MANIFESTS["pod terminal"]
    meta, spec = manifest["metadata"], manifest["spec"]
    (container,) = spec["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["SANDBOX_KIND"] == "terminal" and env["SANDBOX_SCREEN"] == "1280x800x24"
    assert env["SANDBOX_INSTANCE_ID"] == INSTANCE
    assert env["SANDBOX_AGENT_LISTEN"] == "0.0.0.0:7000"
    assert env["SANDBOX_AGENT_TOKEN_FILE"] == "/run/sandbox-secret/token"
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/run/sandbox-secret"]["readOnly"] is True
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["agent-secret"]["secret"]["secretName"] == f"sbx-prod-{INSTANCE}-agent"
    assert volumes["shm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "256Mi"}
    assert "/workspace" not in mounts  # the image's own /workspace (see manifests.py)
    assert container["resources"] == {
        "requests": {"cpu": "1000m", "memory": "2048Mi"},
        "limits": {"cpu": "1000m", "memory": "2048Mi"},
    }
    assert container["readinessProbe"]["tcpSocket"] == {"port": "agent"}
    assert meta["name"] == f"sbx-prod-{INSTANCE}"
    assert meta["labels"] == {
        "sandbox.managed-by": "sandbox",
        "sandbox.owner": "prod",
        "sandbox.instance": INSTANCE,
        "sandbox.kind": "terminal",
        "sandbox.platform.io/network": "none",
        "sandbox.tenant-hash": tenant_hash(TENANT),
        "sandbox.pool": "pool.terminal.0123456789abcdef",
    }
    assert meta["annotations"]["sandbox.pool"] == POOL  # the exact key, which no label value can hold


def test_a_tuned_pod_takes_the_cluster_settings_and_the_spec() -> None:
    manifest = MANIFESTS["pod with runtime class, node selector, tolerations, egress, a volume"]
    spec = manifest["spec"]
    (container,) = spec["containers"]
    assert spec["runtimeClassName"] == "gvisor" and spec["priorityClassName"] == "sandbox-low"
    assert spec["nodeSelector"]["kubernetes.io/arch"] == "amd64"
    assert spec["tolerations"][1] == {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 30,
    }
    assert spec["imagePullSecrets"] == [{"name": "registry-cred"}]
    assert manifest["metadata"]["labels"]["sandbox.platform.io/network"] == "egress"
    assert container["resources"]["requests"] == {"cpu": "625m", "memory": "4096Mi"}
    assert container["resources"]["limits"] == {"cpu": "2500m", "memory": "4096Mi"}
    assert {"name": "FOO", "value": "bar"} in container["env"]
    claim = next(v for v in spec["volumes"] if "persistentVolumeClaim" in v)["persistentVolumeClaim"]
    assert claim["readOnly"] is True and claim["claimName"] == manifests.volume_claim_name("Data_Set.v1", TENANT)
    assert {"name": "vol-0", "mountPath": "/workspace/data", "readOnly": True} in container["volumeMounts"]
    assert json.loads(manifest["metadata"]["annotations"]["sandbox.user-labels"])["weird key!"] == "x" * 100
    described = status.describe(manifest)
    assert described.labels[LABEL_USER_PREFIX + "weird key!"] == "x" * 100
    assert described.labels[LABEL_POOL] == POOL


def test_an_android_pod_asks_for_kvm_through_the_device_plugin() -> None:
    manifest = MANIFESTS["pod android"]
    (container,) = manifest["spec"]["containers"]
    assert container["resources"] == {
        "requests": {"cpu": "4000m", "memory": "4096Mi"},  # the extended resource's request defaults to its limit
        "limits": {"cpu": "4000m", "memory": "4096Mi", "devices.kubevirt.io/kvm": "1"},
    }
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["SANDBOX_KIND"] == "android" and env["SANDBOX_ANDROID_SCREEN"] == "1080x1920x24"
    assert container["image"] == "sandbox/android:latest"
    sc = container["securityContext"]  # confined as the others: KVM is an ioctl on the device, no capability
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["privileged"] is False
    assert "supplementalGroups" not in manifest["spec"]["securityContext"]
    grouped = MANIFESTS["pod android with the kvm group"]["spec"]
    assert grouped["securityContext"]["supplementalGroups"] == [36]
    for kind in ("terminal", "desktop", "browser"):  # no device, no group for the other kinds
        other = pod(kind, KVM_GROUP)
        assert "devices.kubevirt.io/kvm" not in other["spec"]["containers"][0]["resources"]["limits"]
        assert "supplementalGroups" not in other["spec"]["securityContext"]


def test_the_kvm_resource_is_a_setting_and_none_refuses_android() -> None:
    custom = KubernetesConfig(owner="prod", android_kvm_resource="example.com/kvm")
    limits = pod("android", custom, **ANDROID_SPEC)["spec"]["containers"][0]["resources"]["limits"]
    assert limits["example.com/kvm"] == "1" and "devices.kubevirt.io/kvm" not in limits
    with pytest.raises(FailedPrecondition, match="android sandboxes need KVM on the node"):
        pod("android", KubernetesConfig(owner="prod", android_kvm_resource=None), **ANDROID_SPEC)
    with pytest.raises(FailedPrecondition, match=r"resources\.memory_mb >= 3072"):
        pod("android", resources={"memory_mb": 2048})  # the common default cannot hold the emulator
    limits = pod("android", custom)["spec"]["containers"][0]["resources"]["limits"]
    assert limits["memory"] == "4096Mi"  # an android spec that names no memory gets the emulator's
    assert "devices.kubevirt.io/kvm" not in json.dumps(pod("terminal", KubernetesConfig(android_kvm_resource=None)))


def test_the_disk_limit_is_the_containers_ephemeral_storage_limit() -> None:
    """The kubelet enforces it (it evicts a pod writing past it); no limit asked, none set."""
    (container,) = MANIFESTS["pod with a disk limit"]["spec"]["containers"]
    assert container["resources"]["limits"] == {"cpu": "1000m", "memory": "2048Mi", "ephemeral-storage": "10240Mi"}
    assert "ephemeral-storage" not in container["resources"]["requests"]  # defaults to the limit
    (plain,) = MANIFESTS["pod terminal"]["spec"]["containers"]
    assert "ephemeral-storage" not in plain["resources"]["limits"]


def test_volume_claims_ask_for_the_configured_class_and_mode() -> None:
    claim = MANIFESTS["volume claim"]
    assert claim["spec"] == {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": "1Gi"}},
        "storageClassName": "nfs-client",
    }
    scope = tenant_hash(TENANT)
    assert re.fullmatch(rf"sbxvol-{scope}-data-set-v1-[0-9a-f]{{8}}", claim["metadata"]["name"])
    assert claim["metadata"]["labels"]["sandbox.tenant-hash"] == scope
    assert manifests.volume_claim_name("data", TENANT) == f"sbxvol-{scope}-data"
    assert manifests.volume_claim_name("data", "team-b") != manifests.volume_claim_name("data", TENANT)
    assert manifests.volume_claim_name("data", None) == "sbxvol-none-data"
    assert manifests.unscoped_volume_claim_name("data") == "sbxvol-data"
    long = manifests.volume_claim_name("v" * 80, TENANT)
    assert len(long) <= 63 and long.startswith(f"sbxvol-{scope}-")


def test_the_backend_makes_no_baseline_policy_only_the_tenants_internal_one() -> None:
    """The chart renders the baseline (default deny, egress, the control plane's ingress); the backend's one policy
    per tenant selects that tenant's internal pods and lets them reach each other alone."""
    assert not hasattr(manifests, "network_policies")
    policy = netpolicy.internal_policy(PLAIN, TENANT)
    spec, scope = policy["spec"], tenant_hash(TENANT)
    mine = {
        "sandbox.managed-by": "sandbox",
        "sandbox.owner": "prod",
        "sandbox.platform.io/network": "internal",
        "sandbox.tenant-hash": scope,
    }
    assert policy["metadata"]["name"] == f"sbx-prod-internal-{scope}"
    assert spec["podSelector"] == {"matchLabels": mine}
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec["ingress"] == [{"from": [{"podSelector": {"matchLabels": mine}}]}]
    assert spec["egress"] == [{"to": [{"podSelector": {"matchLabels": mine}}]}]  # no DNS unless configured
    dns = netpolicy.internal_policy(KubernetesConfig(owner="prod", internal_dns=True), TENANT)["spec"]["egress"][1]
    assert dns["ports"] == [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
    assert dns["to"][0]["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}
    unscoped = netpolicy.internal_policy(PLAIN, None)
    assert unscoped["spec"]["podSelector"]["matchLabels"]["sandbox.tenant-hash"] == "none"


@pytest.mark.parametrize(
    "raw", ["pool:terminal:0123456789abcdef", "", "a" * 80, "-x-", "ok.value_1", "snap:alice/task-7", "::"]
)
def test_label_values_are_always_valid(raw: str) -> None:
    value = manifests.label_value(raw)
    assert len(value) <= 63 and re.fullmatch(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?", value)
    assert (value == "") == (raw == "")
    assert manifests.label_value(raw) == value


# --------------------------------------------------------------------------------------------- pod status


def _pod(phase: str, container: dict[str, Any] | None = None, **status_fields: Any) -> dict[str, Any]:
    pod_status: dict[str, Any] = {"phase": phase, **status_fields}
    if container is not None:
        pod_status["containerStatuses"] = [{"name": "sandbox", "restartCount": 0, **container}]
    return {
        "metadata": {"name": "p", "labels": {"sandbox.instance": "in-x", "sandbox.kind": "desktop"}},
        "status": pod_status,
    }


RUNNING = {"state": {"running": {}}}
CASES: list[tuple[str, dict[str, Any], RuntimeState, int | None, str]] = [
    ("pending", _pod("Pending"), RuntimeState.STARTING, None, "Pending"),
    ("running", _pod("Running", RUNNING, podIP="10.1.2.3"), RuntimeState.RUNNING, None, "running"),
    ("no status yet", _pod("Running", {}), RuntimeState.STARTING, None, ""),
    ("died", _pod("Running", {"state": {"terminated": {"exitCode": 3}}}), RuntimeState.EXITED, 3, "exited"),
    (
        "crash loop",
        _pod("Running", {"restartCount": 2, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                         "lastState": {"terminated": {"exitCode": 137}}}),
        RuntimeState.EXITED, 137, "CrashLoopBackOff",
    ),
    (
        "restarted by the kubelet",
        _pod("Running", {**RUNNING, "restartCount": 1, "lastState": {"terminated": {"exitCode": 1}}}),
        RuntimeState.EXITED, 1, "files",
    ),
    ("evicted", _pod("Failed", reason="Evicted", message="low on memory"), RuntimeState.EXITED, None, "evicted"),
    ("node lost", _pod("Failed", reason="NodeLost"), RuntimeState.EXITED, None, "node was lost"),
    ("node unknown", _pod("Unknown", RUNNING), RuntimeState.EXITED, None, "node was lost"),
    ("succeeded", _pod("Succeeded", {"state": {"terminated": {"exitCode": 0}}}), RuntimeState.EXITED, 0, "Succeeded"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "pod_doc", "state", "code", "detail"), CASES, ids=[c[0] for c in CASES])
def test_pod_status_maps_onto_engine_states(
    case: str, pod_doc: dict[str, Any], state: RuntimeState, code: int | None, detail: str
) -> None:
    judged, exit_code, said = status.judge(pod_doc)
    assert (judged, exit_code) == (state, code)
    assert detail in said
    described = status.describe(pod_doc)
    assert described.state is state and described.id == "in-x" and described.kind.value == "desktop"


def test_a_running_pod_not_ready_is_running_but_doubted() -> None:
    """A lost node's pods stay Running as last reported, their Ready condition False: running, and ``serving``
    False, which a health round probes first (a new pod before its first readiness probe is doubted too: one probe
    more, which passes)."""
    lost = _pod("Running", RUNNING, podIP="10.0.0.1", conditions=[{"type": "Ready", "status": "False"}])
    ready = _pod("Running", RUNNING, podIP="10.0.0.1", conditions=[{"type": "Ready", "status": "True"}])
    assert status.describe(lost).state is RuntimeState.RUNNING and not status.describe(lost).serving
    assert status.describe(ready).serving and status.describe(_pod("Running", RUNNING)).serving
    exited = _pod(
        "Failed", {"state": {"terminated": {"exitCode": 1}}}, conditions=[{"type": "Ready", "status": "False"}]
    )
    assert status.describe(exited).state is RuntimeState.EXITED and status.describe(exited).serving


def test_a_pod_being_deleted_is_not_running() -> None:
    doc = _pod("Running", RUNNING, podIP="10.0.0.1")
    doc["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    assert status.judge(doc)[0] is RuntimeState.EXITED and status.pod_ip(doc) is None


def test_startup_failures_are_told_apart() -> None:
    pull = _pod("Pending", {"state": {"waiting": {"reason": "ImagePullBackOff", "message": "not found"}}})
    config = _pod("Pending", {"state": {"waiting": {"reason": "CreateContainerConfigError", "message": "no secret"}}})
    creating = _pod("Pending", {"state": {"waiting": {"reason": "ContainerCreating"}}})
    assert status.startup_failure(pull) == ("ImagePullBackOff: not found", True)
    assert status.startup_failure(config) == ("CreateContainerConfigError: no secret", False)
    assert status.startup_failure(creating) is None
    why = "pod has unbound immediate PersistentVolumeClaims"
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": why}
    unscheduled = _pod("Pending", conditions=[condition])
    assert "unbound immediate PersistentVolumeClaims" in status.pending_reason(unscheduled)


# --------------------------------------------------------------------------------------------- errors, config


@pytest.mark.parametrize(
    ("code", "expected"),
    [(400, InvalidArgument), (401, BackendError), (403, BackendError), (404, NotFound), (409, FailedPrecondition),
     (410, Unavailable), (422, InvalidArgument), (429, Unavailable), (500, Unavailable), (503, Unavailable),
     (418, BackendError)],
)  # fmt: skip
def test_api_statuses_become_platform_errors(code: int, expected: type[Exception]) -> None:
    body = json.dumps({"kind": "Status", "code": code, "message": "the server said why"})
    error = ApiException(status=code, reason="x")
    error.body = body
    translated = translate(error, "create pod p")
    assert type(translated) is expected
    assert translated.message.startswith("create pod p: ") and "the server said why" in translated.message
    if code == 401:
        assert "RBAC" in translated.message
    assert code in STATUS_TABLE or code >= 500 or code == 418


def test_connection_failures_become_unavailable() -> None:
    refused = aiohttp.ClientConnectionError("Cannot connect to host 127.0.0.1:1")
    assert isinstance(translate(refused, "list pods"), Unavailable)
    assert isinstance(translate(TimeoutError(), "list pods"), Unavailable)
    assert isinstance(for_status(502, b"<html>bad gateway</html>", "x"), Unavailable)


def test_config_validates_tolerations_owner_and_quantities() -> None:
    with pytest.raises(ValidationError):
        KubernetesConfig.model_validate({"tolerations": [{"key": "k", "operator": "Maybe"}]})
    with pytest.raises(ValidationError):
        KubernetesConfig.model_validate({"tolerations": [{"key": "k", "colour": "red"}]})
    with pytest.raises(ValidationError):
        KubernetesConfig.model_validate({"owner": "Prod_1"})  # part of pod names: a DNS label
    with pytest.raises(ValidationError):
        KubernetesConfig.model_validate({"volume_size": "lots"})
    with pytest.raises(ValidationError):
        KubernetesConfig.model_validate({"cpu_request_fraction": 0})
    fields = KubernetesConfig.model_fields
    assert all(f.description for f in fields.values()), "every setting is described"


def test_the_factory_picks_the_backend_by_type() -> None:
    adapter: TypeAdapter[Any] = TypeAdapter(BackendConfig)
    k8s = adapter.validate_python({"type": "kubernetes", "namespace": "sbx"})
    assert isinstance(k8s, KubernetesConfig) and isinstance(make_backend(k8s), KubernetesBackend)
    assert isinstance(adapter.validate_python({"owner": "x"}), DockerConfig)  # no type: Docker, as before
    with pytest.raises(ValidationError):
        adapter.validate_python({"type": "kubernetes", "socket_root": "/run/x"})


def test_the_shipped_server_configs_select_this_backend() -> None:
    """The kustomize base's server.json (what the chart renders too) is a valid config of this backend."""
    raw = json.loads((ROOT / "deploy/kustomize/base/control-plane/server.json").read_text())
    settings = ServerSettings.model_validate(raw)
    assert isinstance(settings.backend, KubernetesConfig)
    assert settings.backend.images["terminal"].startswith("sandbox/terminal:")
