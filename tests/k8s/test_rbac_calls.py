"""The chart's Role against the calls the control plane really makes, both ways: the backend, the lifecycle and the
operator run a workload on the fake API server (mode "simulate"; every request it serves is logged), each logged
request is mapped to what RBAC checks (apiGroup, resource, verb), and

- every call must be allowed by the Role ``helm template`` renders (else the cluster answers 403), and
- every rule of the Role must be used by some call (else it grants more than the control plane needs),

except the few rules listed in UNEXERCISED, each saying why the simulation cannot make its call. The test's own
actions (kubectl's part: a SandboxPool applied and scaled, a Sandbox deleted) go through the fake's store in process,
not over HTTP, so the log holds the control plane's requests only. A failure names the missing or unused rule.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import pytest

from sandbox.backends.kubernetes.backend import KubernetesBackend
from sandbox.errors import NotFound, SandboxError
from sandbox.models import SandboxSpec
from sandbox.operator import resources as res
from sandbox.operator.operator import Operator
from sandbox.operator.settings import OperatorSettings
from sandbox.service import Principal, SandboxService
from sandbox.service.lifecycle import Lifecycle, LifecycleSettings
from sandbox.store import EmbeddedStore
from sandbox.testing.fake_kube import FakeKube
from tests.k8s import harness, rbac
from tests.k8s.fake_api_fixtures import NAMESPACE, k8s_config
from tests.k8s.fake_api_fixtures import operator_kube as kube
from tests.polling import eventually

__all__ = ["kube"]  # a fixture: the fake API server with the CRDs, for a whole control plane

LOGGER = logging.getLogger("sandbox.test.k8s.rbac")
ALICE = Principal("alice")
SETTINGS = LifecycleSettings(tick_s=0.1, health_interval_s=0.5, leader_ttl_s=1.0)

UNEXERCISED = {
    # Read only when a pod stays unscheduled past schedule_timeout_s and the scheduler wrote no PodScheduled
    # condition to quote (startup.failed_scheduling); the fake's scheduler always writes one.
    ("", "events", "list"),
    # `kubectl scale sandboxpool` is the operator's user's call; the control plane keeps the scale subresource for
    # declarative SandboxPools (issue 32, another change) and reads the pools' spec.min otherwise.
    ("sandbox.platform.io", "sandboxpools/scale", "get"),
    ("sandbox.platform.io", "sandboxpools/scale", "patch"),
}


def _role() -> dict[str, Any]:
    docs = harness.render("chart")
    (role,) = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == "sandbox-control-plane"]
    return role


async def _stored(kube: FakeKube, resource: str, name: str) -> dict[str, Any] | None:
    assert kube.store is not None
    with contextlib.suppress(NotFound, SandboxError, Exception):
        obj: dict[str, Any] = await kube.call(kube.store.get, resource, NAMESPACE, name)
        return obj
    return None


async def _workload(kube: FakeKube) -> None:
    """What a day of the control plane asks of the API: sandboxes of every network (policies, secrets, a shared
    volume), logs, Sandbox objects mirrored and their statuses, a SandboxPool applied and filled, a Sandbox applied and
    deleted with kubectl, a mirrored one deleted with kubectl, another replica reaching a sandbox it did not start,
    sandboxes ended through the API."""
    assert kube.store is not None
    store = await EmbeddedStore.open(None, logger=LOGGER)
    backend = KubernetesBackend(k8s_config(kube, agent_port=kube.agent_port))
    service = SandboxService(backend, store, logger=LOGGER)
    lifecycle = Lifecycle(service, SETTINGS, logger=LOGGER)
    operator = Operator(service, lifecycle, backend, settings=OperatorSettings(interval_s=0.1), logger=LOGGER)
    await service.start()
    loops = [asyncio.create_task(lifecycle.run()), asyncio.create_task(operator.run())]
    try:
        await eventually(lambda: operator.running, 10, "the replica leading")
        made = [
            await service.create(ALICE, SandboxSpec(kind="terminal")),
            await service.create(ALICE, SandboxSpec(kind="terminal", network="internal")),
            await service.create(
                ALICE,
                SandboxSpec.model_validate(
                    {"kind": "terminal", "network": "egress", "volumes": [{"name": "data", "path": "/data"}]}
                ),
            ),
        ]
        for info in made:
            await eventually(lambda i=info.id: _health(kube, i), 15, f"{info.id} mirrored with its status")  # type: ignore[misc]
        with contextlib.suppress(SandboxError):  # the simulated kubelet keeps no log; the request is made anyway
            await service.logs(ALICE, made[0].id)
        # another replica serving a call for a sandbox it did not start reads the pod's address and its token
        record = await service.records.read(made[0].id)
        assert record is not None and record.instance
        other = KubernetesBackend(k8s_config(kube, agent_port=kube.agent_port))
        try:
            assert (await other.resolve(record.instance))[1]
        finally:
            await other.close()

        pool = {
            "apiVersion": res.API_VERSION,
            "kind": "SandboxPool",
            "metadata": {"name": "terminal"},
            "spec": {"kind": "terminal", "min": 1, "max": 2},
        }
        await kube.call(kube.store.create, res.POOLS, NAMESPACE, pool)  # kubectl apply
        await eventually(lambda: _pool_ready(kube), 20, "the SandboxPool filled, its status written")
        await kube.call(kube.store.delete, res.POOLS, NAMESPACE, "terminal")  # kubectl delete sandboxpool

        declared = {
            "apiVersion": res.API_VERSION,
            "kind": "Sandbox",
            "metadata": {"name": "declared", "annotations": {"sandbox.platform.io/tenant": "alice"}},
            "spec": {"kind": "terminal"},
        }
        await kube.call(kube.store.create, res.SANDBOXES, NAMESPACE, declared)  # kubectl apply -f sandbox.yaml
        await eventually(lambda: _running(kube, "declared"), 20, "the declared Sandbox running, its pod owned by it")
        await kube.call(kube.store.delete, res.SANDBOXES, NAMESPACE, "declared")  # kubectl delete sandbox declared
        await eventually(lambda: _gone(kube, "declared"), 15, "the declared sandbox ended, its finalizer released")

        doomed = made[0].id
        await kube.call(kube.store.delete, res.SANDBOXES, NAMESPACE, doomed)  # kubectl delete sandbox
        await eventually(lambda: _gone(kube, doomed), 15, "the leader ending the deleted Sandbox, its finalizer gone")
        for info in made[1:]:
            await service.delete(ALICE, info.id)
            await eventually(lambda i=info.id: _gone(kube, i), 15, f"{info.id}'s Sandbox object deleted")  # type: ignore[misc]
    finally:
        for task in loops:
            task.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        await operator.close()
        await lifecycle.stop()
        for doc in (await store.all("sandboxes")).values():
            await service.delete(ALICE, doc["id"])
        await service.instances.drain()
        await service.close()
        await store.close()


async def _health(kube: FakeKube, name: str) -> bool:
    obj = await _stored(kube, res.SANDBOXES, name)
    return bool(obj and (obj.get("status") or {}).get("health") == "Healthy")


async def _pool_ready(kube: FakeKube) -> bool:
    obj = await _stored(kube, res.POOLS, "terminal")
    return bool(obj and (obj.get("status") or {}).get("ready", 0) >= 1)


async def _running(kube: FakeKube, name: str) -> bool:
    obj = await _stored(kube, res.SANDBOXES, name)
    return bool(obj and (obj.get("status") or {}).get("phase") == "Running")


async def _gone(kube: FakeKube, name: str) -> bool:
    return await _stored(kube, res.SANDBOXES, name) is None


def _calls(kube: FakeKube) -> set[rbac.Call]:
    assert kube.api is not None
    calls = {rbac.to_call(method, path) for method, path in kube.api.requests}
    return {c for c in calls if c is not None}


@pytest.mark.timeout(180)
async def test_the_role_grants_exactly_the_calls_the_control_plane_makes(kube: FakeKube) -> None:
    await _workload(kube)
    calls = _calls(kube)
    role = _role()
    granted = rbac.grants(role)
    missing = sorted(str(c) for c in calls if rbac.allowed_by(c, granted) is None)
    assert not missing, (
        f"calls the Role {role['metadata']['name']} (deploy/helm/sandbox/templates/sandbox-rbac.yaml) does not "
        f"allow; a cluster answers them 403: {missing}"
    )
    used = {rbac.allowed_by(c, granted) for c in calls}
    unused = sorted(
        f"{verb} {group or 'core'}/{resource}"
        for ns, group, resource, verb, name in granted - used
        if (group, resource, verb) not in UNEXERCISED
    )
    assert not unused, f"rules no call used (remove them from sandbox-rbac.yaml, or say why in UNEXERCISED): {unused}"
    exercised = sorted(str(k) for k in UNEXERCISED if (NAMESPACE, *k, "") in used)
    assert not exercised, f"UNEXERCISED rules the simulation does use now (take them off the list): {exercised}"
    not_granted = sorted(str(k) for k in UNEXERCISED if (NAMESPACE, *k, "") not in granted)
    assert not not_granted, f"UNEXERCISED names rules the Role no longer has: {not_granted}"


def test_the_mapping_reads_requests_as_the_authorizer_does() -> None:
    """The request -> (group, resource, verb) mapping the comparison rests on, on the shapes the client sends."""
    ns = f"/api/v1/namespaces/{NAMESPACE}"
    crs = f"/apis/sandbox.platform.io/v1alpha1/namespaces/{NAMESPACE}"
    cases = {
        ("GET", f"{ns}/pods?labelSelector=a%3Db"): ("", "pods", "list"),
        ("GET", f"{ns}/pods?watch=true&resourceVersion=5"): ("", "pods", "watch"),
        ("GET", f"{ns}/pods/p1"): ("", "pods", "get"),
        ("GET", f"{ns}/pods/p1/log?tailLines=5"): ("", "pods/log", "get"),
        ("POST", f"{ns}/secrets"): ("", "secrets", "create"),
        ("DELETE", f"{ns}/secrets/s1?gracePeriodSeconds=0"): ("", "secrets", "delete"),
        ("DELETE", f"{ns}/pods"): ("", "pods", "deletecollection"),
        ("PATCH", f"{crs}/sandboxes/x/status"): ("sandbox.platform.io", "sandboxes/status", "patch"),
        ("PUT", f"{crs}/sandboxpools/x/scale"): ("sandbox.platform.io", "sandboxpools/scale", "update"),
        ("PUT", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/l"): (
            "coordination.k8s.io",
            "leases",
            "update",
        ),
    }
    for (method, path), want in cases.items():
        call = rbac.to_call(method, path)
        assert call is not None and (call.group, call.resource, call.verb) == want, (method, path, call)
        assert call.namespace == NAMESPACE
    assert rbac.to_call("GET", "/apis/sandbox.platform.io/v1alpha1") is None  # discovery
    assert rbac.to_call("GET", "/version") is None
    role = {
        "metadata": {"namespace": NAMESPACE},
        "rules": [
            {
                "apiGroups": ["apps"],
                "resources": ["deployments/scale"],
                "resourceNames": ["sandbox"],
                "verbs": ["patch"],
            }
        ],
    }
    granted = rbac.grants(role)
    scale = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/%s/scale"
    assert rbac.allowed_by(rbac.to_call("PATCH", scale % "sandbox") or pytest.fail("no call"), granted)
    assert not rbac.allowed_by(rbac.to_call("PATCH", scale % "other") or pytest.fail("no call"), granted)
