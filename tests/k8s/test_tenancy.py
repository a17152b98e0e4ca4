"""Tenants apart on Kubernetes, on the fake API server: internal networks (one NetworkPolicy per tenant, made once per
burst), shared volumes (one claim per tenant and name; realized: tenant B does not see tenant A's files), claims from
before tenant scoping refused with how to migrate, and graceful deletes (never forced; a pod its node does not let
go stays listed).

The fake does not route packets by NetworkPolicy: what is checked is what a CNI acts on, the policies' selectors
against the labels of the pods the backend made."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from sandbox.backends.base import RuntimeState, tenant_hash
from sandbox.backends.kubernetes.api import KubeApi
from sandbox.backends.kubernetes.backend import KubernetesBackend
from sandbox.backends.kubernetes.config import KubernetesConfig
from sandbox.backends.kubernetes.manifests import LABEL_VOLUME, owner_labels
from sandbox.errors import BackendError, FailedPrecondition
from sandbox.models import SandboxSpec
from sandbox.testing.fake_kube import FakeKube
from sandbox.testing.fake_kube.objects import Event
from tests.k8s.fake_api_fixtures import K8S_OWNER, NAMESPACE, backend, docker_engine, k8s_config, kube
from tests.polling import eventually

__all__ = ["backend", "docker_engine", "kube"]

INTERNAL = SandboxSpec(kind="terminal", network="internal")
A, B = "tenant-a", "tenant-b"


def _id() -> str:
    return f"in-term-{secrets.token_hex(6)}"


def selects(selector: dict[str, Any], pod: dict[str, Any]) -> bool:
    """Whether a NetworkPolicy's podSelector (matchLabels only, as the backend writes) selects ``pod``."""
    assert set(selector) <= {"matchLabels"}, selector
    labels = pod["metadata"].get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


async def _objects(kube: FakeKube, resource: str) -> list[dict[str, Any]]:
    assert kube.store is not None
    items, _ = await kube.call(kube.store.list, resource, NAMESPACE)
    return list(items)


@pytest_asyncio.fixture(loop_scope="session")
async def sim() -> AsyncIterator[tuple[FakeKube, KubernetesBackend]]:
    """A simulated cluster whose pods' agents answer (nothing runs in them), and a backend on it."""
    kube = FakeKube(mode="simulate", owner=K8S_OWNER, namespaces=(NAMESPACE,), nodes=4, agents=True)
    await asyncio.to_thread(kube.start)
    made = KubernetesBackend(k8s_config(kube, agent_port=kube.agent_port, delete_grace_s=1, delete_wait_s=1))
    try:
        yield kube, made
    finally:
        for instance in await made.list_instances():
            await made.destroy(instance.id)
        await made.close()
        await asyncio.to_thread(kube.close)


async def test_a_burst_of_one_tenants_internal_creates_makes_one_policy_post(
    sim: tuple[FakeKube, KubernetesBackend],
) -> None:
    kube, backend = sim
    assert kube.store is not None
    added: list[str] = []

    def on_event(event: Event) -> None:
        if event.resource == "networkpolicies" and event.type == "ADDED":
            added.append(event.obj["metadata"]["name"])

    kube.store.event_hooks.append(on_event)
    instances = [_id() for _ in range(300)]
    try:
        await asyncio.gather(*(backend.create(i, INTERNAL, tenant=A) for i in instances))
        assert backend.policies.posts == 1
        assert added == [f"sbx-{K8S_OWNER}-internal-{tenant_hash(A)}"]
        await backend.create(_id(), INTERNAL, tenant=A)  # later creates of that tenant: no POST at all
        assert backend.policies.posts == 1
        other = KubernetesBackend(backend.config)  # another replica: one POST, answered 409, which is success
        try:
            await other.create(_id(), INTERNAL, tenant=A)
            assert other.policies.posts == 1 and other.policies.made(A) and len(added) == 1
        finally:
            for instance in await other.list_instances():
                await other.destroy(instance.id)
            await other.close()
    finally:
        kube.store.event_hooks.remove(on_event)
        await asyncio.gather(*(backend.destroy(i) for i in instances))


