"""The chart's android settings: ``sandboxes.android.kvmResource`` and ``kvmGroup`` land in server.json's backend as
``android_kvm_resource`` and ``android_kvm_group`` (what the Kubernetes backend reads, docs/android.md), the defaults
are the backend's own, and the schema refuses what the backend would."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from sandbox.backends.kubernetes.config import KubernetesConfig
from tests.k8s import harness


def backend(sets: tuple[str, ...] = (), values: tuple[Path, ...] = ()) -> dict[str, Any]:
    docs = harness.render_chart(values, sets)
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap" and "server.json" in d.get("data", {})]
    config: dict[str, Any] = json.loads(cm["data"]["server.json"])["backend"]
    KubernetesConfig.model_validate(config)  # what the server makes of it
    return config


def test_the_defaults_are_the_backends_own() -> None:
    config = backend()
    defaults = KubernetesConfig()
    assert config["android_kvm_resource"] == defaults.android_kvm_resource == "devices.kubevirt.io/kvm"
    assert config["android_kvm_group"] is defaults.android_kvm_group is None


def test_the_values_land_in_server_json(tmp_path: Path) -> None:
    values = tmp_path / "android.yaml"
    values.write_text(
        yaml.safe_dump({"sandboxes": {"android": {"kvmResource": "smarter-devices/kvm", "kvmGroup": 36}}})
    )
    config = backend(values=(values,))
    assert (config["android_kvm_resource"], config["android_kvm_group"]) == ("smarter-devices/kvm", 36)
    parsed = KubernetesConfig.model_validate(config)
    assert (parsed.android_kvm_resource, parsed.android_kvm_group) == ("smarter-devices/kvm", 36)

    config = backend(sets=("sandboxes.android.kvmGroup=107",))  # --set: the group alone, the resource kept
    assert (config["android_kvm_resource"], config["android_kvm_group"]) == ("devices.kubevirt.io/kvm", 107)


@pytest.mark.parametrize("empty", ['""', "null"])
def test_no_kvm_plugin_renders_null(tmp_path: Path, empty: str) -> None:
    """Empty (or null): the cluster has no KVM device plugin; the backend then refuses android sandboxes."""
    values = tmp_path / "no-kvm.yaml"
    values.write_text(f"sandboxes:\n  android:\n    kvmResource: {empty}\n")
    config = backend(values=(values,))
    assert (
        config["android_kvm_resource"] is None and KubernetesConfig.model_validate(config).android_kvm_resource is None
    )


@pytest.mark.parametrize(
    ("android", "field"),
    [
        ({"kvmGroup": 0}, "/sandboxes/android/kvmGroup"),
        ({"kvmGroup": "kvm"}, "/sandboxes/android/kvmGroup"),
        ({"kvmResource": "kvm"}, "/sandboxes/android/kvmResource"),  # an extended resource has a domain
        ({"kvmresource": "devices.kubevirt.io/kvm"}, "/sandboxes/android"),  # a typo
    ],
    ids=["group-zero", "group-name", "resource-without-domain", "typo"],
)
def test_bad_android_values_are_rejected_by_helm_lint(android: dict[str, Any], field: str, tmp_path: Path) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump({"sandboxes": {"android": android}}))
    proc = harness.run([harness.HELM, "lint", "--strict", harness.CHART, "-f", path], check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, f"helm lint accepted {android}:\n{out}"
    assert "values don't meet the specifications of the schema" in out and field in out, out
