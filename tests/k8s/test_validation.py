"""Schema validation of everything rendered: built-in kinds with kubernetes-validate --strict for every Kubernetes
version claimed, the CRDs themselves (CustomResourceDefinition is built in), custom resources against the CRDs'
openAPIV3Schema with jsonschema, the ServiceMonitor against a hand-written schema. And proof each check can fail."""

from __future__ import annotations

import copy
import re
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.k8s import harness


def test_claimed_versions() -> None:
    assert harness.K8S_VERSIONS[0] == "1.29"
    assert len(harness.K8S_VERSIONS) >= 5, harness.K8S_VERSIONS


@pytest.mark.parametrize("version", harness.K8S_VERSIONS)
@pytest.mark.parametrize("render", harness.RENDERS)
def test_rendered_objects_validate(render: str, version: str) -> None:
    docs = harness.render(render)
    assert docs
    failures = []
    for obj in docs:
        try:
            harness.validate_any(obj, version)
        except AssertionError as e:
            failures.append(str(e))
    assert not failures, "\n".join(failures)


def test_every_kind_rendered_is_checked_by_some_schema() -> None:
    """Which kinds went where: built-in kinds through kubernetes-validate, the rest through the CRDs' or the hand
    schema. Nothing is let through unchecked."""
    seen: dict[str, set[str]] = {"builtin": set(), "custom": set()}
    for render in harness.RENDERS:
        for obj in harness.render(render):
            seen["custom" if harness.group_of(obj) in harness.CUSTOM_GROUPS else "builtin"].add(obj["kind"])
    assert seen["custom"] == {"ServiceMonitor"}
    assert {"CustomResourceDefinition", "Deployment", "StatefulSet", "NetworkPolicy", "Role"} <= seen["builtin"]


@pytest.mark.parametrize("path", harness.CRD_FILES, ids=lambda p: p.name)
def test_crd_files_validate(path: Any) -> None:
    crd = yaml.safe_load(path.read_text())
    for version in harness.K8S_VERSIONS:
        harness.validate_builtin(crd, version)


def test_crd_schemas_use_portable_keywords() -> None:
    for (api, kind), version in harness.crds().items():
        used = harness.schema_keywords(version["schema"]["openAPIV3Schema"])
        assert used <= harness.PORTABLE_KEYWORDS, f"{kind} ({api}) uses {used - harness.PORTABLE_KEYWORDS}"


def _field(schema: dict[str, Any], json_path: str) -> dict[str, Any]:
    """The schema of the field a printer column or scale path names (a list filter, ``conditions[?(@.type=="Ready")]``,
    steps into the list's items, whose filtered field must exist)."""
    node = schema
    for part in re.findall(r"[^.\[]+(?:\[[^\]]*\])?", json_path):
        name, _, selector = part.partition("[?(@.")
        node = node["properties"][name]
        if selector:
            node = node["items"]
            assert selector.split("==")[0] in node["properties"], json_path
    return node


def test_crd_printer_columns_and_subresources_point_at_real_fields() -> None:
    for (_, kind), version in harness.crds().items():
        schema = version["schema"]["openAPIV3Schema"]
        for column in version["additionalPrinterColumns"]:
            if column["jsonPath"].startswith(".metadata."):
                continue
            field = _field(schema, column["jsonPath"])
            assert field["type"] == column["type"] or column["type"] == "string", (kind, column)
        assert "status" in version["subresources"]
    sandbox = harness.crds()[("sandbox.platform.io/v1alpha1", "Sandbox")]
    columns = [c["name"] for c in sandbox["additionalPrinterColumns"] if not c.get("priority")]
    assert columns == ["Kind", "State", "Tenant", "Node", "Health", "Expires", "Age"]
    pool = harness.crds()[("sandbox.platform.io/v1alpha1", "SandboxPool")]
    scale = pool["subresources"]["scale"]
    schema = pool["schema"]["openAPIV3Schema"]
    assert _field(schema, scale["specReplicasPath"])["type"] == "integer"
    assert _field(schema, scale["statusReplicasPath"])["type"] == "integer"
    assert _field(schema, scale["labelSelectorPath"])["type"] == "string"


def test_crd_names() -> None:
    for path in harness.CRD_FILES:
        crd = yaml.safe_load(path.read_text())
        names = crd["spec"]["names"]
        assert path.name == f"{crd['metadata']['name']}.yaml"
        assert crd["metadata"]["name"] == f"{names['plural']}.{crd['spec']['group']}"
        assert crd["spec"]["scope"] == "Namespaced"
        assert [v["name"] for v in crd["spec"]["versions"] if v["storage"]] == ["v1alpha1"]


