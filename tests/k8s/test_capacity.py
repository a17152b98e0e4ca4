"""Capacity on Kubernetes: the scheduler decides. On the fake API server in mode "simulate" with nodes of limited room
(``FakeKube(allocatable=...)``; the simulated agent answers, so a create runs the backend's whole path): a pod that
does not fit waits, is reported as waiting (log, instance detail, the scheduler's Event), and starts once another pod
is deleted; one that never fits fails with CapacityExhausted quoting the scheduler after ``schedule_timeout_s`` and
leaves nothing; the readiness timeout starts only once the pod is placed; a ResourceQuota (the chart's own, applied
to the fake) refusing a create is CapacityExhausted, not an RBAC error. Also the fake scheduler's and quota's words,
checked against the real components' formats."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml
from kubernetes_asyncio.client.exceptions import ApiException

from sandbox.backends.base import RuntimeState
from sandbox.backends.kubernetes import manifests, startup
from sandbox.backends.kubernetes.api import KubeApi
from sandbox.backends.kubernetes.backend import KubernetesBackend
from sandbox.backends.kubernetes.errors import translate
from sandbox.errors import BackendError, CapacityExhausted, ResourceExhausted, Unavailable
from sandbox.models import Resources, SandboxSpec
from sandbox.testing.fake_kube import FakeKube
from tests.k8s import harness
from tests.k8s.fake_api_fixtures import (
    K8S_OWNER,
    NAMESPACE,
    RESTRICTED,
    docker_engine,
    k8s_config,
    owned_containers,
)
from tests.polling import eventually

__all__ = ["docker_engine"]

BACKEND_LOG = "sandbox.backends.kubernetes.backend"
NO_MEMORY = "0/1 nodes are available: 1 Insufficient memory."


def _id() -> str:
    return f"in-term-{secrets.token_hex(6)}"


def _spec(memory_mb: int, cpus: float = 0.5) -> SandboxSpec:
    return SandboxSpec(kind="terminal", resources=Resources(cpus=cpus, memory_mb=memory_mb))


@contextlib.asynccontextmanager
async def cluster(
    allocatable: dict[str, str] | None, *, nodes: int = 1, realize: bool = False, **config: Any
) -> AsyncIterator[tuple[FakeKube, KubernetesBackend]]:
    """A simulated cluster of ``nodes`` nodes of ``allocatable`` room each (``realize``: one node, pods realized as
    containers), and a backend on it; at the end no pod, secret or container may be left."""
    if realize:
        kube = FakeKube(mode="realize", owner=K8S_OWNER, namespaces=(NAMESPACE, "sandbox-system"),
                        allocatable=allocatable)  # fmt: skip
    else:
        kube = FakeKube(mode="simulate", owner=K8S_OWNER, namespaces=(NAMESPACE,), nodes=nodes, agents=True,
                        allocatable=allocatable)  # fmt: skip
    await asyncio.to_thread(kube.start)
    if not realize:  # the simulated agent answers for every pod, on a port known once started
        config = {"agent_port": kube.agent_port, "manage_network_policies": False, **config}
    backend = KubernetesBackend(k8s_config(kube, **config))
    try:
        yield kube, backend
        left = await backend.list_instances()
        assert not left, f"the test left instances: {[i.id for i in left]}"
        assert await _names(kube, "pods") == [] and await _names(kube, "secrets") == []
    finally:
        for instance in await backend.list_instances():
            await backend.destroy(instance.id)
        await backend.close()
        containers = await asyncio.to_thread(kube.close)
    assert not containers, f"realized pods nobody deleted: {containers}"


async def _names(kube: FakeKube, resource: str) -> list[str]:
    assert kube.store is not None
    items, _ = await kube.call(kube.store.list, resource, NAMESPACE)
    return [i["metadata"]["name"] for i in items]


def _waiting(caplog: pytest.LogCaptureFixture, instance: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == BACKEND_LOG
        and getattr(r, "instance", None) == instance
        and r.getMessage().startswith("waiting for capacity")
    ]


# --------------------------------------------------------------------------------------------- the backend


async def test_a_pod_that_does_not_fit_waits_and_starts_once_another_is_deleted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=BACKEND_LOG)
    async with cluster({"cpu": "4", "memory": "4Gi"}) as (kube, backend):
        first, second = _id(), _id()
        await backend.create(first, _spec(3072))
        waiting = asyncio.create_task(backend.create(second, _spec(3072)))
        await eventually(lambda: _waiting(caplog, second), 10, "the second create logging that it waits")
        assert _waiting(caplog, second) == [f"waiting for capacity: {NO_MEMORY}"]
        assert not waiting.done()
        seen = await backend.inspect(second)  # what inspect and list_instances say meanwhile
        assert seen.state is RuntimeState.STARTING and seen.detail is not None and NO_MEMORY in seen.detail
        (event,) = await kube.events(pod=backend.pod_name(second))
        assert (event["reason"], event["type"], event["message"]) == ("FailedScheduling", "Warning", NO_MEMORY)
        assert event["source"] == {"component": "default-scheduler"}

        await backend.destroy(first)
        made = await asyncio.wait_for(waiting, 10)
        assert made.state is RuntimeState.RUNNING
        await backend.agent(second).ping()  # its agent answers with the pod's token
        assert len(_waiting(caplog, second)) == 1, "logged once per message of the scheduler"
        assert "placed on a node after waiting for capacity" in caplog.text
        await backend.destroy(second)


async def test_a_realized_pod_waits_for_room_and_runs_once_it_frees(
    docker_engine: docker.DockerClient, caplog: pytest.LogCaptureFixture
) -> None:
    """The same with pods realized as containers (one node): the kubelet gets a pod only once the scheduler placed
    it, so the waiting pod has no container until then."""
    caplog.set_level(logging.INFO, logger=BACKEND_LOG)
    async with cluster({"memory": "3Gi"}, realize=True) as (_, backend):
        first, second = _id(), _id()
        await backend.create(first, _spec(2048))
        waiting = asyncio.create_task(backend.create(second, _spec(2048)))
        await eventually(lambda: _waiting(caplog, second), 30, "the second create waiting for capacity")
        assert len(await asyncio.to_thread(owned_containers, docker_engine)) == 1
        await backend.destroy(first)
        assert (await asyncio.wait_for(waiting, 60)).state is RuntimeState.RUNNING
        assert (await backend.agent(second).exec("echo placed")).stdout.strip() == "placed"
        await backend.destroy(second)


async def test_a_pod_that_never_fits_fails_with_capacity_exhausted_and_leaves_nothing() -> None:
    async with cluster({"cpu": "4", "memory": "4Gi"}, schedule_timeout_s=1.0) as (kube, backend):
        instance = _id()
        started = asyncio.get_running_loop().time()
        with pytest.raises(CapacityExhausted) as failed:
            await backend.create(instance, _spec(8192), ready_timeout=30)
        took = asyncio.get_running_loop().time() - started
        assert 1.0 <= took < 5, took
        message = failed.value.message
        assert "the scheduler says: 0/1 nodes are available: 1 Insufficient memory." in message
        assert "memory=8192Mi" in message and "schedule_timeout_s" in message
        assert "add nodes" in message and "fewer resources" in message
        assert isinstance(failed.value, ResourceExhausted)
        assert await _names(kube, "pods") == [] and await _names(kube, "secrets") == []


async def test_the_readiness_timeout_starts_once_the_pod_is_placed(caplog: pytest.LogCaptureFixture) -> None:
    """A create that waited for room longer than its ready timeout still succeeds: that timeout is the kubelet's."""
    caplog.set_level(logging.INFO, logger=BACKEND_LOG)
    async with cluster({"memory": "4Gi"}) as (_, backend):
        blocker, late = _id(), _id()
        await backend.create(blocker, _spec(4096))
        waiting = asyncio.create_task(backend.create(late, _spec(1024), ready_timeout=1.0))
        await eventually(lambda: _waiting(caplog, late), 10, "the create waiting for capacity")
        await asyncio.sleep(1.5)  # past its ready timeout, still unscheduled
        assert not waiting.done()
        await backend.destroy(blocker)
        assert (await asyncio.wait_for(waiting, 10)).state is RuntimeState.RUNNING
        await backend.destroy(late)


