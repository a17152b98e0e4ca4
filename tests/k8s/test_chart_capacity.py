"""The chart's capacity settings: ``sandboxes.resourceQuota`` (off by default) renders a ResourceQuota in the sandbox
namespace that passes `helm lint --strict` and kubernetes-validate like every other object, and
``sandboxes.scheduleTimeoutSeconds`` lands in server.json as the backend's ``schedule_timeout_s``. That the backend
reports the quota's refusals as CapacityExhausted is tests/k8s/test_capacity.py's (with this very object)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from sandbox.backends.kubernetes.config import KubernetesConfig
from tests.k8s import harness

ON = ("sandboxes.resourceQuota.enabled=true",)
DEFAULT_HARD = {
    "count/pods": "500",
    "requests.cpu": "500",
    "requests.memory": "1Ti",
    "limits.cpu": "500",
    "limits.memory": "1Ti",
}


def quotas(docs: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == "ResourceQuota"]


def backend(docs: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap" and "server.json" in d.get("data", {})]
    config: dict[str, Any] = json.loads(cm["data"]["server.json"])["backend"]
    return config


def lint(*args: str | Path) -> str:
    proc = harness.run([harness.HELM, "lint", "--strict", harness.CHART, *args], check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "[WARNING]" not in out and "[ERROR]" not in out, out
    return out


def test_off_by_default() -> None:
    docs = harness.render_chart()
    assert quotas(docs) == []
    config = backend(docs)
    assert "schedule_timeout_s" not in config
    assert KubernetesConfig.model_validate(config).schedule_timeout_s == 300


def test_on_renders_the_quota_in_the_sandbox_namespace_and_passes_lint_and_validation() -> None:
    lint("--set", ON[0])
    docs = harness.render_chart((), ON)
    (quota,) = quotas(docs)
    assert quota["metadata"]["name"] == "sandbox-sandboxes"
    assert quota["metadata"]["namespace"] == backend(docs)["namespace"] == "sandboxes"
    assert quota["metadata"]["labels"]["app.kubernetes.io/component"] == "sandboxes"
    assert quota["spec"]["hard"] == DEFAULT_HARD
    for version in harness.K8S_VERSIONS:
        for obj in docs:
            harness.validate_any(obj, version)


def test_the_values_choose_the_ceiling(tmp_path: Path) -> None:
    values = tmp_path / "quota.yaml"
    hard = {"count/pods": "64", "requests.memory": "256Gi", "requests.ephemeral-storage": "1Ti"}
    values.write_text(yaml.safe_dump({"sandboxes": {"resourceQuota": {"enabled": True, "hard": hard}}}))
    lint("-f", values)
    (quota,) = quotas(harness.render_chart((values,)))
    # helm merges maps: keys the user does not name keep the defaults
    assert quota["spec"]["hard"] == {**DEFAULT_HARD, **hard}
    (gvisor,) = quotas(harness.render("chart:gvisor.yaml"))
    assert gvisor["spec"]["hard"]["count/pods"] == "2000" and gvisor["spec"]["hard"]["limits.memory"] == "4Ti"


def test_the_schedule_timeout_lands_in_server_json() -> None:
    config = backend(harness.render_chart((), ("sandboxes.scheduleTimeoutSeconds=600",)))
    assert config["schedule_timeout_s"] == 600
    assert KubernetesConfig.model_validate(config).schedule_timeout_s == 600


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"resourceQuota": {"pods": "500"}}, "/sandboxes/resourceQuota"),  # the flat form of old: hard now
        ({"resourceQuota": {"enabled": True, "hard": None}}, "/sandboxes/resourceQuota"),
        ({"resourceQuota": {"enabled": True, "hard": {"requests.memory": "lots"}}}, "requests.memory"),
        ({"resourceQuota": {"enabled": "yes"}}, "/sandboxes/resourceQuota/enabled"),
        ({"scheduleTimeoutSeconds": 0}, "/sandboxes/scheduleTimeoutSeconds"),
        ({"scheduleTimeoutSeconds": "5m"}, "/sandboxes/scheduleTimeoutSeconds"),
    ],
    ids=["flat-form", "enabled-without-hard", "quantity", "enabled-type", "timeout-zero", "timeout-type"],
)
def test_bad_values_are_rejected_by_helm_lint(values: dict[str, Any], field: str, tmp_path: Path) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump({"sandboxes": values}))
    proc = harness.run([harness.HELM, "lint", "--strict", harness.CHART, "-f", path], check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, f"helm lint accepted {values}:\n{out}"
    refused = "values don't meet the specifications of the schema" in out or "[ERROR] values.yaml" in out
    assert refused and field in out, out
