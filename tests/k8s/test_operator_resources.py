"""The operator's objects as pure functions of the records: each one valid for its CRD (jsonschema, the chart's own
openAPIV3Schema), health and messages as documented, and merge patches that change only what differs."""

from __future__ import annotations

import time
from typing import Any

import pytest

from sandbox.backends.kubernetes import manifests
from sandbox.backends.kubernetes.claims import claim_patch
from sandbox.backends.kubernetes.config import KubernetesConfig
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
    (ready,) = status.pop("conditions")
    assert status == {
        "state": "running", "kind": "desktop", "tenant": "Team A/ops", "pod": "sbx-o-in-desk-ba9876543210",
        "node": "node-17", "leaseExpiresAt": res.rfc3339(NOW + 3600), "replacements": 0, "health": "Healthy",
        "message": "", "observedGeneration": 1, "phase": "Running", "sandboxId": "sb-desk-0123456789ab",
    }  # fmt: skip
    assert ready == {"type": "Ready", "status": "True", "reason": "Healthy", "lastTransitionTime": ready[
        "lastTransitionTime"], "message": "running; its pod runs and its health checks pass"}  # fmt: skip


def test_a_disk_limit_is_mirrored_and_valid() -> None:
    doc = _doc()
    doc["spec"]["resources"]["disk_mb"] = 4096
    assert _whole(doc, _pod())["spec"]["resources"]["diskMb"] == 4096  # _whole validates it against the CRD


@pytest.mark.parametrize(
    ("doc", "pod", "health", "message", "reason"),
    [
        pytest.param(_doc(state="unhealthy", error="shell: no answer"), _pod(), "Failing", "shell: no answer",
                     "Unhealthy", id="marked-unhealthy"),
        pytest.param(_doc(), _pod("Failed", reason="NodeLost", message="Node node-17 is unresponsive"), "Failing",
                     "pod sbx-o-in-desk-ba9876543210: its node was lost", "PodFailing", id="node-lost"),
        pytest.param(_doc(), _pod("Failed", reason="Evicted"), "Failing", "the pod was evicted", "PodFailing",
                     id="evicted"),
        pytest.param(_doc(), _pod("Pending"), "Unknown", "pod phase Pending", "PodStarting", id="starting"),
        pytest.param(_doc(), None, "Unknown", "not seen yet", "PodNotSeen", id="pod-not-seen"),
        pytest.param(_doc(state="expired", error="expired because its ttl of 60 s ran out"), None, "Unknown",
                     "expired because", "Expired", id="expired"),
        pytest.param(_doc(state="creating"), None, "Unknown", "", "Creating", id="creating"),
    ],
)  # fmt: skip
def test_health_and_message(
    doc: dict[str, Any], pod: dict[str, Any] | None, health: str, message: str, reason: str
) -> None:
    status = _whole(doc, pod)["status"]
    assert status["health"] == health and message in status["message"]
    assert status["state"] == doc["state"]
    (ready,) = status["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "False", reason)
    assert message in ready["message"]  # the Message column of -o wide


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
        "message": "pod sbx-o-in-desk-new not seen yet", "conditions": moved["conditions"],
    }  # fmt: skip
    assert res.merge_diff({"labels": {"a": "1", "b": "2"}}, {"labels": {"a": "1"}}) == {"labels": {"b": None}}