async def test_each_new_word_of_the_scheduler_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    """Two nodes: first both are full of memory; once one is lost, the reason changes, and is logged again."""
    caplog.set_level(logging.INFO, logger=BACKEND_LOG)
    async with cluster({"memory": "2Gi"}, nodes=2, schedule_timeout_s=30) as (kube, backend):
        blockers = [_id(), _id()]
        for blocker in blockers:
            await backend.create(blocker, _spec(2048))
        late = _id()
        waiting = asyncio.create_task(backend.create(late, _spec(1024)))
        await eventually(lambda: _waiting(caplog, late), 10, "the create waiting for capacity")
        assert await kube.lose_node("sim-node-0") == 1
        lost = "0/2 nodes are available: 1 Insufficient memory, 1 node(s) had untolerated taint " + (
            "{node.kubernetes.io/unreachable: }."
        )
        await eventually(lambda: len(_waiting(caplog, late)) == 2, 10, "the new reason logged")
        assert _waiting(caplog, late) == ["waiting for capacity: 0/2 nodes are available: 2 Insufficient memory.",
                                          f"waiting for capacity: {lost}"]  # fmt: skip
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await eventually(lambda: _gone(kube, backend.pod_name(late)), 10, "the cancelled create's pod deleted")
        for blocker in blockers:
            await backend.destroy(blocker)


