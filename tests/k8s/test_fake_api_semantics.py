"""The fake API server speaks the Kubernetes semantics the client relies on: over real HTTP, through the real
kubernetes_asyncio client (its typed API and its own Watch, as well as the backend's KubeApi), never a mock.
Mode "simulate": no container is involved."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio import watch as k8s_watch
from kubernetes_asyncio.client.exceptions import ApiException

from sandbox.backends.base import RuntimeState
from sandbox.backends.kubernetes import manifests
from sandbox.backends.kubernetes.api import KubeApi, core_path
from sandbox.backends.kubernetes.backend import KubernetesBackend
from sandbox.errors import BackendError, FailedPrecondition, InvalidArgument, NotFound, Unavailable
from sandbox.models import SandboxSpec
from sandbox.testing.fake_kube import FakeKube
from tests.k8s.fake_api_fixtures import NAMESPACE, RESTRICTED, sim_kube
from tests.k8s.fake_api_fixtures import k8s_config as backend_config
from tests.polling import eventually

__all__ = ["sim_kube"]

PODS = core_path(NAMESPACE, "pods")


def _pod(name: str, **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"app": "demo", **labels}},
        "spec": {"containers": [{"name": "main", "image": "sandbox/terminal:latest", "securityContext": RESTRICTED}]},
    }


@contextlib.asynccontextmanager
async def api_for(kube: FakeKube) -> Any:
    api = await KubeApi.connect(backend_config(kube))
    try:
        yield api
    finally:
        await api.close()


async def _collect(api: KubeApi, since: str, until: int, **filters: str) -> list[tuple[str, dict[str, Any]]]:
    seen: list[tuple[str, dict[str, Any]]] = []
    events = api.watch(PODS, what="watch", resource_version=since, timeout_s=10, **filters)
    async with contextlib.aclosing(events):
        async for kind, obj in events:
            seen.append((kind, obj))
            if len(seen) >= until:
                break
    return seen


async def test_a_watch_sees_added_modified_and_deleted_in_order(sim_kube: FakeKube) -> None:
    async with api_for(sim_kube) as api:
        since = (await api.list(PODS, what="list"))["metadata"]["resourceVersion"]
        watching = asyncio.create_task(_collect(api, since, 4, fields="metadata.name=w1"))
        await asyncio.sleep(0.2)
        await api.create(PODS, _pod("w1"), what="create")  # ADDED, then the scheduler's MODIFIED (Running)
        await api.create(PODS, _pod("other"), what="create")  # not selected by the watch
        await asyncio.sleep(0.1)
        await api.merge_patch(f"{PODS}/w1", {"metadata": {"annotations": {"a": "1"}}}, what="patch")
        await api.delete(f"{PODS}/w1", what="delete", grace_s=0)
        events = await asyncio.wait_for(watching, 10)
        await api.delete(f"{PODS}/other", what="delete", grace_s=0)
    assert [kind for kind, _ in events] == ["ADDED", "MODIFIED", "MODIFIED", "DELETED"]
    assert events[1][1]["status"]["phase"] == "Running" and events[1][1]["spec"]["nodeName"].startswith("sim-node-")
    assert events[2][1]["metadata"]["annotations"] == {"a": "1"}
    versions = [int(obj["metadata"]["resourceVersion"]) for _, obj in events]
    assert versions == sorted(versions) and len(set(versions)) == 4 and versions[0] > int(since)


async def test_the_libraries_own_typed_api_and_watch_understand_it(sim_kube: FakeKube) -> None:
    """kubernetes_asyncio's generated CoreV1Api and its Watch (not only the backend's dict calls) read the fake."""
    configuration = k8s_client.Configuration()
    await k8s_config.load_kube_config(config_file=sim_kube.kubeconfig, client_configuration=configuration)
    async with k8s_client.ApiClient(configuration) as api_client:
        version = await k8s_client.VersionApi(api_client).get_code()
        assert (version.major, version.minor) == ("1", "31")
        groups = await k8s_client.ApisApi(api_client).get_api_versions()
        assert "networking.k8s.io" in [g.name for g in groups.groups]
        v1 = k8s_client.CoreV1Api(api_client)
        assert "pods" in [r.name for r in (await v1.get_api_resources()).resources]
        created = await v1.create_namespaced_pod(NAMESPACE, _pod("typed"))
        assert created.metadata.uid and created.metadata.creation_timestamp is not None
        listing = await v1.list_namespaced_pod(NAMESPACE, label_selector="app=demo")
        assert "typed" in [p.metadata.name for p in listing.items]
        watcher = k8s_watch.Watch()
        kinds = []
        async with watcher.stream(v1.list_namespaced_pod, NAMESPACE, field_selector="metadata.name=typed",
                                  timeout_seconds=5) as stream:  # fmt: skip
            async for event in stream:
                kinds.append((event["type"], event["object"].status.phase))
                if event["object"].status.phase == "Running":
                    break
        assert kinds[0][0] == "ADDED" and kinds[-1][1] == "Running"
        patched = await v1.patch_namespaced_pod("typed", NAMESPACE, {"metadata": {"annotations": {"k": "v"}}})
        assert patched.metadata.annotations == {"k": "v"}  # a strategic merge patch, as the typed client sends
        with pytest.raises(ApiException) as missing:
            await v1.read_namespaced_pod("nobody", NAMESPACE)
        assert missing.value.status == 404 and json.loads(missing.value.body)["reason"] == "NotFound"
        await v1.delete_namespaced_pod("typed", NAMESPACE, grace_period_seconds=0)


async def test_errors_are_status_objects(sim_kube: FakeKube) -> None:
    headers = {"Authorization": f"Bearer {sim_kube.token}"}
    async with aiohttp.ClientSession(headers=headers) as http:
        async with http.get(f"{sim_kube.url}{PODS}/nobody") as response:
            body = await response.json()
            assert response.status == 404
            assert body["kind"] == "Status" and body["reason"] == "NotFound" and body["code"] == 404
        async with http.post(f"{sim_kube.url}{PODS}", json=_pod("twice")) as response:
            assert response.status == 201
        async with http.post(f"{sim_kube.url}{PODS}", json=_pod("twice")) as response:
            body = await response.json()
            assert (response.status, body["reason"], body["code"]) == (409, "AlreadyExists", 409)
        async with http.post(f"{sim_kube.url}{PODS}", json=_pod("Not_A_Name")) as response:
            assert response.status == 422 and (await response.json())["reason"] == "Invalid"
        async with http.get(f"{sim_kube.url}/api/v1/namespaces/{NAMESPACE}/widgets") as response:
            assert response.status == 404 and (await response.json())["kind"] == "Status"
        async with http.delete(f"{sim_kube.url}{PODS}/twice") as response:
            assert response.status == 200
    async with api_for(sim_kube) as api:  # the backend's side of the same answers
        with pytest.raises(NotFound, match="nobody"):
            await api.get(f"{PODS}/nobody", what="read pod nobody")
        await api.create(PODS, _pod("again"), what="create")
        with pytest.raises(FailedPrecondition, match="already exists"):
            await api.create(PODS, _pod("again"), what="create")
        with pytest.raises(InvalidArgument, match="Invalid value"):
            await api.create(PODS, _pod("bad", **{"sandbox.pool": "pool:x:y"}), what="create")
        await api.delete(f"{PODS}/again", what="delete", grace_s=0)


async def test_resource_versions_increase_and_stale_writes_conflict(sim_kube: FakeKube) -> None:
    async with api_for(sim_kube) as api:
        first = await api.create(PODS, _pod("rv"), what="create")
        patched = await api.merge_patch(f"{PODS}/rv", {"metadata": {"labels": {"x": "1"}}}, what="patch")
        assert int(patched["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])
        listed = await api.list(PODS, what="list")
        assert int(listed["metadata"]["resourceVersion"]) >= int(patched["metadata"]["resourceVersion"])
        stale = {"metadata": {"resourceVersion": first["metadata"]["resourceVersion"], "labels": {"x": "2"}}}
        with pytest.raises(FailedPrecondition, match="modified"):
            await api.merge_patch(f"{PODS}/rv", stale, what="patch")
        removed = await api.merge_patch(f"{PODS}/rv", {"metadata": {"labels": {"x": None}}}, what="patch")
        assert "x" not in removed["metadata"]["labels"]
        with pytest.raises(InvalidArgument, match="may not change"):
            await api.merge_patch(f"{PODS}/rv", {"spec": {"hostname": "elsewhere"}}, what="patch")
        await api.delete(f"{PODS}/rv", what="delete", grace_s=0)


async def test_selectors(sim_kube: FakeKube) -> None:
    async with api_for(sim_kube) as api:
        for name, tier in (("s1", "a"), ("s2", "b"), ("s3", "c")):
            await api.create(PODS, _pod(name, tier=tier), what="create")

        async def names(selector: str = "", fields: str = "") -> list[str]:
            found = await api.list(PODS, what="list", selector=selector, fields=fields)
            return [p["metadata"]["name"] for p in found["items"]]

        assert await names("tier=a") == ["s1"]
        assert await names("tier!=a,app=demo") == ["s2", "s3"]
        assert await names("tier in (a, c)") == ["s1", "s3"]
        assert await names("tier notin (a),tier") == ["s2", "s3"]
        assert await names("!tier") == []
        assert await names(fields="metadata.name=s2") == ["s2"]
        for name in ("s1", "s2", "s3"):
            await api.delete(f"{PODS}/{name}", what="delete", grace_s=0)


async def test_a_watch_from_a_version_too_old_is_told_410(sim_kube: FakeKube) -> None:
    store = sim_kube.store
    assert store is not None
    await sim_kube.call(setattr, store, "events", deque(store.events, maxlen=5))
    try:
        async with api_for(sim_kube) as api:
            since = (await api.list(PODS, what="list"))["metadata"]["resourceVersion"]
            for i in range(4):
                await api.create(PODS, _pod(f"old{i}"), what="create")  # 8 events: ADDED and the scheduler's
            with pytest.raises(Unavailable, match="too old"):
                await _collect(api, since, 1)
            for i in range(4):
                await api.delete(f"{PODS}/old{i}", what="delete", grace_s=0)
    finally:
        await sim_kube.call(setattr, store, "events", deque(store.events, maxlen=20_000))


async def test_deleting_a_pod_deletes_what_it_owns(sim_kube: FakeKube) -> None:
    async with api_for(sim_kube) as api:
        owner = await api.create(PODS, _pod("owner"), what="create")
        secret = {"metadata": {"name": "owned"}, "stringData": {"token": "s3cret"}, "immutable": True}
        secrets = core_path(NAMESPACE, "secrets")
        made = await api.create(secrets, secret, what="create")
        assert made["data"] == {"token": "czNjcmV0"} and "stringData" not in made
        await api.merge_patch(f"{secrets}/owned", manifests.owned_by_pod(owner), what="own")
        with pytest.raises(InvalidArgument, match="immutable"):
            await api.merge_patch(f"{secrets}/owned", {"data": {"token": "eA=="}}, what="change")
        await api.delete(f"{PODS}/owner", what="delete", grace_s=0)
        with pytest.raises(NotFound):
            await api.get(f"{secrets}/owned", what="read")


async def test_credentials_and_rbac_refusals_name_rbac(sim_kube: FakeKube) -> None:
    backend = KubernetesBackend(backend_config(sim_kube))
    sim_kube.forbid("create", "pods")
    try:
        with pytest.raises(BackendError, match="RBAC: forbidden"):
            await backend.create("in-term-00000000f0bd", SandboxSpec(kind="terminal"), ready_timeout=5)
        store = sim_kube.store
        assert store is not None
        secrets, _ = await sim_kube.call(store.list, "secrets", NAMESPACE)
        assert secrets == []  # the secret made before the refusal was removed
    finally:
        sim_kube.allow("create", "pods")
        await backend.close()
    wrong = await asyncio.to_thread(_kubeconfig_with_token, sim_kube, "not-the-token")
    intruder = KubernetesBackend(backend_config(sim_kube, kubeconfig=wrong))
    try:
        with pytest.raises(BackendError, match="RBAC: the API server did not accept"):
            await intruder.list_instances()
    finally:
        await intruder.close()


def _kubeconfig_with_token(kube: FakeKube, token: str) -> str:
    with open(kube.kubeconfig) as f:
        config = json.load(f)
    config["users"][0]["user"]["token"] = token
    path = f"{kube.kubeconfig}-wrong"
    with open(path, "w") as f:
        json.dump(config, f)
    return path


async def test_simulated_nodes_spread_pods_and_a_lost_node_fails_its_pods(sim_kube: FakeKube) -> None:
    """200 sandbox pods over 4 simulated nodes; the backend's one LIST sees them; a lost node's 50 are EXITED (and
    say why), the others stay RUNNING; claims attach and read back through the same pods."""
    backend = KubernetesBackend(backend_config(sim_kube))
    spec = SandboxSpec(kind="terminal")
    try:
        async with api_for(sim_kube) as api:
            ids = [f"in-term-{i:012x}" for i in range(200)]
            for instance in ids:
                pod = manifests.pod_manifest(backend.config, instance_id=instance, spec=spec, image="sandbox/t")
                await api.create(PODS, pod, what="create")
        await asyncio.sleep(0.2)
        listing = await backend.list_instances()
        assert len(listing) == 200 and {i.state for i in listing} == {RuntimeState.RUNNING}
        pods = await sim_kube.pods()
        nodes = {p["spec"]["nodeName"] for p in pods}
        assert nodes == {f"sim-node-{i}" for i in range(4)}
        assert await sim_kube.lose_node("sim-node-2") == 50
        lost = {p["metadata"]["labels"]["sandbox.instance"] for p in pods if p["spec"]["nodeName"] == "sim-node-2"}

        async def evicted() -> bool:  # not Ready at once; evicted after the suite's eviction_s (1 s)
            after = {i.id: i for i in await backend.list_instances()}
            return {i for i, s in after.items() if s.state is RuntimeState.EXITED} == lost and all(
                "its node was lost" in str(after[i].detail) for i in lost
            )

        await eventually(evicted, 10, "the lost node's pods evicted, and only them")
        kept = next(i for i in ids if i not in lost)  # the lost node's pods are being garbage collected
        await backend.set_claim(kept, {"id": "sb-term-1", "tenant": "alice"})
        assert (await backend.claims()) == {kept: {"id": "sb-term-1", "tenant": "alice"}}
        with pytest.raises(NotFound):
            await backend.set_claim("in-term-nobody", {"id": "x"})
        for instance in ids:
            await backend.destroy(instance)
        assert await backend.list_instances() == []
    finally:
        await backend.close()


async def test_history_older_than_its_window_is_gone(sim_kube: FakeKube) -> None:
    """The suite's history window (10 s): a watch from a version whose events were compacted away gets 410, as a
    client that came back after minutes would from a real API server."""
    store = sim_kube.store
    assert store is not None
    async with api_for(sim_kube) as api:
        since = (await api.list(PODS, what="list"))["metadata"]["resourceVersion"]
        await api.create(PODS, _pod("aging"), what="create")
        await sim_kube.call(setattr, store, "history_s", 0.0)  # compaction catches up with everything
        try:
            with pytest.raises(Unavailable, match="too old resource version"):
                await _collect(api, since, 1)
        finally:
            await sim_kube.call(setattr, store, "history_s", 10.0)
        await api.delete(f"{PODS}/aging", what="delete", grace_s=0)


async def test_every_object_carries_managed_fields_of_its_writers(sim_kube: FakeKube) -> None:
    async with api_for(sim_kube) as api:
        created = await api.create(PODS, _pod("managed"), what="create")
        entries = created["metadata"]["managedFields"]
        assert [e["manager"] for e in entries] == ["OpenAPI-Generator"]  # the client's User-Agent
        assert entries[0]["operation"] == "Update" and entries[0]["fieldsType"] == "FieldsV1"
        assert "f:spec" in entries[0]["fieldsV1"] and "f:containers" in entries[0]["fieldsV1"]["f:spec"]
        await api.merge_patch(f"{PODS}/managed", {"metadata": {"labels": {"x": "y"}}}, what="patch")

        async def kubelet_wrote() -> bool:  # the simulated kubelet's status write
            pod = await api.get(f"{PODS}/managed", what="get")
            return "kubelet" in {e["manager"] for e in pod["metadata"]["managedFields"]}

        await eventually(kubelet_wrote, 5, "the kubelet's entry")
        await api.delete(f"{PODS}/managed", what="delete", grace_s=0)


async def test_pod_security_restricted_refuses_in_the_plugins_words(sim_kube: FakeKube) -> None:
    bare = {"metadata": {"name": "bare"}, "spec": {"containers": [{"name": "main", "image": "sandbox/terminal"}]}}
    async with api_for(sim_kube) as api:
        with pytest.raises(FailedPrecondition) as refused:  # told apart from RBAC (errors.py)
            await api.create(PODS, bare, what="create")
        assert (
            'pods "bare" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false '
            '(container "main" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities '
            '(container "main" must set securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true (pod or '
            'container "main" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container "main" '
            'must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")'
        ) in refused.value.message
        host = {"metadata": {"name": "host"}, "spec": {**_pod("host")["spec"], "hostNetwork": True}}
        with pytest.raises(FailedPrecondition, match=r"host namespaces \(hostNetwork=true\)"):
            await api.create(PODS, host, what="create")
        backend = KubernetesBackend(backend_config(sim_kube))
        pod = manifests.pod_manifest(backend.config, instance_id="in-term-00000000psa1",
                                     spec=SandboxSpec(kind="terminal"), image="sandbox/terminal")  # fmt: skip
        made = await api.create(PODS, pod, what="create")  # the backend's pods meet "restricted"
        await api.delete(f"{PODS}/{made['metadata']['name']}", what="delete", grace_s=0)
        await backend.close()


async def test_a_lost_node_turns_its_pods_not_ready_then_evicts_them(sim_kube: FakeKube) -> None:
    async with api_for(sim_kube) as api:
        made = [await api.create(PODS, _pod(f"n{i}"), what="create") for i in range(8)]
        await eventually(lambda: _all_placed(sim_kube, len(made)), 5, "the pods placed")
        pods = {p["metadata"]["name"]: p for p in await sim_kube.pods() if p["metadata"]["name"].startswith("n")}
        node = pods["n0"]["spec"]["nodeName"]
        on_node = sorted(n for n, p in pods.items() if p["spec"]["nodeName"] == node)
        assert await sim_kube.lose_node(node) >= len(on_node)
        now = {p["metadata"]["name"]: p for p in await sim_kube.pods()}
        for name in on_node:  # at once: still Running as last reported, not Ready
            status = now[name]["status"]
            ready = next(c for c in status["conditions"] if c["type"] == "Ready")
            assert status["phase"] == "Running" and ready["status"] == "False"

        async def evicted() -> bool:
            current = {p["metadata"]["name"]: p for p in await sim_kube.pods()}
            return all(n not in current or current[n]["metadata"].get("deletionTimestamp") for n in on_node)

        await eventually(evicted, 5, "the taint eviction deleting the lost node's pods")
        for name in [n for n in pods if n not in on_node]:
            await api.delete(f"{PODS}/{name}", what="delete", grace_s=0)
        await eventually(lambda: _none_left(sim_kube, on_node), 5, "the evicted pods collected")


async def _all_placed(kube: FakeKube, count: int) -> bool:
    pods = [p for p in await kube.pods() if p["metadata"]["name"].startswith("n")]
    return len(pods) == count and all(p["spec"].get("nodeName") for p in pods)


async def _none_left(kube: FakeKube, names: list[str]) -> bool:
    return not {p["metadata"]["name"] for p in await kube.pods()} & set(names)
