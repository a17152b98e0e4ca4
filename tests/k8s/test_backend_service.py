"""The platform's service layer over the Kubernetes backend, pods realized as containers by the fake API server:
create, step, reset to a snapshot archive, a warm-pool claim, and failures (a killed pod, a deleted pod, an
evicted pod) that the health pass turns into a replacement or a clear error, never silence."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from sandbox.backends.kubernetes.backend import KubernetesBackend
from sandbox.errors import FailedPrecondition
from sandbox.models import Exec, SandboxSpec, SandboxState
from sandbox.service import Principal, SandboxService
from sandbox.service.lifecycle import Lifecycle, LifecycleSettings
from sandbox.service.records import SANDBOXES
from sandbox.store import EmbeddedStore
from sandbox.testing.fake_kube import FakeKube
from tests.conftest import require_image
from tests.k8s.fake_api_fixtures import NAMESPACE, docker_engine, k8s_config, kube
from tests.polling import eventually

__all__ = ["docker_engine", "kube"]

LOGGER = logging.getLogger("sandbox.test.k8s")
ALICE = Principal("alice")
SPEC = SandboxSpec(kind="terminal", labels={"sandbox.test": "k8s-service"})


@pytest_asyncio.fixture(loop_scope="session")
async def service(kube: FakeKube) -> AsyncIterator[SandboxService]:
    backend = KubernetesBackend(k8s_config(kube))
    store = await EmbeddedStore.open(None, logger=LOGGER)
    service = SandboxService(backend, store, logger=LOGGER)
    await service.start()
    try:
        yield service
    finally:
        for doc in (await store.all(SANDBOXES)).values():
            await service.delete(Principal(doc["tenant"]), doc["id"])
        await service.instances.drain()
        await service.close()
        await store.close()
        await eventually(lambda: _no_pods(kube), 30, "every pod of the test removed")


async def _no_pods(kube: FakeKube) -> bool:
    return not await kube.pods(NAMESPACE)


async def _sh(service: SandboxService, sandbox_id: str, cmd: str) -> str:
    result = await service.exec(ALICE, sandbox_id, Exec(cmd=cmd))
    assert result.exit_code == 0, result.stderr
    return result.stdout


async def test_create_step_and_reset_to_a_snapshot_archive(service: SandboxService, kube: FakeKube) -> None:
    info = await service.create(ALICE, SPEC)
    observation = await service.step(ALICE, info.id, Exec(cmd="echo v1 > /workspace/state; cat /workspace/state"))
    assert observation.exec is not None and observation.exec.stdout == "v1\n"
    snap = await service.snapshot(ALICE, info.id, "task-7")
    assert snap.image == "archive:alice.task-7"
    await _sh(service, info.id, "echo v2 > /workspace/state; touch /workspace/extra")
    before = await _instance(service, info.id)
    reset = await service.reset(ALICE, info.id, snapshot="task-7")
    after = await _instance(service, info.id)
    assert reset.id == info.id and after != before
    assert await _sh(service, info.id, "cat /workspace/state; ls /workspace") == "v1\nstate\n"
    await eventually(lambda: _pod_gone(kube, service, before), 15, "the instance swapped out removed")
    await service.delete_snapshot(ALICE, "task-7")
    assert [s.ref for s in await service.backend.list_snapshots()] == [snap.image]  # a pod restored from it runs
    await service.delete(ALICE, info.id)
    await eventually(lambda: _pod_gone(kube, service, after), 15, "the sandbox's pod removed")
    assert await service.collect_snapshot_images() == [snap.image]
    assert await service.backend.list_snapshots() == []


async def _instance(service: SandboxService, sandbox_id: str) -> str:
    record = await service.records.read(sandbox_id)
    assert record is not None
    return record.instance


async def _pod_gone(kube: FakeKube, service: SandboxService, instance: str) -> bool:
    backend = service.backend
    assert isinstance(backend, KubernetesBackend)
    return backend.pod_name(instance) not in {p["metadata"]["name"] for p in await kube.pods()}


async def test_create_takes_a_warm_pod_from_the_pool(service: SandboxService, kube: FakeKube) -> None:
    spec = SandboxSpec(kind="terminal")
    key = service.pools.add(spec, service.backend.image_for(spec), min=1, max=1)
    try:
        await service.pools.refill()
        await eventually(lambda: _queued(service, key), 30, "the pool holding a warm pod")
        (warm,) = await service.store.items(key)
        pods_before = {p["metadata"]["name"] for p in await kube.pods()}
        info = await service.create(ALICE, spec)
        record = await service.records.read(info.id)
        assert record is not None and record.instance == warm
        assert {p["metadata"]["name"] for p in await kube.pods()} == pods_before  # no pod started on the way
        assert await _sh(service, info.id, "echo $SANDBOX_INSTANCE_ID") == f"{warm}\n"
    finally:
        service.pools.remove(key)
        while (left := await service.store.pop(key)) is not None:
            await service.instances.retire(left)


async def _queued(service: SandboxService, key: str) -> bool:
    return len(await service.store.items(key)) == 1


def _lifecycle(service: SandboxService) -> Lifecycle:
    return Lifecycle(service, LifecycleSettings(health_interval_s=1, orphan_grace_s=60), logger=LOGGER)


async def test_a_killed_pod_is_replaced_for_an_auto_recover_sandbox(service: SandboxService, kube: FakeKube) -> None:
    info = await service.create(ALICE, SPEC.model_copy(update={"auto_recover": True}))
    record = await service.records.read(info.id)
    assert record is not None
    backend = service.backend
    assert isinstance(backend, KubernetesBackend)
    await _sh(service, info.id, "echo lost > /workspace/file")
    await kube.kill_container(backend.pod_name(record.instance))  # behind the API's back
    await eventually(lambda: _exited(backend, record.instance), 10, "the pod showing its container dead")
    await _lifecycle(service).check_health()
    fresh = await service.records.read(info.id)
    assert fresh is not None and fresh.instance != record.instance
    assert fresh.state is SandboxState.RUNNING and fresh.replacements == 1
    assert await _sh(service, info.id, "ls /workspace") == ""  # a fresh instance: the files went with the pod
    await eventually(lambda: _pod_gone(kube, service, record.instance), 15, "the dead pod removed")


async def _exited(backend: KubernetesBackend, instance: str) -> bool:
    return (await backend.inspect(instance)).state.value == "exited"


async def test_a_deleted_or_evicted_pod_is_a_clear_error(service: SandboxService, kube: FakeKube) -> None:
    deleted, evicted = await service.create(ALICE, SPEC), await service.create(ALICE, SPEC)
    backend = service.backend
    assert isinstance(backend, KubernetesBackend)
    # behind the control plane's back: one pod deleted (kubectl delete pod), the other evicted by its kubelet
    await kube.delete_pod(backend.pod_name(await _instance(service, deleted.id)))
    await kube.evict(backend.pod_name(await _instance(service, evicted.id)))
    await _lifecycle(service).check_health()
    gone, failed = await service.get(ALICE, deleted.id), await service.get(ALICE, evicted.id)
    assert gone.state is SandboxState.UNHEALTHY and "gone" in (gone.error or "")
    assert failed.state is SandboxState.UNHEALTHY and "exited" in (failed.error or "")
    with pytest.raises(FailedPrecondition, match="unhealthy"):
        await service.exec(ALICE, evicted.id, Exec(cmd="true"))


async def test_a_desktop_snapshot_starts_its_programs_again(
    service: SandboxService, kube: FakeKube, docker_engine: object
) -> None:
    """As on Docker: the programs whose windows were open are recorded in the (archived) home, and started again in
    the pod restored from the archive. The VNC tunnel (the web view's path) works through the agent over TCP."""
    await asyncio.to_thread(require_image, docker_engine, "desktop")
    info = await service.create(ALICE, SandboxSpec(kind="desktop", labels={"sandbox.test": "k8s-service"}))
    await service.exec(ALICE, info.id, Exec(cmd="xterm -T kept -e sh -c 'sleep 1000' &", keep_background=True))
    await eventually(lambda: _window(service, info.id, "kept"), 15, "the xterm window opening")
    await service.snapshot(ALICE, info.id, "desk-1")
    await service.reset(ALICE, info.id, snapshot="desk-1")
    await eventually(lambda: _window(service, info.id, "kept"), 15, "the xterm started again from the snapshot")
    reader, writer = await service.open_tunnel(ALICE, info.id, 5900)  # the web view's path to VNC, over TCP too
    try:
        assert (await asyncio.wait_for(reader.readexactly(12), 10)).startswith(b"RFB ")
    finally:
        writer.close()
    await service.delete(ALICE, info.id)
    await service.delete_snapshot(ALICE, "desk-1")


async def _window(service: SandboxService, sandbox_id: str, title: str) -> bool:
    """A window named ``title`` among those the window manager manages (what a snapshot records)."""
    managed = "for w in $(xprop -root _NET_CLIENT_LIST | sed 's/.*#//; s/,/ /g'); do xprop -id $w WM_NAME; done"
    result = await service.exec(ALICE, sandbox_id, Exec(cmd=f"{managed} | grep -F '\"{title}\"'"))
    return result.exit_code == 0