SANDBOX: dict[str, Any] = {
    "apiVersion": "sandbox.platform.io/v1alpha1",
    "kind": "Sandbox",
    "metadata": {
        "name": "sb-desk-0123456789ab",
        "namespace": "sandboxes",
        "labels": {"sandbox.platform.io/kind": "desktop"},
    },
    "spec": {
        "kind": "desktop",
        "tenant": "team-a",
        "image": "registry.example.internal:5000/sandbox/desktop:0.1.0",
        "resources": {"cpus": 1.5, "memoryMb": 2048, "pids": 512, "shmMb": 256},
        "network": "none",
        "ttlSeconds": 21600,
        "idleTimeoutSeconds": 1800,
        "autoRecover": True,
        "labels": {"run": "exp-7"},
    },
    "status": {
        "state": "running",
        "kind": "desktop",
        "tenant": "team-a",
        "pod": "in-desk-ba9876543210",
        "node": "node-17",
        "leaseExpiresAt": "2026-11-23T14:30:00Z",
        "health": "Healthy",
        "message": "",
        "replacements": 1,
        "observedGeneration": 1,
    },
}
POOL: dict[str, Any] = {
    "apiVersion": "sandbox.platform.io/v1alpha1",
    "kind": "SandboxPool",
    "metadata": {"name": "terminal", "namespace": "sandboxes"},
    "spec": {"kind": "terminal", "min": 8, "max": 32, "maxStarting": 4},
    "status": {"ready": 7, "starting": 1, "replicas": 8, "selector": "sandbox.platform.io/pool=terminal"},
}


def _with(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    *parents, last = path.split(".")
    node = obj
    for p in parents:
        node = node[p]
    node[last] = value
    return obj


def test_sample_custom_resources_match_their_crds() -> None:
    harness.validate_custom(SANDBOX)
    harness.validate_custom(POOL)
    harness.validate_custom(_with(POOL, "spec", {"kind": "desktop", "min": 0, "snapshot": "task-7"}))
    harness.validate_custom(_with(SANDBOX, "status", {"state": "creating"}))


@pytest.mark.parametrize(
    ("obj", "error"),
    [
        pytest.param(_with(SANDBOX, "spec.kind", "gpu"), "'gpu' is not one of", id="sandbox-kind"),
        pytest.param(_with(SANDBOX, "status.state", "Running"), "'Running' is not one of", id="sandbox-state"),
        pytest.param(_with(SANDBOX, "status.leaseExpiresAt", "tomorrow"), "is not a 'date-time'", id="lease-expiry"),
        pytest.param(_with(SANDBOX, "spec.resources.memoryMb", 16), "less than the minimum", id="memory"),
        pytest.param(_with(SANDBOX, "spec.ttl", 60), "Additional properties", id="unknown-field"),
        pytest.param(_with(SANDBOX, "spec", {"tenant": "a"}), "'kind' is a required property", id="kind-required"),
        pytest.param(_with(SANDBOX, "status.conditions", [{"type": "Ready", "status": "y"}]), "not one of", id="cond"),
        pytest.param(_with(SANDBOX, "status.replacements", -1), "less than the minimum", id="replacements"),
        pytest.param(_with(POOL, "spec.min", -1), "less than the minimum", id="pool-min"),
        pytest.param(_with(POOL, "spec.min", "8"), "is not of type 'integer'", id="pool-min-type"),
        pytest.param(_with(POOL, "spec.maxStarting", 0), "less than the minimum", id="pool-max-starting"),
        pytest.param(_with(POOL, "status.replicas", 1.5), "is not of type 'integer'", id="pool-status"),
    ],
)
def test_broken_custom_resources_are_rejected(obj: dict[str, Any], error: str) -> None:
    with pytest.raises(AssertionError, match=error):
        harness.validate_custom(obj)


def _deployment() -> dict[str, Any]:
    (deployment,) = [d for d in harness.render("chart") if d["kind"] == "Deployment"]
    return copy.deepcopy(deployment)


@pytest.mark.parametrize("version", harness.K8S_VERSIONS)
def test_validator_rejects_broken_manifests(version: str) -> None:
    """The check can fail: a rendered Deployment passes, the same with a wrong type or an unknown field does not."""
    harness.validate_builtin(_deployment(), version)
    with pytest.raises(AssertionError, match=r"at spec\.replicas: 'two' is not of type"):
        harness.validate_builtin(_with(_deployment(), "spec.replicas", "two"), version)
    broken = _deployment()
    broken["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(AssertionError, match=r"'imagePullPolicyy' was unexpected"):
        harness.validate_builtin(broken, version)
    # and strictness is what catches the unknown field
    kubernetes_validate.validate(broken, version, strict=False)


def test_validator_fails_on_a_kind_it_has_no_schema_for() -> None:
    """The kubernetes-validate CLI only warns about an unknown kind and exits 0; here it is an error."""
    typo = _with(_deployment(), "kind", "Deploymnet")
    with pytest.raises(AssertionError, match="no built-in schema"):
        harness.validate_builtin(typo, harness.K8S_VERSIONS[-1])


def test_validator_rejects_a_broken_crd() -> None:
    crd = yaml.safe_load(harness.CRD_FILES[0].read_text())
    crd["spec"]["versions"][0]["printerColumns"] = crd["spec"]["versions"][0].pop("additionalPrinterColumns")
    with pytest.raises(AssertionError, match="'printerColumns' was unexpected"):
        harness.validate_builtin(crd, "1.29")


def test_service_monitor_schema_rejects_mistakes() -> None:
    (monitor,) = [d for d in harness.render("chart:ingress-and-monitoring.yaml") if d["kind"] == "ServiceMonitor"]
    harness.validate_custom(monitor)
    bad = copy.deepcopy(monitor)
    bad["spec"]["endpoints"][0]["interval"] = "15 seconds"
    with pytest.raises(AssertionError, match="does not match"):
        harness.validate_custom(bad)
    bad = copy.deepcopy(monitor)
    bad["spec"]["endpoint"] = bad["spec"].pop("endpoints")
    with pytest.raises(AssertionError, match="'endpoints' is a required property"):
        harness.validate_custom(bad)
