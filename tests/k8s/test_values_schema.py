"""values.schema.json: a valid draft-07 schema that the default values and the examples meet, and that makes
`helm lint` (and so `helm install`) reject bad values with a message naming the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from sandbox.service.lifecycle import LifecycleSettings
from tests.k8s import harness

SCHEMA = json.loads((harness.CHART / "values.schema.json").read_text())


def test_schema_is_draft_07_and_the_values_meet_it() -> None:
    assert SCHEMA["$schema"] == "http://json-schema.org/draft-07/schema#"
    jsonschema.Draft7Validator.check_schema(SCHEMA)
    defaults = yaml.safe_load((harness.CHART / "values.yaml").read_text())
    jsonschema.Draft7Validator(SCHEMA).validate(defaults)


def test_every_default_value_is_described_by_the_schema() -> None:
    """The top level and every section of values.yaml are in the schema (additionalProperties false catches typos
    such as `controlplane:` in a user's values only if the schema knows every real key)."""
    defaults = yaml.safe_load((harness.CHART / "values.yaml").read_text())
    assert set(defaults) <= set(SCHEMA["properties"])
    for section in ("controlPlane", "sandboxes", "redis", "metrics", "ingress", "auth"):
        props = SCHEMA["properties"][section].get("properties", {})
        assert set(defaults[section]) <= set(props), (section, set(defaults[section]) - set(props))


def test_the_lifecycle_section_names_every_setting_of_the_server() -> None:
    """The section is closed (additionalProperties false): a setting the server gained but the schema lacks would
    make `helm install` refuse values that the server takes."""
    props = SCHEMA["properties"]["lifecycle"]["properties"]
    assert set(props) == set(LifecycleSettings.model_fields)


BAD_VALUES: list[Any] = [
    pytest.param({"controlPlane": {"replicaCount": "two"}}, "/controlPlane/replicaCount", id="replicas-type"),
    pytest.param({"controlPlane": {"replicaCount": 0}}, "/controlPlane/replicaCount", id="replicas-zero"),
    pytest.param({"controlplane": {"replicaCount": 3}}, "controlplane", id="misspelt-section"),
    pytest.param({"controlPlane": {"logLevel": "TRACE"}}, "/controlPlane/logLevel", id="log-level"),
    pytest.param(
        {"controlPlane": {"podSecurityContext": {"runAsNonRoot": False}}},
        "/controlPlane/podSecurityContext/runAsNonRoot",
        id="root",
    ),
    pytest.param(
        {"controlPlane": {"securityContext": {"allowPrivilegeEscalation": True}}},
        "/controlPlane/securityContext/allowPrivilegeEscalation",
        id="privilege-escalation",
    ),
    pytest.param({"controlPlane": {"image": {"digest": "latest"}}}, "/controlPlane/image/digest", id="digest"),
    pytest.param({"pools": [{"spec": {"kind": "gpu"}}]}, "/pools/0/spec/kind", id="pool-kind"),
    pytest.param({"pools": [{"spec": {"kind": "terminal", "memory": 4096}}]}, "/pools/0/spec", id="pool-typo"),
    pytest.param({"pools": [{"spec": {"kind": "terminal"}, "min": -1}]}, "/pools/0/min", id="pool-min"),
    pytest.param({"pools": [{"spec": {"kind": "android"}}]}, "/pools/0/spec", id="android-without-image"),
    pytest.param({"lifecycle": {"health_interval_s": 0}}, "/lifecycle/health_interval_s", id="lifecycle"),
    pytest.param({"auth": {"tokens": {"short": "team-a"}}}, "/auth/tokens", id="short-token"),
    pytest.param(
        {"auth": {"tokens": {"a-long-enough-token-value": {"tenant": "ops", "root": True}}}},
        "/auth/tokens",
        id="token-entry",
    ),
    pytest.param({"auth": {"generateAdminToken": False}}, "/auth", id="no-tokens-at-all"),
    pytest.param({"redis": {"enabled": False}}, "/redis/external", id="no-redis"),
    pytest.param(
        {"redis": {"enabled": False, "external": {"url": "http://redis:6379"}}}, "/redis/external/url", id="redis-url"
    ),
    pytest.param({"redis": {"image": {"tag": 7.4}}}, "/redis/image/tag", id="numeric-tag"),
    pytest.param(
        {"controlPlane": {"snapshots": {"accessModes": ["ReadWriteAll"]}}},
        "/controlPlane/snapshots/accessModes/0",
        id="snapshot-access-mode",
    ),
    pytest.param(
        {"controlPlane": {"snapshots": {"path": "var/lib/snapshots"}}},
        "/controlPlane/snapshots/path",
        id="snapshot-path",
    ),
    pytest.param({"controlPlane": {"snapshots": {"path": "/tmp"}}}, "/controlPlane/snapshots/path", id="snapshot-tmp"),
    pytest.param({"controlPlane": {"snapshots": {"size": "lots"}}}, "/controlPlane/snapshots/size", id="snapshot-size"),
    pytest.param(
        {"controlPlane": {"snapshots": {"existingclaim": "x"}}}, "/controlPlane/snapshots", id="snapshot-typo"
    ),
    pytest.param({"sandboxes": {"namespace": {"name": "Sandboxes"}}}, "/sandboxes/namespace/name", id="namespace"),
    pytest.param(
        {"sandboxes": {"networkPolicy": {"egress": {"deniedCIDRs": ["10.0.0.0/8"]}}}},
        "/sandboxes/networkPolicy/egress/deniedCIDRs",
        id="metadata-address-opened",
    ),
    pytest.param(
        {"sandboxes": {"networkPolicy": {"egress": {"deniedCIDRs": ["10.0.0.0/33", "169.254.169.254/32"]}}}},
        "/sandboxes/networkPolicy/egress/deniedCIDRs/0",
        id="cidr",
    ),
    pytest.param(
        {"sandboxes": {"networkPolicy": {"egress": {"deniedCIDRs": ["169.254.0.0/16", "fd00::/129"]}}}},
        "/sandboxes/networkPolicy/egress/deniedCIDRs/1",
        id="ipv6-cidr",
    ),
    pytest.param({"rbac": {"volumeSnapshots": True}}, "/rbac", id="rbac-volume-snapshots-gone"),
    pytest.param({"uninstallHook": {"activeDeadlineSeconds": 1}}, "/uninstallHook/activeDeadlineSeconds", id="hook"),
    pytest.param({"sandboxes": {"volumeAccessMode": "ReadMany"}}, "/sandboxes/volumeAccessMode", id="access-mode"),
    pytest.param({"service": {"grpc": {"type": "Ingress", "port": 50051}}}, "/service/grpc/type", id="service-type"),
    pytest.param({"service": {"http": {"type": "ClusterIP", "port": 70000}}}, "/service/http/port", id="port"),
    pytest.param(
        {"ingress": {"hosts": [{"host": "a.example.com", "paths": [{"path": "api", "pathType": "Prefix"}]}]}},
        "/ingress/hosts/0/paths/0/path",
        id="ingress-path",
    ),
    pytest.param(
        {"metrics": {"serviceMonitor": {"interval": "30 seconds"}}}, "/metrics/serviceMonitor/interval", id="interval"
    ),
]


@pytest.mark.parametrize(("values", "field"), BAD_VALUES)
def test_bad_values_are_rejected_by_helm_lint(values: dict[str, Any], field: str, tmp_path: Path) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    proc = harness.run([harness.HELM, "lint", "--strict", harness.CHART, "-f", path], check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, f"helm lint accepted {values}:\n{out}"
    assert "values don't meet the specifications of the schema" in out, out
    assert field in out, f"the error does not name {field}:\n{out}"