def test_pool_specs_and_status() -> None:
    obj = {"spec": {"kind": "terminal", "min": 8}}
    spec, snapshot, minimum, maximum, starting = res.pool_spec(obj)
    assert (spec.kind.value, spec.image, snapshot, minimum, maximum, starting) == ("terminal", None, None, 8, 10, 4)
    assert res.pool_spec({"spec": {"kind": "desktop", "min": 3, "max": 1, "snapshot": "a/b"}})[1:4] == ("a/b", 3, 3)
    with pytest.raises(ValueError):
        res.pool_spec({"spec": {"kind": "gpu", "min": 1}})
    status = res.pool_status(7, 1, "pool:terminal:0123456789abcdef", generation=2, minimum=8)
    (ready,) = status.pop("conditions")
    assert status == {"ready": 7, "starting": 1, "replicas": 8, "observedGeneration": 2,
                      "selector": "sandbox.pool=pool.terminal.0123456789abcdef"}  # fmt: skip
    assert (ready["status"], ready["reason"], ready["message"]) == ("False", "Filling", "7 of 8 warm, 1 starting")
    pool = {"apiVersion": res.API_VERSION, "kind": "SandboxPool", "metadata": {"name": "t"}, **obj, "status": status}
    harness.validate_custom(pool)
    reasons = [res.pool_status(8, 0, "k", generation=2, minimum=8)["conditions"][0]["reason"],
               res.pool_status(2, 0, "k", generation=2, minimum=8, short=True)["conditions"][0]["reason"],
               res.pool_status(0, 0, None, generation=2, why="no snapshot 'a/b'")["conditions"][0]]  # fmt: skip
    assert reasons[:2] == ["Warm", "Short"]
    assert (reasons[2]["reason"], reasons[2]["message"]) == ("NotApplied", "no snapshot 'a/b'")


def test_a_condition_keeps_its_transition_time_while_its_status_holds() -> None:
    """So that a status that does not change costs no write, and kubectl shows since when a sandbox is (not) Ready."""
    first = res.conditions([res.condition("Ready", False, "PodStarting", "pod phase Pending")], None, now=NOW - 60)
    same = res.conditions([res.condition("Ready", False, "PodNotSeen", "not seen")], {"conditions": first}, now=NOW)
    assert same[0]["lastTransitionTime"] == first[0]["lastTransitionTime"] == res.rfc3339(NOW - 60)
    assert same[0]["reason"] == "PodNotSeen"  # the reason and message follow; only the time is kept
    flipped = res.conditions([res.condition("Ready", True, "Healthy", "ok")], {"conditions": same}, now=NOW)
    assert flipped[0]["lastTransitionTime"] == res.rfc3339(NOW)
    obj = _whole(_doc(), _pod())
    again = res.sandbox_status(_doc(), "sbx-o-in-desk-ba9876543210", _pod(), generation=1, previous=obj["status"])
    assert res.merge_diff(obj["status"], again) == {}


def _declared(**spec: Any) -> dict[str, Any]:
    meta = {"name": "my-desk", "uid": "0f3c", "generation": 2, "annotations": {res.ANNOTATION_TENANT: "team-b"}}
    return {"apiVersion": res.API_VERSION, "kind": "Sandbox", "metadata": meta, "spec": {"kind": "desktop", **spec}}


def test_a_declared_object_is_read_as_the_api_would_read_its_spec() -> None:
    obj = _declared(resources={"cpus": 2, "memoryMb": 4096, "diskMb": 8192}, network="egress", ttlSeconds=600,
                    labels={"run": "7"}, image="registry/desktop:2", autoRecover=True)  # fmt: skip
    spec = res.declared_spec(obj)
    assert (spec.kind.value, spec.image, spec.network.value, spec.ttl_s, spec.auto_recover) == (
        "desktop", "registry/desktop:2", "egress", 600, True)  # fmt: skip
    assert (spec.resources.cpus, spec.resources.memory_mb, spec.resources.disk_mb) == (2, 4096, 8192)
    assert spec.idle_timeout_s is None and spec.labels == {"run": "7"}  # no idle timeout unless the object says so
    assert res.declared_tenant(obj, "default") == "team-b"  # the annotation, when the spec names none
    assert res.declared_tenant(_declared(tenant="team-c"), "default") == "team-c"
    assert res.declared_tenant({"spec": {"kind": "terminal"}}, "fallback") == "fallback"
    with pytest.raises(ValueError, match="cpus"):
        res.declared_spec(_declared(resources={"cpus": 1000}))
    with pytest.raises(ValueError):
        res.declared_spec({"spec": {"kind": "gpu"}})


