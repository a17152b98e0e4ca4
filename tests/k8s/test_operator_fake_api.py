"""The fake API server's custom resources, as the operator relies on them, through the real kubernetes_asyncio client
over HTTP: CRDs installed by creating them (the chart's own files), the status and scale subresources the CRDs
declare, metadata.generation, finalizers, watches, schema defaults and the CRD schema as a validator (422)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from sandbox.backends.kubernetes.api import KubeApi
from sandbox.errors import FailedPrecondition, InvalidArgument, NotFound
from sandbox.operator import resources as res
from sandbox.testing.fake_kube import FakeKube
from tests.k8s import harness
from tests.k8s.fake_api_fixtures import K8S_OWNER, NAMESPACE, k8s_config
from tests.k8s.harness import crd_docs

CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
MERGE = "application/merge-patch+json"


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def fake() -> AsyncIterator[FakeKube]:
    kube = FakeKube(mode="simulate", owner=K8S_OWNER, namespaces=(NAMESPACE,), validate=harness.validate_custom)
    await asyncio.to_thread(kube.start)
    try:
        yield kube
    finally:
        await asyncio.to_thread(kube.close)


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def api(fake: FakeKube) -> AsyncIterator[KubeApi]:
    client = await KubeApi.connect(k8s_config(fake))
    with contextlib.suppress(FailedPrecondition):  # another test of the module installed them
        for crd in crd_docs():
            await client.create(CRD_PATH, crd, what="install a CRD")
    yield client
    await client.close()


def _pool(name: str, **spec: Any) -> dict[str, Any]:
    body = {"kind": "terminal", "min": 2, **spec}
    return {"apiVersion": res.API_VERSION, "kind": "SandboxPool", "metadata": {"name": name}, "spec": body}


def _sandbox(name: str, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": res.API_VERSION,
        "kind": "Sandbox",
        "metadata": {"name": name, **meta},
        "spec": {"kind": "terminal", "tenant": "alice"},
        "status": {"state": "running"},
    }


async def test_a_kind_is_served_once_its_crd_exists(fake: FakeKube) -> None:
    other = FakeKube(mode="simulate", owner=K8S_OWNER, namespaces=(NAMESPACE,))
    await asyncio.to_thread(other.start)
    client = await KubeApi.connect(k8s_config(other))
    try:
        with pytest.raises(NotFound):
            await client.list(res.path(NAMESPACE, res.SANDBOXES), what="list sandboxes")
        crd = crd_docs()[0]
        await client.create(CRD_PATH, crd, what="install a CRD")
        listing = await client.list(res.path(NAMESPACE, res.SANDBOXES), what="list sandboxes")
        assert listing["kind"] == "SandboxList" and listing["items"] == []
        groups = await client.get("/apis", what="discovery")
        assert {"sandbox.platform.io", "apiextensions.k8s.io"} <= {g["name"] for g in groups["groups"]}
        found = await client.get(f"/apis/{res.API_VERSION}", what="discovery")
        assert {"sandboxes", "sandboxes/status"} <= {r["name"] for r in found["resources"]}
        with pytest.raises(NotFound):  # a custom resource is not served under the core group
            await client.list(f"/api/v1/namespaces/{NAMESPACE}/sandboxes", what="list sandboxes")
        await client.delete(f"{CRD_PATH}/{crd['metadata']['name']}", what="remove the CRD")
        with pytest.raises(NotFound):
            await client.list(res.path(NAMESPACE, res.SANDBOXES), what="list sandboxes")
    finally:
        await client.close()
        await asyncio.to_thread(other.close)


async def test_status_is_written_through_its_subresource_only(api: KubeApi) -> None:
    path = res.path(NAMESPACE, res.SANDBOXES)
    made = await api.create(path, _sandbox("sb-term-000000000001"), what="create")
    assert "status" not in made and made["metadata"]["generation"] == 1  # a create drops the status
    item = f"{path}/sb-term-000000000001"
    ignored = await api.merge_patch(item, {"status": {"state": "unhealthy"}}, what="patch")
    assert "status" not in ignored and ignored["metadata"]["generation"] == 1
    status = {"status": {"state": "running", "health": "Healthy"}, "spec": {"tenant": "mallory"}}
    written = await api.merge_patch(f"{item}/status", status, what="status")
    assert written["status"] == {"state": "running", "health": "Healthy"} and written["spec"]["tenant"] == "alice"
    assert written["metadata"]["generation"] == 1
    changed = await api.merge_patch(item, {"spec": {"ttlSeconds": 60}}, what="patch")
    assert changed["metadata"]["generation"] == 2 and changed["status"]["health"] == "Healthy"
    labelled = await api.merge_patch(item, {"metadata": {"labels": {"a": "b"}}}, what="patch")
    assert labelled["metadata"]["generation"] == 2  # metadata is not the spec
    await api.delete(item, what="delete")


async def test_the_scale_subresource_reads_and_writes_spec_min(api: KubeApi) -> None:
    path = res.path(NAMESPACE, res.POOLS)
    made = await api.create(path, _pool("terminal"), what="create")
    assert made["spec"] == {"kind": "terminal", "min": 2, "max": 10, "maxStarting": 4}  # the schema's defaults
    item = f"{path}/terminal"
    await api.merge_patch(f"{item}/status", {"status": {"replicas": 2, "selector": "x=y"}}, what="status")
    scale = await api.get(f"{item}/scale", what="scale")
    assert (scale["apiVersion"], scale["kind"]) == ("autoscaling/v1", "Scale")
    assert scale["spec"] == {"replicas": 2} and scale["status"] == {"replicas": 2, "selector": "x=y"}
    scaled = await api.merge_patch(f"{item}/scale", {"spec": {"replicas": 3}}, what="kubectl scale")  # its request
    assert scaled["spec"]["replicas"] == 3
    pool = await api.get(item, what="get")
    assert pool["spec"]["min"] == 3 and pool["metadata"]["generation"] == 2
    put = {**scaled, "spec": {"replicas": 1}}
    assert (await api.call("PUT", f"{item}/scale", what="scale", body=put))["spec"]["replicas"] == 1
    with pytest.raises(InvalidArgument, match="replicas"):
        await api.merge_patch(f"{item}/scale", {"spec": {"replicas": -1}}, what="scale")
    with pytest.raises(InvalidArgument, match="does not take"):  # no strategic merge patch on custom resources
        await api.call("PATCH", item, what="patch", body={"spec": {"min": 1}},
                       content_type="application/strategic-merge-patch+json")  # fmt: skip
    await api.delete(item, what="delete")


async def test_the_crd_schema_refuses_what_the_api_server_would(api: KubeApi, fake: FakeKube) -> None:
    path = res.path(NAMESPACE, res.POOLS)
    with pytest.raises(InvalidArgument, match="is not one of"):
        await api.create(path, _pool("gpu", kind="gpu"), what="create")
    with pytest.raises(InvalidArgument, match="Additional properties"):
        await api.create(path, _pool("typo", replicas=3), what="create")
    await api.create(path, _pool("ok"), what="create")
    with pytest.raises(InvalidArgument, match="less than the minimum"):
        await api.merge_patch(f"{path}/ok/status", {"status": {"ready": -1}}, what="status")
    assert fake.store is not None and fake.store.validated > 0 and len(fake.store.refused) == 3
    await api.delete(f"{path}/ok", what="delete")


async def test_a_finalizer_holds_an_object_until_it_is_removed(api: KubeApi) -> None:
    path = res.path(NAMESPACE, res.SANDBOXES)
    made = await api.create(path, _sandbox("sb-term-000000000002", finalizers=[res.FINALIZER]), what="create")
    version = made["metadata"]["resourceVersion"]
    events: list[tuple[str, dict[str, Any]]] = []

    async def follow() -> None:
        async for kind, obj in api.watch(path, what="watch", resource_version=version, timeout_s=5):
            events.append((kind, obj))
            if kind == "DELETED":
                return

    watching = asyncio.create_task(follow())
    item = f"{path}/sb-term-000000000002"
    marked = await api.delete(item, what="kubectl delete")
    assert marked["metadata"]["deletionTimestamp"] and marked["metadata"]["finalizers"] == [res.FINALIZER]
    assert (await api.get(item, what="get"))["metadata"]["deletionTimestamp"]  # still there: Terminating
    await api.merge_patch(item, {"metadata": {"finalizers": None}}, what="release")
    with pytest.raises(NotFound):
        await api.get(item, what="get")
    await asyncio.wait_for(watching, 10)
    # as the API server: the write that removes the last finalizer deletes the object (one DELETED event)
    assert [kind for kind, _ in events] == ["MODIFIED", "DELETED"]
    assert events[0][1]["metadata"]["deletionTimestamp"]


async def test_kubectl_gets_scales_and_deletes_the_custom_resources() -> None:
    """The real kubectl (scripts/k8s_tools.sh) against the fake API server: the CRDs' printer columns, short names,
    ``kubectl scale`` through the scale subresource, and ``kubectl delete`` of a Sandbox that a finalizer holds.
    No token: kubectl sends none over plain HTTP. Schema validation is the server's (--validate=false: the fake has
    no OpenAPI document)."""
    kube = FakeKube(mode="simulate", owner=K8S_OWNER, namespaces=(NAMESPACE,), token="",
                    validate=harness.validate_custom)  # fmt: skip
    await asyncio.to_thread(kube.start)
    store = kube.store
    assert store is not None

    async def kubectl(*args: str) -> str:
        cmd: list[str | Path] = [harness.KUBECTL, "--kubeconfig", kube.kubeconfig, "-n", NAMESPACE, *args]
        done = await asyncio.to_thread(harness.run, cmd)
        return done.stdout

    try:
        await kube.install_crds(crd_docs())
        sandbox = _sandbox("sb-term-0123456789ab", finalizers=[res.FINALIZER])
        await kube.call(store.create, res.SANDBOXES, NAMESPACE, sandbox)
        ready = {"type": "Ready", "status": "True", "reason": "Healthy", "message": "all well",
                 "lastTransitionTime": "2026-11-29T09:00:00Z"}  # fmt: skip
        status = {"status": {"state": "running", "kind": "terminal", "tenant": "alice", "pod": "sbx-x-in-term-1",
                             "node": "node-7", "health": "Healthy", "leaseExpiresAt": "2030-01-01T00:00:00Z",
                             "message": "", "phase": "Running", "sandboxId": "sb-term-0123456789ab",
                             "conditions": [{"type": "Other", "status": "False"}, ready]}}  # fmt: skip
        await kube.call(store.patch, res.SANDBOXES, NAMESPACE, "sb-term-0123456789ab", status, strategic=False,
                        sub="status")  # fmt: skip
        header, row = (await kubectl("get", "sandboxes")).splitlines()
        assert header.split() == ["NAME", "KIND", "STATE", "TENANT", "NODE", "HEALTH", "EXPIRES", "AGE"]
        assert row.split()[:7] == ["sb-term-0123456789ab", "terminal", "running", "alice", "node-7", "Healthy",
                                   "2030-01-01T00:00:00Z"]  # fmt: skip
        wide = (await kubectl("get", "sbx", "-o", "wide")).splitlines()
        # the wide columns: the phase, the Ready condition (found by type in the list), its reason and message
        assert wide[0].split() == [*header.split()[:-1], "PHASE", "READY", "REASON", "SANDBOX", "POD", "MESSAGE",
                                   "AGE"]  # fmt: skip
        assert wide[1].split()[7:13] == ["Running", "True", "Healthy", "sb-term-0123456789ab", "sbx-x-in-term-1",
                                         "all"]  # fmt: skip
        assert "sbx-x-in-term-1   all well" in wide[1]
        manifest = os.path.join(kube.workdir, "pool.json")
        with open(manifest, "w") as f:
            json.dump(_pool("terminal", max=8), f)
        assert "created" in await kubectl("create", "--validate=false", "-f", manifest)
        assert "scaled" in await kubectl("scale", "sandboxpool", "terminal", "--replicas=5")
        assert await kubectl("get", "sbxpool", "terminal", "-o", "jsonpath={.spec.min}") == "5"
        assert (await kubectl("get", "sandboxpools")).splitlines()[0].split() == [
            "NAME", "KIND", "MIN", "MAX", "READY", "STARTING", "AGE"]  # fmt: skip
        await kubectl("delete", "sandbox", "sb-term-0123456789ab", "--wait=false")
        held = await kube.call(store.get, res.SANDBOXES, NAMESPACE, "sb-term-0123456789ab")
        assert held["metadata"]["deletionTimestamp"]  # Terminating: the finalizer holds it for the control plane
        assert store.refused == []
    finally:
        await asyncio.to_thread(kube.close)