async def test_another_tenants_internal_pod_is_not_selected_by_a_tenants_policy(
    sim: tuple[FakeKube, KubernetesBackend],
) -> None:
    """What a CNI enforces, checked on the objects: A's policy selects A's internal pod and lets in and out only pods
    its peer selector matches, and B's internal pod matches neither A's podSelector nor A's peers (and conversely);
    non-internal pods and pods of no tenant are in no tenant's policy."""
    kube, backend = sim
    a, b, a_none, nobody = _id(), _id(), _id(), _id()
    await asyncio.gather(
        backend.create(a, INTERNAL, tenant=A),
        backend.create(b, INTERNAL, tenant=B),
        backend.create(a_none, SandboxSpec(kind="terminal"), tenant=A),
        backend.create(nobody, INTERNAL),
    )
    try:
        pods = {p["metadata"]["labels"]["sandbox.instance"]: p for p in await kube.pods()}
        policies = {
            p["metadata"]["labels"]["sandbox.tenant-hash"]: p["spec"] for p in await _objects(kube, "networkpolicies")
        }
        assert set(policies) >= {tenant_hash(A), tenant_hash(B), "none"}
        assert pods[a]["metadata"]["labels"]["sandbox.tenant-hash"] == tenant_hash(A)
        assert pods[b]["metadata"]["labels"]["sandbox.tenant-hash"] == tenant_hash(B)
        for tenant, mine, theirs in ((A, a, b), (B, b, a)):
            spec = policies[tenant_hash(tenant)]
            (ingress,) = spec["ingress"]
            (egress,) = spec["egress"]
            peers = [peer["podSelector"] for peer in ingress["from"]] + [peer["podSelector"] for peer in egress["to"]]
            assert selects(spec["podSelector"], pods[mine]) and not selects(spec["podSelector"], pods[theirs])
            assert all(selects(p, pods[mine]) and not selects(p, pods[theirs]) for p in peers)
            assert not selects(spec["podSelector"], pods[a_none]) and not selects(spec["podSelector"], pods[nobody])
            assert all("namespaceSelector" not in peer and "ipBlock" not in peer for peer in ingress["from"])
        unscoped = policies["none"]
        assert selects(unscoped["podSelector"], pods[nobody]) and not selects(unscoped["podSelector"], pods[a])
    finally:
        await asyncio.gather(*(backend.destroy(i) for i in (a, b, a_none, nobody)))


async def test_a_claimed_warm_pod_is_labelled_with_its_tenant(sim: tuple[FakeKube, KubernetesBackend]) -> None:
    kube, backend = sim
    warm = _id()
    await backend.create(warm, SandboxSpec(kind="terminal"), pool="pool:terminal:x")
    try:
        (pod,) = [p for p in await kube.pods() if p["metadata"]["labels"]["sandbox.instance"] == warm]
        assert pod["metadata"]["labels"]["sandbox.tenant-hash"] == "none"
        await backend.set_claim(warm, {"id": "sb-term-1", "tenant": A})
        (pod,) = [p for p in await kube.pods() if p["metadata"]["labels"]["sandbox.instance"] == warm]
        assert pod["metadata"]["labels"]["sandbox.tenant-hash"] == tenant_hash(A)
        assert (await backend.claims())[warm]["tenant"] == A
    finally:
        await backend.destroy(warm)


