"""Sandboxes through kubectl: the real kubectl (scripts/k8s_tools.sh) against the fake API server, whose pods are
real containers of ``sandbox/terminal:latest``, with the control plane (service, leading lifecycle, operator) in
process. ``kubectl apply`` of a Sandbox creates a sandbox through the service, ``kubectl wait`` sees it Ready,
``kubectl get -o wide`` prints its phase and condition, a spec edit is reported and not applied, ``kubectl delete``
ends it (finalizer released, pod gone), and ``kubectl scale sandboxpool`` resizes a warm pool. Every custom object
written is checked against its CRD (the fake answers 422 otherwise, and the last test fails on any).

kubectl runs with ``--validate=false`` (the fake serves no OpenAPI document; the fake checks each write against the
CRD's schema instead) and no token (kubectl sends none over plain HTTP).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import pytest_asyncio
import yaml

from sandbox.backends.kubernetes.api import KubeApi
from sandbox.backends.kubernetes.backend import KubernetesBackend
from sandbox.backends.kubernetes.manifests import ANNOTATION_SAFE_TO_EVICT
from sandbox.capacity.quotas import Quota, QuotaBook
from sandbox.errors import NotFound
from sandbox.models import SandboxSpec
from sandbox.operator import resources as res
from sandbox.operator.operator import Operator
from sandbox.operator.settings import OperatorSettings
from sandbox.service import SandboxService
from sandbox.service.lifecycle import Lifecycle, LifecycleSettings
from sandbox.service.records import SANDBOXES, pool_key
from sandbox.store import EmbeddedStore
from sandbox.testing.fake_kube import FakeKube
from tests.k8s import harness
from tests.k8s.conftest import Plane, control_plane
from tests.k8s.fake_api_fixtures import K8S_OWNER, NAMESPACE, docker_engine, k8s_config, owned_containers
from tests.k8s.test_operator_fake_api import crd_docs
from tests.k8s.test_operator_realized import eventually_owned
from tests.k8s.test_operator_simulated import Replica, _replica
from tests.polling import eventually

__all__ = ["docker_engine"]

LOGGER = logging.getLogger("sandbox.test.k8s.declarative")
EXAMPLES = harness.CHART / "examples" / "kubectl"
SANDBOX_YAML = EXAMPLES / "sandbox.yaml"
POOL_YAML = EXAMPLES / "sandboxpool.yaml"


@dataclass
class KubectlPlane(Plane):
    kube: FakeKube

    async def kubectl(self, *args: str | Path, timeout: float = 60) -> str:
        cmd: list[str | Path] = [harness.KUBECTL, "--kubeconfig", self.kube.kubeconfig, "-n", NAMESPACE, *args]
        done = await asyncio.to_thread(harness.run, cmd, timeout=timeout)
        return done.stdout

    async def apply(self, obj: dict[str, Any]) -> str:
        """``kubectl apply -f`` of ``obj`` written to a file, as a user would."""
        path = Path(self.kube.workdir) / f"{obj['kind'].lower()}-{obj['metadata']['name']}.json"
        path.write_text(json.dumps(obj))
        return await self.kubectl("apply", "--validate=false", "-f", path)

    async def pods(self, selector: str = "") -> list[dict[str, Any]]:
        assert self.kube.store is not None
        items, _ = await self.kube.call(self.kube.store.list, "pods", NAMESPACE, labels=selector)
        return [p for p in items if not p["metadata"].get("deletionTimestamp")]

    async def status(self, name: str) -> dict[str, Any]:
        obj = await self.obj(res.SANDBOXES, name)
        return (obj or {}).get("status") or {}


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def plane(docker_engine: docker.DockerClient) -> AsyncIterator[KubectlPlane]:
    kube = FakeKube(mode="realize", owner=K8S_OWNER, namespaces=(NAMESPACE, "sandbox-system"), token="",
                    restart_backoff_s=0.5, validate=harness.validate_custom)  # fmt: skip
    await asyncio.to_thread(kube.start)
    try:
        await kube.install_crds(crd_docs())
        backend = KubernetesBackend(k8s_config(kube))
        api = await KubeApi.connect(k8s_config(kube))
        running = control_plane(backend, api, NAMESPACE, LOGGER, tick_s=0.2, health_interval_s=1, leading_within_s=30)
        try:
            async with running as common:
                yield KubectlPlane(**vars(common), kube=kube)
        finally:
            await api.close()
    finally:
        left = await asyncio.to_thread(kube.close)
        stray = await asyncio.to_thread(owned_containers, docker_engine)
        assert not left and not stray, f"pods or containers left: {left} {stray}"


def _table(printed: str) -> list[dict[str, str]]:
    """kubectl's table as rows of column -> cell (cut at the header's column starts: a cell may be empty)."""
    header, *lines = printed.splitlines()
    starts = [i for i, c in enumerate(header) if c != " " and (i == 0 or header[i - 1] == " ")]
    bounds = list(zip(starts, [*starts[1:], None], strict=True))
    names = [header[a:b].strip() for a, b in bounds]
    return [{n: line[a:b].strip() for n, (a, b) in zip(names, bounds, strict=True)} for line in lines]


def _condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return {c["type"]: c for c in status.get("conditions") or []}.get(kind) or {}


async def test_kubectl_apply_creates_a_sandbox_and_kubectl_delete_ends_it(plane: KubectlPlane) -> None:
    example = yaml.safe_load(SANDBOX_YAML.read_text())
    name = example["metadata"]["name"]
    assert "created" in await plane.kubectl("apply", "--validate=false", "-f", SANDBOX_YAML)
    # kubectl's own wait, on the Ready condition, through the fake's watch
    waited = await plane.kubectl("wait", "--for=condition=Ready", f"sandbox/{name}", "--timeout=90s", timeout=100)
    assert "condition met" in waited
    obj = await plane.obj(res.SANDBOXES, name)
    assert obj is not None
    harness.validate_custom(obj)
    status, meta = obj["status"], obj["metadata"]
    sandbox_id = status["sandboxId"]
    assert status["phase"] == "Running" and status["state"] == "running" and status["health"] == "Healthy"
    assert _condition(status, "Ready")["reason"] == "Healthy"
    assert _condition(status, "SpecApplied")["status"] == "True"
    assert meta["finalizers"] == [res.FINALIZER] and meta["labels"][res.LABEL_DECLARED] == "true"
    assert status["observedGeneration"] == meta["generation"]

    # a real sandbox in the service: the tenant from the annotation, the spec from the object
    record = await plane.service.records.read(sandbox_id)
    assert record is not None and record.tenant == "team-a" and record.state.value == "running"
    assert record.spec.resources.cpus == 1 and record.spec.resources.memory_mb == 1024 and record.spec.ttl_s == 3600
    assert record.spec.idle_timeout_s is None and record.spec.labels["owner"] == "data-team"
    assert record.spec.labels[res.RECORD_OBJECT_UID] == meta["uid"]
    info = await plane.service.get(plane.operator.mirror.operator, sandbox_id)
    assert info.tenant == "team-a"
    assert status["pod"] == plane.backend.pod_name(record.instance)
    assert not await plane.obj(res.SANDBOXES, sandbox_id)  # not mirrored a second time: the object is its object

    # its pod: owned by the object (controller, blocking its deletion), not to be evicted
    controller = {"apiVersion": res.API_VERSION, "kind": "Sandbox", "name": name, "uid": meta["uid"],
                  "controller": True, "blockOwnerDeletion": True}  # fmt: skip
    pod = await eventually_owned(plane.kube, status["pod"], controller)
    assert pod["metadata"]["annotations"][ANNOTATION_SAFE_TO_EVICT] == "false"

    # kubectl get -o wide: the phase, the Ready condition, its reason, the sandbox and the pod
    (row,) = [r for r in _table(await plane.kubectl("get", "sandboxes", "-o", "wide")) if r["NAME"] == name]
    assert row == {"NAME": name, "KIND": "terminal", "STATE": "running", "TENANT": "team-a", "NODE": "fake-node",
                   "HEALTH": "Healthy", "EXPIRES": status["leaseExpiresAt"], "PHASE": "Running", "READY": "True",
                   "REASON": "Healthy", "SANDBOX": sandbox_id, "POD": status["pod"],
                   "MESSAGE": "running; its pod runs and its health checks pass", "AGE": row["AGE"]}  # fmt: skip

    # a spec edit is reported in SpecApplied, not applied
    await plane.kubectl("patch", "sandbox", name, "--type=merge", "-p", '{"spec":{"resources":{"cpus":2}}}')

    async def reported() -> dict[str, Any] | None:
        got = await plane.status(name)
        return got if _condition(got, "SpecApplied").get("status") == "False" else None

    await eventually(reported, 15, "the spec change reported")
    changed = await reported()
    assert changed is not None and changed["observedGeneration"] == 2
    applied = _condition(changed, "SpecApplied")
    assert applied["reason"] == "NotAppliedInPlace" and "spec.resources.cpus" in applied["message"], applied
    assert _condition(changed, "Ready")["status"] == "True"  # the sandbox runs on, as it was
    assert (await plane.service.records.read(sandbox_id)).spec.resources.cpus == 1  # type: ignore[union-attr]

    # kubectl delete returns once the sandbox ended and the finalizer went (it waits for the object to go)
    await plane.kubectl("delete", "sandbox", name, "--timeout=60s", timeout=70)
    assert await plane.obj(res.SANDBOXES, name) is None
    assert await plane.service.store.get(SANDBOXES, sandbox_id) is None
    await eventually(lambda: _no_pod(plane, status["pod"]), 30, "the sandbox's pod removed")


async def _no_pod(plane: KubectlPlane, name: str) -> bool:
    return name not in {p["metadata"]["name"] for p in await plane.pods()}


def _sandbox(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": res.API_VERSION, "kind": "Sandbox", "metadata": {"name": name},
            "spec": {"kind": "terminal", **spec}}  # fmt: skip


async def test_a_sandbox_the_service_refuses_is_failed_with_the_reason(plane: KubectlPlane) -> None:
    """The same checks as the API: a snapshot the tenant does not have."""
    await plane.apply(_sandbox("phone", snapshot="no-such-snapshot", tenant="team-b"))

    async def failed() -> dict[str, Any] | None:
        got = await plane.status("phone")
        return got if got.get("phase") == "Failed" else None

    await eventually(failed, 15, "the refused Sandbox in phase Failed")
    status = await failed()
    assert status is not None
    ready = _condition(status, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "NotFound") and "no-such-snapshot" in ready["message"]
    assert status["tenant"] == "team-b" and "sandboxId" not in status
    (row,) = _table(await plane.kubectl("get", "sandbox", "phone", "-o", "wide"))
    assert (row["TENANT"], row["PHASE"], row["READY"], row["REASON"]) == ("team-b", "Failed", "False", "NotFound")
    assert row["STATE"] in ("", "<none>") and row["SANDBOX"] in ("", "<none>")  # no sandbox: nothing to print
    assert row["MESSAGE"] == ready["message"]
    writes = plane.operator.mirror.writes["status"]
    await asyncio.sleep(1.0)  # five passes: a refusal is not tried again until the spec changes
    assert plane.operator.mirror.writes["status"] == writes
    assert not [d for d in (await plane.service.store.all(SANDBOXES)).values() if d["tenant"] == "team-b"]
    await plane.kubectl("delete", "sandbox", "phone", "--timeout=30s")
    assert await plane.obj(res.SANDBOXES, "phone") is None


async def test_a_tenant_outside_declared_tenants_is_refused(plane: KubectlPlane) -> None:
    mirror = plane.operator.mirror
    settings = mirror.settings
    mirror.settings = settings.model_copy(update={"declared_tenants": ("team-a",)})
    try:
        await plane.apply(_sandbox("intruder", tenant="team-z"))

        async def refused() -> dict[str, Any] | None:
            got = await plane.status("intruder")
            return got if got.get("phase") == "Failed" else None

        await eventually(refused, 15, "the Sandbox of another tenant refused")
    finally:
        mirror.settings = settings
    status = await refused()
    assert status is not None and _condition(status, "Ready")["reason"] == "TenantNotAllowed"
    assert "team-z" in status["message"]
    assert not [d for d in (await plane.service.store.all(SANDBOXES)).values() if d["tenant"] == "team-z"]
    await plane.kubectl("delete", "sandbox", "intruder", "--timeout=30s")


async def test_a_sandbox_whose_finalizer_was_removed_by_hand_still_ends(plane: KubectlPlane) -> None:
    """The object gone without the operator: the cluster's garbage collector removes its pod (the ownerReference),
    and the operator, finding a record whose object is gone, deletes the sandbox."""
    await plane.apply(_sandbox("scratch", tenant="team-c"))
    await plane.kubectl("wait", "--for=condition=Ready", "sandbox/scratch", "--timeout=90s", timeout=100)
    status = await plane.status("scratch")
    obj = await plane.obj(res.SANDBOXES, "scratch")
    assert obj is not None
    controller = {"apiVersion": res.API_VERSION, "kind": "Sandbox", "name": "scratch",
                  "uid": obj["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}  # fmt: skip
    await eventually_owned(plane.kube, status["pod"], controller)
    await plane.kubectl("patch", "sandbox", "scratch", "--type=merge", "-p", '{"metadata":{"finalizers":null}}')
    await plane.kubectl("delete", "sandbox", "scratch", "--timeout=30s")
    assert await _no_pod(plane, status["pod"])  # the garbage collector took it with its owner
    gone = lambda: plane.service.store.get(SANDBOXES, status["sandboxId"])  # noqa: E731
    await eventually(lambda: _none(gone()), 15, "the orphaned sandbox deleted")


async def _none(value: Any) -> bool:
    return await value is None


async def test_kubectl_scale_sandboxpool_resizes_the_warm_pool(plane: KubectlPlane) -> None:
    spec = SandboxSpec(kind="terminal")
    key = pool_key(spec, plane.backend.image_for(spec))
    selector = res.pool_selector(key)
    assert "created" in await plane.kubectl("apply", "--validate=false", "-f", POOL_YAML)

    async def warm(count: int) -> bool:
        replicas = await plane.kubectl("get", "sandboxpool", "terminal", "-o", "jsonpath={.status.replicas}")
        ready = len(await plane.service.store.items(key))
        return replicas == str(count) and ready == count and len(await plane.pods(selector)) == count

    await eventually(lambda: warm(1), 60, "the pool warm with 1")
    assert "scaled" in await plane.kubectl("scale", "sandboxpool", "terminal", "--replicas=3")
    await eventually(lambda: warm(3), 90, "the pool grown to 3")
    await plane.kubectl("wait", "--for=condition=Ready", "sandboxpool/terminal", "--timeout=30s", timeout=40)
    raw = f"/apis/{res.API_VERSION}/namespaces/{NAMESPACE}/sandboxpools/terminal/scale"
    scale = json.loads(await plane.kubectl("get", "--raw", raw))
    assert scale["spec"]["replicas"] == 3 and scale["status"] == {"replicas": 3, "selector": selector}
    warm_pods = await plane.pods(selector)
    assert {p["metadata"]["annotations"][ANNOTATION_SAFE_TO_EVICT] for p in warm_pods} == {"true"}
    assert "scaled" in await plane.kubectl("scale", "sandboxpool", "terminal", "--replicas=1")
    await eventually(lambda: warm(1), 60, "the pool scaled down to 1")  # the surplus warm pods removed
    assert plane.operator.pools.writes["trimmed"] == 2
    (row,) = _table(await plane.kubectl("get", "sandboxpools"))
    assert (row["NAME"], row["MIN"], row["MAX"]) == ("terminal", "1", "8")
    await plane.kubectl("delete", "sandboxpool", "terminal")
    await eventually(lambda: _drained(plane, key, selector), 60, "the pool drained, its pods removed")


async def test_a_sandboxpool_that_cannot_be_applied_says_why(plane: KubectlPlane) -> None:
    body = {"apiVersion": res.API_VERSION, "kind": "SandboxPool", "metadata": {"name": "ghost"},
            "spec": {"kind": "terminal", "min": 1, "snapshot": "team-a/none"}}  # fmt: skip
    await plane.apply(body)

    async def told() -> list[dict[str, str]] | None:
        rows = _table(await plane.kubectl("get", "sandboxpool", "ghost", "-o", "wide"))
        return rows if rows[0]["REASON"] == "NotApplied" else None

    await eventually(told, 15, "the pool's Ready condition saying it is not applied")
    (row,) = await told() or []
    assert row["MESSAGE"].startswith("no snapshot 'team-a/none'") and row["READY"] == "0"
    await plane.kubectl("delete", "sandboxpool", "ghost")


async def _drained(plane: KubectlPlane, key: str, selector: str) -> bool:
    return not await plane.service.store.items(key) and not await plane.pods(selector)


async def test_a_new_leader_finds_the_declared_sandbox_and_creates_no_second_one() -> None:
    """Two control planes share a store, on the fake API server in mode "simulate" (its simulated agent answers for
    the pods). The first creates a declared sandbox and stops leading; its status write is lost (removed here); the
    next leader finds the sandbox by the object's uid in its record's labels, writes the status again, and creates
    nothing. A ``kubectl delete`` made while nobody leads is carried out by the next leader (the finalizer)."""
    kube = FakeKube(mode="simulate", owner=K8S_OWNER, namespaces=(NAMESPACE,), agents=True,
                    validate=harness.validate_custom)  # fmt: skip
    await asyncio.to_thread(kube.start)
    store = await EmbeddedStore.open(None, logger=LOGGER)
    api = await KubeApi.connect(k8s_config(kube))
    first, second = _replica(kube, store), _replica(kube, store)
    try:
        await kube.install_crds(crd_docs())
        for replica in (first, second):
            await replica.service.start()
        first.start()
        await eventually(lambda: first.operator.running, 10, "the first replica leading")
        path = res.path(NAMESPACE, res.SANDBOXES)
        await api.create(path, _sandbox("job-7", tenant="team-d"), what="kubectl apply (its POST)")

        async def ready() -> dict[str, Any] | None:
            obj = await api.get(f"{path}/job-7", what="kubectl get")
            return obj if _condition(obj.get("status") or {}, "Ready").get("status") == "True" else None

        await eventually(ready, 20, "the declared sandbox Ready")
        sandbox_id = ((await ready()) or {})["status"]["sandboxId"]
        await first.stop()
        await api.merge_patch(f"{path}/job-7/status", {"status": None}, what="lose the status")

        second.start()
        await eventually(ready, 20, "the next leader's status, Ready again")
        assert ((await ready()) or {})["status"]["sandboxId"] == sandbox_id
        records = [d for d in (await store.all(SANDBOXES)).values() if d["tenant"] == "team-d"]
        assert [d["id"] for d in records] == [sandbox_id]  # the one sandbox, found again: none created
        assert second.operator.mirror.writes["declared"] == 0  # it was taken on already

        await second.stop()  # nobody leads
        await api.delete(f"{path}/job-7", what="kubectl delete sandbox")
        assert await store.get(SANDBOXES, sandbox_id) is not None  # Terminating, held for a leader
        third = _replica(kube, store)
        await third.service.start()
        third.start()
        try:
            await eventually(lambda: _gone(api, f"{path}/job-7"), 20, "the next leader ending it, releasing it")
            assert await store.get(SANDBOXES, sandbox_id) is None
        finally:
            await third.stop()
            await third.service.close()
        assert kube.store is not None and kube.store.refused == []
    finally:
        for replica in (first, second):
            await replica.stop()
            await replica.service.close()
        await api.close()
        await store.close()
        await asyncio.to_thread(kube.close)


async def test_a_declared_sandbox_over_its_tenants_quota_waits_pending_for_room() -> None:
    """The admission of the API: tenant team-q may hold one sandbox. Of two declared, one runs and the other is
    Pending (reason CapacityExhausted, the quota's message), tried again every declared_retry_s; deleting the first
    makes room, and the second runs."""
    kube = FakeKube(mode="simulate", owner=K8S_OWNER, namespaces=(NAMESPACE,), agents=True,
                    validate=harness.validate_custom)  # fmt: skip
    await asyncio.to_thread(kube.start)
    store = await EmbeddedStore.open(None, logger=LOGGER)
    api = await KubeApi.connect(k8s_config(kube))
    backend = KubernetesBackend(k8s_config(kube, agent_port=kube.agent_port, manage_network_policies=False))
    service = SandboxService(backend, store, logger=LOGGER, quotas=QuotaBook({"team-q": Quota(max_sandboxes=1)}))
    lifecycle = Lifecycle(service, LifecycleSettings(tick_s=0.1, health_interval_s=0.5), logger=LOGGER)
    settings = OperatorSettings(interval_s=0.1, declared_retry_s=0.3)
    replica = Replica(service, lifecycle, Operator(service, lifecycle, backend, settings=settings, logger=LOGGER))
    path = res.path(NAMESPACE, res.SANDBOXES)

    async def phases() -> dict[str, tuple[str, str]]:
        listing = await api.list(path, what="kubectl get sandboxes")
        found = {o["metadata"]["name"]: o.get("status") or {} for o in listing["items"]}
        return {n: (st.get("phase", ""), _condition(st, "Ready").get("reason", "")) for n, st in found.items()}

    try:
        await kube.install_crds(crd_docs())
        await service.start()
        replica.start()
        await eventually(lambda: replica.operator.running, 10, "the replica leading")
        for name in ("q-1", "q-2"):
            await api.create(path, _sandbox(name, tenant="team-q"), what="kubectl apply (its POST)")

        async def one_each() -> bool:
            return sorted((await phases()).values()) == [("Pending", "CapacityExhausted"), ("Running", "Healthy")]

        await eventually(one_each, 20, "one running, the other pending for the quota")
        now = await phases()
        running = next(name for name, (phase, _) in now.items() if phase == "Running")
        pending = next(name for name in now if name != running)
        status = (await api.get(f"{path}/{pending}", what="kubectl get"))["status"]
        assert "quota" in status["message"] and "tried again in 0.3 s" in status["message"]
        await api.delete(f"{path}/{running}", what="kubectl delete sandbox")
        await eventually(lambda: _gone(api, f"{path}/{running}"), 20, "the first ended, its object gone")
        await eventually(lambda: _phase_is(phases, pending, "Running"), 20, "the pending one running once room freed")
        assert [d["tenant"] for d in (await store.all(SANDBOXES)).values()] == ["team-q"]
        assert kube.store is not None and kube.store.refused == []
    finally:
        await replica.stop()
        for doc in (await store.all(SANDBOXES)).values():
            await service.delete(replica.operator.mirror.operator, doc["id"])
        await service.close()
        await api.close()
        await store.close()
        await asyncio.to_thread(kube.close)


async def _phase_is(phases: Any, name: str, phase: str) -> bool:
    return bool((await phases()).get(name, ("", ""))[0] == phase)


async def _gone(api: KubeApi, path: str) -> bool:
    try:
        await api.get(path, what="kubectl get")
    except NotFound:
        return True
    return False


def test_the_documented_sandbox_yaml_is_the_example_applied_here() -> None:
    """docs/kubernetes.md shows the example file this module applies, and it is valid for the CRD."""
    docs = (harness.ROOT / "docs" / "kubernetes.md").read_text()
    section = docs.split("## Sandboxes through kubectl", 1)[1]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    example = yaml.safe_load(SANDBOX_YAML.read_text())
    assert yaml.safe_load(block) == example
    harness.validate_custom(example)
    harness.validate_custom(yaml.safe_load(POOL_YAML.read_text()))
    assert f"apply -f {SANDBOX_YAML.relative_to(harness.ROOT)}" in section


async def test_every_object_written_matched_its_crd(plane: KubectlPlane) -> None:
    """Runs last: the fake checked each write against the CRD schema (a 422 would also have kept an object above
    from its state)."""
    store = plane.kube.store
    assert store is not None
    assert store.refused == [] and store.validated >= 10, (store.refused, store.validated)
    writes = plane.operator.mirror.writes
    assert writes["declared"] >= 3 and writes["owner"] >= 2 and writes["finalizer"] >= 2, writes