def test_a_declared_spec_changed_after_the_create_is_named_field_by_field() -> None:
    obj = _declared(resources={"cpus": 2}, labels={"run": "7"})
    made = res.declared_spec(obj)
    labels = {**made.labels, res.RECORD_OBJECT: "my-desk", res.RECORD_OBJECT_UID: "0f3c"}
    doc = _doc(tenant="team-b", spec=made.model_copy(update={"labels": labels}).model_dump(mode="json"))
    assert res.record_object_uid(doc) == "0f3c" and res.record_object_uid(_doc()) is None
    assert res.spec_changes(obj, doc, "team-b") == []  # the record's own labels are not a change
    edited = _declared(resources={"cpus": 4, "memoryMb": 4096}, labels={"run": "8"}, network="internal")
    assert res.spec_changes(edited, doc, "team-a") == [
        "spec.labels", "spec.network", "spec.resources.cpus", "spec.resources.memoryMb", "spec.tenant"]  # fmt: skip


def test_a_declared_object_without_a_sandbox_has_a_valid_status() -> None:
    obj = _declared()
    status = res.declared_status(obj, "Pending", "CapacityExhausted", "no room; tried again in 10 s", tenant="team-b")
    (ready,) = status.pop("conditions")
    assert status == {"phase": "Pending", "tenant": "team-b", "health": "Unknown", "kind": "desktop",
                      "message": "no room; tried again in 10 s", "observedGeneration": 2}  # fmt: skip
    assert (ready["status"], ready["reason"]) == ("False", "CapacityExhausted")
    ended = res.declared_status(obj, "Ended", "Deleted", "gone", tenant="team-b", sandbox_id="sb-desk-0123456789ab")
    harness.validate_custom({**obj, "metadata": {"name": "my-desk"}, "status": ended})
    assert ended["sandboxId"] == "sb-desk-0123456789ab"


def test_a_pod_becomes_its_sandboxs_dependent_once() -> None:
    owner = {"apiVersion": res.API_VERSION, "kind": "Sandbox", "name": "my-desk", "uid": "0f3c"}
    pod = _pod()
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "1"},
                                          {**owner, "uid": "old", "controller": True}]  # fmt: skip
    patch = manifests.controlled_by(pod, owner)
    assert patch is not None
    references = patch["metadata"]["ownerReferences"]
    assert references == [pod["metadata"]["ownerReferences"][0],
                          {**owner, "controller": True, "blockOwnerDeletion": True}]  # fmt: skip
    assert patch["metadata"]["annotations"] == {manifests.ANNOTATION_SAFE_TO_EVICT: "false"}
    pod["metadata"].update(ownerReferences=references, annotations=patch["metadata"]["annotations"])
    assert manifests.controlled_by(pod, owner) is None  # in place: no write


def test_the_autoscaler_may_evict_warm_pods_only() -> None:
    """A pod started for a create holds a sandbox from the start; a warm pod holds nothing until its claim, whose
    patch (the same with or without the operator) says it may no longer be evicted."""
    config = KubernetesConfig(owner="prod")
    spec = SandboxSpec(kind="terminal")
    direct = manifests.pod_manifest(config, instance_id="in-term-000000000001", spec=spec, image="i")
    warm = manifests.pod_manifest(config, instance_id="in-term-000000000002", spec=spec, image="i", pool="pool:t")
    assert direct["metadata"]["annotations"][manifests.ANNOTATION_SAFE_TO_EVICT] == "false"
    assert warm["metadata"]["annotations"][manifests.ANNOTATION_SAFE_TO_EVICT] == "true"
    claimed = claim_patch({"id": "sb-term-000000000001"})["metadata"]["annotations"]
    assert claimed[manifests.ANNOTATION_SAFE_TO_EVICT] == "false" and manifests.ANNOTATION_CLAIM in claimed