async def _gone(kube: FakeKube, pod: str) -> bool:
    return pod not in await _names(kube, "pods")


async def test_the_scheduler_reason_comes_from_the_events_when_the_pod_has_none() -> None:
    """A pod with no PodScheduled condition (no scheduler wrote one) is quoted from its latest FailedScheduling Event;
    with neither, or events unreadable (RBAC), the error says no scheduler answered."""
    async with cluster({"memory": "4Gi"}) as (kube, backend):
        assert kube.store is not None and kube.api is not None
        name = "sbx-x-in-term-abc"
        pod = {"metadata": {"name": name, "uid": "u-1"}, "spec": {}, "status": {"phase": "Pending"}}
        api = await backend.api()
        nothing = await startup.no_room(api, pod, namespace=NAMESPACE, timeout_s=5)
        assert isinstance(nothing, Unavailable) and "no scheduler said why" in nothing.message
        said = {"01": "an older word.", "09": "0/5 nodes are available: 5 Insufficient cpu."}
        for second, message in said.items():
            event = {
                "metadata": {"name": f"{name}.{second}"},
                "involvedObject": {"kind": "Pod", "name": name, "uid": "u-1"},
                "reason": "FailedScheduling",
                "message": message,
                "lastTimestamp": f"2030-01-01T00:00:{second}Z",
            }
            await kube.call(kube.store.create, "events", NAMESPACE, event)
        quoted = await startup.no_room(api, pod, namespace=NAMESPACE, timeout_s=5)
        assert isinstance(quoted, CapacityExhausted)
        assert "the scheduler says: 0/5 nodes are available: 5 Insufficient cpu." in quoted.message
        await kube.call(kube.api.forbidden.add, ("list", "events"))
        assert isinstance(await startup.no_room(api, pod, namespace=NAMESPACE, timeout_s=5), Unavailable)


# --------------------------------------------------------------------------------------------- ResourceQuota


def chart_quota(tmp_path: Path, hard: dict[str, str]) -> dict[str, Any]:
    """The ResourceQuota the chart renders with ``sandboxes.resourceQuota`` on and ``hard``."""
    values = tmp_path / "quota.yaml"
    values.write_text(yaml.safe_dump({"sandboxes": {"resourceQuota": {"enabled": True, "hard": hard}}}))
    (quota,) = [d for d in harness.render_chart((values,)) if d["kind"] == "ResourceQuota"]
    return quota


async def test_a_resource_quota_refusal_is_capacity_exhausted_not_rbac(tmp_path: Path) -> None:
    quota = chart_quota(tmp_path, {"count/pods": "1", "requests.memory": "3Gi", "limits.cpu": "4"})
    async with cluster(None) as (kube, backend):
        await kube.apply_quota(quota)
        first = _id()
        await backend.create(first, _spec(1024))
        with pytest.raises(CapacityExhausted) as refused:
            await backend.create(_id(), _spec(1024))
        message = refused.value.message
        assert (
            "exceeded quota: sandbox-sandboxes, requested: count/pods=1, used: count/pods=1, limited: count/pods=1"
            in (message)
        )
        assert "ResourceQuota" in message and "not RBAC" in message and "sandboxes.resourceQuota.hard" in message
        assert await _names(kube, "pods") == [backend.pod_name(first)]
        assert await _names(kube, "secrets") == [manifests.secret_name(backend.pod_name(first))], (
            "the refused create's secret is deleted"
        )

        await kube.apply_quota({**quota, "spec": {"hard": {"count/pods": "5", "requests.memory": "3Gi"}}})
        with pytest.raises(CapacityExhausted, match=r"requested: requests.memory=3Gi, used: requests.memory=1Gi, "
                           r"limited: requests.memory=3Gi"):  # fmt: skip
            await backend.create(_id(), _spec(3072))
        await backend.destroy(first)


def test_quota_403s_are_told_apart_from_rbac() -> None:
    def refused(message: str) -> Exception:
        error = ApiException(status=403, reason="Forbidden")
        error.body = json.dumps({"kind": "Status", "code": 403, "reason": "Forbidden", "message": message})
        return translate(error, "create pod p")

    quota = refused('pods "p" is forbidden: exceeded quota: q, requested: pods=1, used: pods=5, limited: pods=5')
    assert type(quota) is CapacityExhausted and "limited: pods=5" in quota.message and "not RBAC" in quota.message
    unstated = refused('pods "p" is forbidden: failed quota: q: must specify limits.cpu for: agent')
    assert type(unstated) is BackendError and "must specify limits.cpu" in unstated.message
    assert "RBAC: forbidden" not in unstated.message
    rbac = refused('pods is forbidden: User "x" cannot create resource "pods"')
    assert type(rbac) is BackendError and rbac.message.startswith("create pod p: RBAC: forbidden")


