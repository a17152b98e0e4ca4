"""The operator's view through the fake API server with pods realized as containers of ``sandbox/terminal:latest``:
the service, its lifecycle loop (the leader) and the operator run in-process over the Kubernetes backend, the CRDs
are the chart's own files, and every Sandbox and SandboxPool object written is checked against its CRD's
openAPIV3Schema with jsonschema (the fake answers 422 to what fails, and the test fails on any)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import docker
import pytest
import pytest_asyncio

from sandbox.backends.kubernetes.api import KubeApi
from sandbox.backends.kubernetes.backend import KubernetesBackend
from sandbox.errors import NotFound
from sandbox.models import SandboxSpec
from sandbox.operator import resources as res
from sandbox.service import Principal
from sandbox.service.records import SANDBOXES, pool_key
from sandbox.testing.fake_kube import FakeKube
from tests.k8s import harness
from tests.k8s.conftest import Plane, control_plane
from tests.k8s.fake_api_fixtures import K8S_OWNER, NAMESPACE, docker_engine, k8s_config, owned_containers
from tests.k8s.test_operator_fake_api import crd_docs
from tests.polling import eventually

__all__ = ["docker_engine"]

LOGGER = logging.getLogger("sandbox.test.k8s.operator")
ALICE = Principal("alice")
SPEC = SandboxSpec(kind="terminal", labels={"run": "exp-7"})


@dataclass
class FakePlane(Plane):
    """The control plane over the fake API server (``kube``), which realizes pods as containers."""

    kube: FakeKube

    async def pods(self, selector: str = "") -> list[str]:
        assert self.kube.store is not None
        items, _ = await self.kube.call(self.kube.store.list, "pods", NAMESPACE, labels=selector)
        return sorted(p["metadata"]["name"] for p in items if not p["metadata"].get("deletionTimestamp"))


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def plane(docker_engine: docker.DockerClient) -> AsyncIterator[FakePlane]:
    kube = FakeKube(mode="realize", owner=K8S_OWNER, namespaces=(NAMESPACE, "sandbox-system"),
                    restart_backoff_s=0.5, validate=harness.validate_custom)  # fmt: skip
    await asyncio.to_thread(kube.start)
    try:
        await kube.install_crds(crd_docs())
        backend = KubernetesBackend(k8s_config(kube))
        api = await KubeApi.connect(k8s_config(kube))
        running = control_plane(backend, api, NAMESPACE, LOGGER, tick_s=0.2, health_interval_s=1, leading_within_s=30)
        try:
            async with running as common:
                yield FakePlane(**vars(common), kube=kube)
        finally:
            await api.close()
    finally:
        left = await asyncio.to_thread(kube.close)
        stray = await asyncio.to_thread(owned_containers, docker_engine)
        assert not left and not stray, f"pods or containers left: {left} {stray}"


def _validated(plane: FakePlane, *objs: dict[str, Any] | None) -> None:
    for obj in objs:
        assert obj is not None
        harness.validate_custom(obj)


async def test_a_sandbox_appears_as_a_sandbox_object(plane: FakePlane) -> None:
    info = await plane.service.create(ALICE, SPEC)
    record = await plane.service.records.read(info.id)
    assert record is not None

    async def mirrored() -> dict[str, Any] | None:
        obj = await plane.obj(res.SANDBOXES, info.id)
        return obj if obj and (obj.get("status") or {}).get("health") == "Healthy" else None

    await eventually(mirrored, 30, "the sandbox mirrored, healthy")
    obj = await mirrored()
    assert obj is not None
    _validated(plane, obj)
    status, spec, meta = obj["status"], obj["spec"], obj["metadata"]
    assert status["state"] == "running" and status["pod"] == plane.backend.pod_name(record.instance)
    assert status["node"] == "fake-node" and status["kind"] == "terminal" and status["tenant"] == "alice"
    assert status["message"] == "" and status["replacements"] == 0 and status["observedGeneration"] == 1
    expires = datetime.fromisoformat(status["leaseExpiresAt"].replace("Z", "+00:00")).timestamp()
    assert abs(expires - record.expires_at) < 1
    assert spec["kind"] == "terminal" and spec["tenant"] == "alice" and spec["labels"] == {"run": "exp-7"}
    assert spec["image"] == plane.backend.image_for(SPEC) and spec["ttlSeconds"] == int(SPEC.ttl_s)
    assert meta["labels"][res.LABEL_TENANT] == "alice" and meta["finalizers"] == [res.FINALIZER]
    ready = {c["type"]: c for c in status["conditions"]}["Ready"]
    assert (status["phase"], status["sandboxId"], ready["status"], ready["reason"]) == (
        "Running", info.id, "True", "Healthy")  # fmt: skip
    # its pod becomes the object's dependent, and not to be evicted by the cluster autoscaler
    controller = {"apiVersion": res.API_VERSION, "kind": "Sandbox", "name": info.id, "uid": meta["uid"],
                  "controller": True, "blockOwnerDeletion": True}  # fmt: skip
    pod = await eventually_owned(plane.kube, status["pod"], controller)
    assert pod["metadata"]["annotations"]["cluster-autoscaler.kubernetes.io/safe-to-evict"] == "false"
    # a fleet that does not change costs no write
    before = dict(plane.operator.mirror.writes)
    await asyncio.sleep(1.0)  # five passes of the operator (interval 0.2 s)
    assert dict(plane.operator.mirror.writes) == before
    await plane.service.delete(ALICE, info.id)
    await eventually(lambda: _gone(plane, res.SANDBOXES, info.id), 15, "the object of the deleted sandbox removed")


async def eventually_owned(kube: FakeKube, pod_name: str, controller: dict[str, Any]) -> dict[str, Any]:
    """The pod, once its only ownerReference is ``controller`` (the operator's next write after the status)."""
    store = kube.store
    assert store is not None

    async def owned() -> dict[str, Any] | None:
        pod = await kube.call(store.get, "pods", NAMESPACE, pod_name)
        return pod if pod["metadata"].get("ownerReferences") == [controller] else None

    await eventually(owned, 15, f"pod {pod_name} owned by its Sandbox")
    found = await owned()
    assert found is not None
    return found


async def _gone(plane: FakePlane, plural: str, name: str) -> bool:
    return await plane.obj(plural, name) is None


async def test_kubectl_delete_sandbox_ends_the_sandbox(plane: FakePlane) -> None:
    info = await plane.service.create(ALICE, SPEC)
    record = await plane.service.records.read(info.id)
    assert record is not None
    pod = plane.backend.pod_name(record.instance)
    await eventually(lambda: plane.obj(res.SANDBOXES, info.id), 15, "the sandbox mirrored")
    await plane.api.delete(res.path(NAMESPACE, res.SANDBOXES, info.id), what="kubectl delete sandbox")
    await eventually(lambda: _gone(plane, res.SANDBOXES, info.id), 30, "the Sandbox object gone")
    with pytest.raises(NotFound):
        await plane.service.get(ALICE, info.id)
    await eventually(lambda: _pod_gone(plane, pod), 30, "the sandbox's pod removed")


async def _pod_gone(plane: FakePlane, pod: str) -> bool:
    return pod not in await plane.pods()


async def test_a_failing_pod_shows_in_the_status_with_the_engines_word(plane: FakePlane) -> None:
    info = await plane.service.create(ALICE, SPEC)
    record = await plane.service.records.read(info.id)
    assert record is not None
    await eventually(lambda: plane.obj(res.SANDBOXES, info.id), 15, "the sandbox mirrored")
    await plane.kube.kill_container(plane.backend.pod_name(record.instance))  # behind the API's back

    async def failing() -> dict[str, Any] | None:
        obj = await plane.obj(res.SANDBOXES, info.id)
        return obj if obj and obj.get("status", {}).get("state") == "unhealthy" else None

    await eventually(failing, 30, "the sandbox marked unhealthy in its Sandbox object")
    obj = await failing()
    assert obj is not None
    _validated(plane, obj)
    assert obj["status"]["health"] == "Failing"
    pod = plane.backend.pod_name(record.instance)
    # The pod's own detail is in the reason: its container terminated, or (when the fake kubelet was quicker than
    # the probe) restarted from the image with the sandbox's files lost. Either is the engine's word for it.
    message = obj["status"]["message"]
    assert f"exit code 137): pod {pod}: " in message, message
    assert "its container" in message.split(f"pod {pod}: ", 1)[1], message
    assert (await plane.service.get(ALICE, info.id)).error == obj["status"]["message"]
    await plane.service.delete(ALICE, info.id)


async def test_a_sandbox_object_made_by_hand_is_ignored_when_declared_sandboxes_are_off(plane: FakePlane) -> None:
    """``operator.declared`` false: a Sandbox applied by hand starts nothing (tests/k8s/test_declarative.py: on)."""
    mirror = plane.operator.mirror
    settings = mirror.settings
    mirror.settings = settings.model_copy(update={"declared": False})
    name = "sb-term-0000deadbeef"
    body = {"apiVersion": res.API_VERSION, "kind": "Sandbox", "metadata": {"name": name},
            "spec": {"kind": "terminal", "tenant": "mallory"}}  # fmt: skip
    pods = await plane.pods()
    try:
        await plane.api.create(res.path(NAMESPACE, res.SANDBOXES), body, what="kubectl create")

        async def told() -> bool:
            obj = await plane.obj(res.SANDBOXES, name)
            return bool(obj and obj.get("status", {}).get("message") == res.IGNORED)

        await eventually(told, 15, "the hand-made object's status saying it is ignored")
    finally:
        mirror.settings = settings
    assert await plane.service.store.get(SANDBOXES, name) is None
    assert set(await plane.pods()) <= set(pods)  # no pod started for it (the last test's may be going)
    obj = await plane.obj(res.SANDBOXES, name)
    _validated(plane, obj)
    assert obj is not None and not res.is_declared(obj) and not obj["metadata"].get("finalizers")
    await plane.api.delete(res.path(NAMESPACE, res.SANDBOXES, name), what="kubectl delete")
    assert await _gone(plane, res.SANDBOXES, name)  # no finalizer of ours: it goes at once


async def test_a_sandbox_pool_object_is_a_warm_pool(plane: FakePlane) -> None:
    spec = SandboxSpec(kind="terminal")
    key = pool_key(spec, plane.backend.image_for(spec))
    selector = res.pool_selector(key)
    body = {"apiVersion": res.API_VERSION, "kind": "SandboxPool", "metadata": {"name": "terminal"},
            "spec": {"kind": "terminal", "min": 2, "max": 4}}  # fmt: skip
    await plane.api.create(res.path(NAMESPACE, res.POOLS), body, what="kubectl apply")

    async def status(ready: int) -> dict[str, Any] | None:
        obj = await plane.obj(res.POOLS, "terminal")
        got = (obj or {}).get("status") or {}
        return obj if (got.get("ready"), got.get("replicas")) == (ready, ready) else None

    await eventually(lambda: status(2), 60, "the pool filled to 2, its status saying so")
    _validated(plane, await status(2))
    assert (await status(2) or {})["status"]["selector"] == selector
    first = await plane.service.store.items(key)
    assert len(first) == 2 and len(await plane.pods(selector)) == 2
    scale = res.path(NAMESPACE, res.POOLS, "terminal", "scale")
    scaled = await plane.api.merge_patch(scale, {"spec": {"replicas": 3}}, what="kubectl scale --replicas=3")
    assert scaled["spec"]["replicas"] == 3
    await eventually(lambda: status(3), 60, "the pool grown to 3")
    after = await plane.service.store.items(key)
    assert set(first) < set(after) and len(after) == 3  # one added, the first two kept
    assert (await plane.api.get(scale, what="kubectl get --subresource=scale"))["status"]["replicas"] == 3
    info = await plane.service.create(ALICE, spec)  # a create of that spec takes a warm instance
    record = await plane.service.records.read(info.id)
    assert record is not None and record.instance in after
    await plane.service.delete(ALICE, info.id)
    await plane.api.delete(res.path(NAMESPACE, res.POOLS, "terminal"), what="kubectl delete sandboxpool")
    await eventually(lambda: _drained(plane, key, selector), 60, "the pool drained, its pods removed")
    kept = plane.service.pools.keys()
    assert key not in kept


async def _drained(plane: FakePlane, key: str, selector: str) -> bool:
    return not await plane.service.store.items(key) and not await plane.pods(selector)


async def test_every_object_written_matched_its_crd(plane: FakePlane) -> None:
    """Runs last: the fake checked each write against the CRD schema (what failed was answered 422, which the
    operator logs and retries, so a failure would also have kept an object from its state above)."""
    store = plane.kube.store
    assert store is not None
    assert store.refused == [] and store.validated >= 10, (store.refused, store.validated)
    writes = plane.operator.mirror.writes
    assert writes["create"] >= 3 and writes["status"] >= 4 and writes["delete"] >= 1, writes
    assert plane.operator.pools.writes["status"] >= 3
