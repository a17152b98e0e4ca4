"""The operator's objects as pure functions of the records: each one valid for its CRD (jsonschema, the chart's own
openAPIV3Schema), health and messages as documented, and merge patches that change only what differs."""

from __future__ import annotations

import time
from typing import Any

import pytest

from sandbox.models import SandboxSpec, SandboxState
from sandbox.operator import resources as res
from sandbox.service.records import SandboxRecord
from tests.k8s import harness

NOW = time.time()


def _doc(**update: Any) -> dict[str, Any]:
    spec = SandboxSpec(kind="desktop", labels={"run": "exp-7", "weird key!": "x" * 100}, ttl_s=0.5,
                       idle_timeout_s=None, auto_recover=True, snapshot="task-7")  # fmt: skip
    record = SandboxRecord(id="sb-desk-0123456789ab", tenant="Team A/ops", spec=spec, state=SandboxState.RUNNING,
                           instance="in-desk-ba9876543210", created_at=NOW, last_active_at=NOW,
                           expires_at=NOW + 3600)  # fmt: skip
    return {**record.model_dump(mode="json"), **update}


def _pod(phase: str = "Running", **status: Any) -> dict[str, Any]:
    container = {"name": "sandbox", "restartCount": 0, "state": {"running": {}}}
    return {"metadata": {"name": "sbx-o-in-desk-ba9876543210", "labels": {}}, "spec": {"nodeName": "node-17"},
            "status": {"phase": phase, "containerStatuses": [container], **status}}  # fmt: skip


def _whole(doc: dict[str, Any], pod: dict[str, Any] | None, generation: int | None = 1) -> dict[str, Any]:
    obj = res.sandbox_object("sandboxes", doc, "prod", "registry/sandbox/desktop:1")
    obj["status"] = res.sandbox_status(doc, "sbx-o-in-desk-ba9876543210", pod, generation=generation)
    harness.validate_custom(obj)
    return obj


def test_a_running_sandbox_is_healthy_and_valid() -> None:
    obj = _whole(_doc(), _pod())
    assert obj["metadata"]["labels"] == {"sandbox.managed-by": "sandbox", "sandbox.owner": "prod",
                                         res.LABEL_KIND: "desktop", res.LABEL_TENANT: "Team.A.ops"}  # fmt: skip
    assert obj["metadata"]["finalizers"] == [res.FINALIZER]
    spec, status = obj["spec"], obj["status"]
    assert spec["ttlSeconds"] == 1 and "idleTimeoutSeconds" not in spec and spec["snapshot"] == "task-7"
    assert spec["labels"]["weird key!"] == "x" * 100 and spec["autoRecover"] is True
    assert spec["resources"] == {"cpus": 1.0, "memoryMb": 2048, "pids": 512, "shmMb": 256}
    assert status == {
        "state": "running", "kind": "desktop", "tenant": "Team A/ops", "pod": "sbx-o-in-desk-ba9876543210",
        "node": "node-17", "leaseExpiresAt": res.rfc3339(NOW + 3600), "replacements": 0, "health": "Healthy",
        "message": "", "observedGeneration": 1,
    }  # fmt: skip


def test_a_disk_limit_is_mirrored_and_valid() -> None:
    doc = _doc()
    doc["spec"]["resources"]["disk_mb"] = 4096
    assert _whole(doc, _pod())["spec"]["resources"]["diskMb"] == 4096  # _whole validates it against the CRD


@pytest.mark.parametrize(
    ("doc", "pod", "health", "message"),
    [
        pytest.param(_doc(state="unhealthy", error="shell: no answer"), _pod(), "Failing", "shell: no answer",
                     id="marked-unhealthy"),
        pytest.param(_doc(), _pod("Failed", reason="NodeLost", message="Node node-17 is unresponsive"), "Failing",
                     "pod sbx-o-in-desk-ba9876543210: its node was lost", id="node-lost"),
        pytest.param(_doc(), _pod("Failed", reason="Evicted"), "Failing", "the pod was evicted", id="evicted"),
        pytest.param(_doc(), _pod("Pending"), "Unknown", "pod phase Pending", id="starting"),
        pytest.param(_doc(), None, "Unknown", "not seen yet", id="pod-not-seen"),
        pytest.param(_doc(state="expired", error="expired because its ttl of 60 s ran out"), None, "Unknown",
                     "expired because", id="expired"),
        pytest.param(_doc(state="creating"), None, "Unknown", "", id="creating"),
    ],
)  # fmt: skip
def test_health_and_message(doc: dict[str, Any], pod: dict[str, Any] | None, health: str, message: str) -> None:
    status = _whole(doc, pod)["status"]
    assert status["health"] == health and message in status["message"]
    assert status["state"] == doc["state"]


def test_a_pod_not_scheduled_yet_has_no_node() -> None:
    pod = _pod("Pending")
    del pod["spec"]["nodeName"]
    assert "node" not in _whole(_doc(), pod, generation=None)["status"]


def test_merge_diff_writes_only_what_differs() -> None:
    obj = _whole(_doc(), _pod())
    assert res.merge_diff(obj["spec"], res.sandbox_spec(_doc(), "registry/sandbox/desktop:1")) == {}
    assert res.merge_diff(obj["status"], dict(obj["status"])) == {}
    moved = res.sandbox_status(_doc(replacements=1), "sbx-o-in-desk-new", None, generation=1)
    assert res.merge_diff(obj["status"], moved) == {
        "pod": "sbx-o-in-desk-new", "replacements": 1, "node": None, "health": "Unknown",
        "message": "pod sbx-o-in-desk-new not seen yet",
    }  # fmt: skip
    assert res.merge_diff({"labels": {"a": "1", "b": "2"}}, {"labels": {"a": "1"}}) == {"labels": {"b": None}}


def test_pool_specs_and_status() -> None:
    obj = {"spec": {"kind": "terminal", "min": 8}}
    spec, snapshot, minimum, maximum, starting = res.pool_spec(obj)
    assert (spec.kind.value, spec.image, snapshot, minimum, maximum, starting) == ("terminal", None, None, 8, 10, 4)
    assert res.pool_spec({"spec": {"kind": "desktop", "min": 3, "max": 1, "snapshot": "a/b"}})[1:4] == ("a/b", 3, 3)
    with pytest.raises(ValueError):
        res.pool_spec({"spec": {"kind": "gpu", "min": 1}})
    status = res.pool_status(7, 1, "pool:terminal:0123456789abcdef", generation=2)
    assert status == {"ready": 7, "starting": 1, "replicas": 8, "observedGeneration": 2,
                      "selector": "sandbox.pool=pool.terminal.0123456789abcdef"}  # fmt: skip
    pool = {"apiVersion": res.API_VERSION, "kind": "SandboxPool", "metadata": {"name": "t"}, **obj, "status": status}
    harness.validate_custom(pool)