# --------------------------------------------------------------------------------------------- the fake's words


def _pod(name: str, cpu: str, memory: str, *, requests: bool = True) -> dict[str, Any]:
    resources: dict[str, Any] = {"limits": {"cpu": cpu, "memory": memory}}
    if requests:
        resources["requests"] = dict(resources["limits"])
    agent = {"name": "agent", "image": "x", "resources": resources, "securityContext": RESTRICTED}
    return {"metadata": {"name": name}, "spec": {"containers": [agent]}}


async def test_the_fake_scheduler_fits_requests_counts_events_up_and_frees_room_when_a_pod_ends() -> None:
    async with cluster({"cpu": "2", "memory": "2Gi", "pods": "3"}, nodes=2) as (kube, _):
        store = kube.store
        assert store is not None
        api = await KubeApi.connect(k8s_config(kube))
        pods = f"/api/v1/namespaces/{NAMESPACE}/pods"
        try:
            for name in ("a", "b"):
                await api.create(pods, _pod(name, "1500m", "1Gi"), what="create")
            await eventually(lambda: _running(kube, "a", "b"), 5, "a and b running")
            await api.create(pods, _pod("c", "1", "1536Mi", requests=False), what="create")  # requests = limits
            word = "0/2 nodes are available: 2 Insufficient cpu, 2 Insufficient memory."
            unschedulable = ("False", "Unschedulable", word)
            await eventually(lambda: _condition(kube, "c", unschedulable), 5, "c unschedulable")
            await api.create(pods, _pod("d", "100m", "64Mi"), what="create")  # small: fits beside a or b
            await eventually(lambda: _running(kube, "d"), 5, "d running")
            await api.create(pods, _pod("e", "1", "1Gi"), what="create")  # a trigger for another pass over c
            await eventually(lambda: _counted(kube, "c", 2), 5, "c tried again")
            assert len(await kube.events(pod="c")) == 1, "the same word counts its event up, not a new one"
            await kube.evict("a")  # an ended pod frees its room
            await eventually(lambda: _running(kube, "c"), 5, "c placed once a ended")
            (node_a,) = [p["spec"]["nodeName"] for p in await kube.pods() if p["metadata"]["name"] == "a"]
            (node_c,) = [p["spec"]["nodeName"] for p in await kube.pods() if p["metadata"]["name"] == "c"]
            assert node_a == node_c
        finally:
            for pod in await kube.pods():
                await kube.delete_pod(pod["metadata"]["name"])
            await api.close()


async def _phases(kube: FakeKube, *names: str) -> list[str]:
    found = {p["metadata"]["name"]: p["status"].get("phase") for p in await kube.pods()}
    return [found.get(name, "") for name in names]


async def _running(kube: FakeKube, *names: str) -> bool:
    return await _phases(kube, *names) == ["Running"] * len(names)


async def _condition(kube: FakeKube, name: str, expected: tuple[str, str, str]) -> bool:
    """Whether the pod's PodScheduled condition is (status, reason, message) ``expected``."""
    for pod in await kube.pods():
        if pod["metadata"]["name"] == name:
            for c in pod["status"].get("conditions") or []:
                if c["type"] == "PodScheduled":
                    return (c["status"], c.get("reason", ""), c.get("message", "")) == expected
    return False


async def _counted(kube: FakeKube, name: str, at_least: int) -> bool:
    return sum(int(e.get("count") or 0) for e in await kube.events(pod=name)) >= at_least


async def test_the_fake_quota_refuses_pods_that_do_not_state_what_it_limits() -> None:
    async with cluster(None) as (kube, backend):
        await kube.apply_quota(
            {"metadata": {"name": "q"}, "spec": {"hard": {"limits.cpu": "8", "limits.memory": "8Gi"}}}
        )
        api = await backend.api()
        pods = f"/api/v1/namespaces/{NAMESPACE}/pods"
        agent = {"name": "agent", "image": "x", "securityContext": RESTRICTED}  # Pod Security admits it: the quota
        bare = {"metadata": {"name": "bare"}, "spec": {"containers": [agent]}}
        with pytest.raises(BackendError, match=r"failed quota: q: must specify limits.cpu for: agent; limits.memory"):
            await api.create(pods, bare, what="create pod bare")
        assert await _names(kube, "pods") == []