async def test_a_pod_its_node_does_not_let_go_stays_listed_and_is_not_waited_for_twice(
    sim: tuple[FakeKube, KubernetesBackend], caplog: pytest.LogCaptureFixture
) -> None:
    """A partitioned node: its kubelet never confirms the delete (here: a finalizer holds the pod). The destroy waits
    the grace period plus delete_wait_s, says so, and the pod stays listed as being deleted, never forgotten."""
    _, backend = sim
    instance = _id()
    await backend.create(instance, SandboxSpec(kind="terminal", network="egress"), tenant=A)
    name = backend.pod_name(instance)
    api = await backend.api()
    path = f"/api/v1/namespaces/{NAMESPACE}/pods/{name}"
    await api.merge_patch(path, {"metadata": {"finalizers": ["test.sandbox/partitioned"]}}, what="hold the pod")
    loop = asyncio.get_running_loop()
    started = loop.time()
    with caplog.at_level(logging.WARNING, logger="sandbox.backends.kubernetes.backend"):
        await backend.destroy(instance)
    assert 2 <= loop.time() - started < 10  # delete_grace_s 1 + delete_wait_s 1
    assert f"pod {name} is still terminating" in caplog.text
    (listed,) = [i for i in await backend.list_instances() if i.id == instance]
    assert listed.state is RuntimeState.EXITED and "being deleted" in (listed.detail or "")
    started = loop.time()
    await backend.destroy(instance)  # the orphan pass destroying it again does not wait again
    assert loop.time() - started < 1.5
    await api.merge_patch(path, {"metadata": {"finalizers": None}}, what="the node comes back")
    await eventually(lambda: _gone(backend, instance), 10, "the pod removed once its node let go")


async def _gone(backend: KubernetesBackend, instance: str) -> bool:
    return instance not in {i.id for i in await backend.list_instances()}


# --------------------------------------------------------------------------------------------- realized


async def test_tenants_same_named_volumes_are_two_claims_and_b_does_not_see_as_files(
    backend: KubernetesBackend, kube: FakeKube
) -> None:
    spec = SandboxSpec.model_validate({"kind": "terminal", "volumes": [{"name": "data", "path": "/workspace/data"}]})
    a, b, a2 = _id(), _id(), _id()
    try:
        await asyncio.gather(backend.create(a, spec, tenant=A), backend.create(b, spec, tenant=B))
        claims = {c["metadata"]["name"] for c in await _objects(kube, "persistentvolumeclaims")}
        assert {f"sbxvol-{tenant_hash(A)}-data", f"sbxvol-{tenant_hash(B)}-data"} <= claims
        mounted = {
            p["metadata"]["labels"]["sandbox.instance"]: next(
                v["persistentVolumeClaim"]["claimName"] for v in p["spec"]["volumes"] if "persistentVolumeClaim" in v
            )
            for p in await kube.pods()
        }
        assert mounted[a] == f"sbxvol-{tenant_hash(A)}-data" and mounted[b] == f"sbxvol-{tenant_hash(B)}-data"
        assert (await backend.agent(a).exec("echo secret-of-a > /workspace/data/note")).exit_code == 0
        seen = await backend.agent(b).exec("ls -A /workspace/data; cat /workspace/data/note")
        assert seen.exit_code != 0 and "secret-of-a" not in seen.stdout
        await backend.create(a2, spec, tenant=A)  # the same tenant's next sandbox: the same volume
        assert (await backend.agent(a2).exec("cat /workspace/data/note")).stdout == "secret-of-a\n"
    finally:
        for instance in (a, b, a2):
            await backend.destroy(instance)


async def test_a_claim_from_before_tenant_scoping_is_refused_with_how_to_migrate(
    backend: KubernetesBackend, kube: FakeKube
) -> None:
    api = await backend.api()
    path = f"/api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims"
    labels = {**owner_labels(backend.config), LABEL_VOLUME: "legacy"}
    old = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "sbxvol-legacy", "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": "1Gi"}},
            "volumeName": "pvc-0123",
        },
    }
    await api.create(path, old, what="an old unscoped claim")
    spec = SandboxSpec.model_validate({"kind": "terminal", "volumes": [{"name": "legacy", "path": "/workspace/l"}]})
    try:
        with pytest.raises(FailedPrecondition) as refused:
            await backend.create(_id(), spec, tenant=A)
        message = refused.value.message
        scoped = f"sbxvol-{tenant_hash(A)}-legacy"
        assert "made before shared volumes were scoped by tenant" in message
        assert "kubectl patch pv pvc-0123" in message and '"persistentVolumeReclaimPolicy":"Retain"' in message
        assert f"kubectl -n {NAMESPACE} delete pvc sbxvol-legacy" in message
        assert f"create the claim {scoped} with spec.volumeName pvc-0123" in message
        claims = {c["metadata"]["name"] for c in await _objects(kube, "persistentvolumeclaims")}
        assert scoped not in claims  # nothing made for it
    finally:
        await api.delete(f"{path}/sbxvol-legacy", what="remove the old claim")


async def test_a_delete_is_graceful_and_returns_once_the_pod_is_gone(
    backend: KubernetesBackend, kube: FakeKube
) -> None:
    assert kube.store is not None
    graces: list[object] = []

    def on_event(event: Event) -> None:
        if event.resource == "pods" and event.obj["metadata"].get("deletionTimestamp"):
            graces.append(event.obj["metadata"].get("deletionGracePeriodSeconds"))

    instance = _id()
    await backend.create(instance, SandboxSpec(kind="terminal"), tenant=A)
    kube.store.event_hooks.append(on_event)
    try:
        started = asyncio.get_running_loop().time()
        await backend.destroy(instance)
        took = asyncio.get_running_loop().time() - started
    finally:
        kube.store.event_hooks.remove(on_event)
    assert graces and set(graces) == {5}, graces  # delete_grace_s, never 0
    assert [p for p in await kube.pods() if p["metadata"]["labels"]["sandbox.instance"] == instance] == []
    print(f"graceful destroy of a realized pod: {took:.2f} s")


async def test_an_earlier_versions_owner_wide_policies_that_open_things_are_removed_at_start(
    sim: tuple[FakeKube, KubernetesBackend],
) -> None:
    """sbx-<owner>-internal let every tenant's internal pods reach each other; sbx-<owner>-egress added ranges beside
    the chart's. A backend's first connection deletes both; the deny-only isolation policy is left."""
    kube, _ = sim
    owned = owner_labels(_config(kube))
    api = await KubeApi.connect(_config(kube))  # as kubectl would: no backend yet
    path = f"/apis/networking.k8s.io/v1/namespaces/{NAMESPACE}/networkpolicies"
    for what in ("internal", "egress", "isolation"):
        policy = {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": f"sbx-{K8S_OWNER}-{what}", "namespace": NAMESPACE, "labels": owned},
            "spec": {"podSelector": {"matchLabels": owned}, "policyTypes": ["Ingress"]},
        }
        await api.create(path, policy, what="an earlier version's policy")
    await api.close()
    upgraded = KubernetesBackend(_config(kube))
    try:
        await upgraded.ping()
        await eventually(lambda: _legacy_left(kube, [f"sbx-{K8S_OWNER}-isolation"]), 10, "the removal")
    finally:
        await upgraded.close()
        assert kube.store is not None
        await kube.call(kube.store.delete, "networkpolicies", NAMESPACE, f"sbx-{K8S_OWNER}-isolation")


def _config(kube: FakeKube) -> KubernetesConfig:
    return k8s_config(kube, agent_port=kube.agent_port)


async def _legacy_left(kube: FakeKube, expected: list[str]) -> bool:
    names = [p["metadata"]["name"] for p in await _objects(kube, "networkpolicies")]
    return sorted(n for n in names if n.startswith(f"sbx-{K8S_OWNER}-") and "-internal-" not in n) == expected


async def test_a_refused_policy_fails_the_internal_create_by_name_and_the_next_create_tries_again(
    sim: tuple[FakeKube, KubernetesBackend],
) -> None:
    """RBAC without create on networkpolicies: the internal create fails naming the verb and the resource, leaves no
    pod, and is not remembered as made; once allowed, the tenant's next internal create makes the policy."""
    kube, backend = sim
    tenant, first, second = "tenant-c", _id(), _id()
    before = backend.policies.posts
    kube.forbid("create", "networkpolicies")
    try:
        with pytest.raises(BackendError, match=r"RBAC: forbidden: .* may not create networkpolicies \(API group "):
            await backend.create(first, INTERNAL, tenant=tenant)
        assert not backend.policies.made(tenant)
        assert first not in {p["metadata"]["labels"]["sandbox.instance"] for p in await kube.pods()}
    finally:
        kube.allow("create", "networkpolicies")
    try:
        await backend.create(second, INTERNAL, tenant=tenant)
        assert backend.policies.made(tenant) and backend.policies.posts == before + 2
    finally:
        await backend.destroy(second)
