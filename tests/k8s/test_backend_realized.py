"""The Kubernetes backend through the fake API server with pods realized as real containers of
``sandbox/terminal:latest``: the backend's kubernetes_asyncio client talks HTTP to the fake, the fake's kubelet runs
the pod's container, and the agent in it is reached over TCP with the pod's own token."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import secrets
from typing import Any

import docker
import pytest

from sandbox.backends.agent_client import AgentClient
from sandbox.backends.base import RuntimeState, tenant_hash
from sandbox.backends.kubernetes.backend import KubernetesBackend
from sandbox.errors import FailedPrecondition, NotFound, PermissionDenied, Unauthenticated
from sandbox.models import SandboxSpec
from sandbox.testing.fake_kube import FakeKube
from tests.k8s.fake_api_fixtures import IMAGE, NAMESPACE, backend, docker_engine, k8s_config, kube
from tests.polling import eventually

__all__ = ["backend", "docker_engine", "kube"]


def _id() -> str:
    return f"in-term-{secrets.token_hex(6)}"


SPEC = SandboxSpec(kind="terminal", labels={"sandbox.test": "k8s"})


async def _objects(kube: FakeKube, resource: str) -> list[str]:
    assert kube.store is not None
    items, _ = await kube.call(kube.store.list, resource, NAMESPACE)
    return [i["metadata"]["name"] for i in items]


async def test_create_serves_the_agent_over_tcp_with_the_pods_token(
    backend: KubernetesBackend, kube: FakeKube, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    instance = _id()
    made = await backend.create(instance, SPEC)
    try:
        assert made.state is RuntimeState.RUNNING and made.id == instance and made.ref == backend.pod_name(instance)
        result = await backend.agent(instance).exec("id -u; echo $SANDBOX_INSTANCE_ID; cat /run/sandbox-secret/token")
        uid, seen_id, token = result.stdout.split()
        assert (result.exit_code, uid, seen_id) == (0, "1000", instance)
        ip, known = backend._endpoints[instance]
        assert known == token and ip == (await kube.pods())[0]["status"]["podIP"]
        wrong = AgentClient.tcp(ip, backend.config.agent_port, token="not-" + token, label="intruder")
        with pytest.raises(Unauthenticated) as refused:
            await wrong.ping()
        await wrong.close()
        assert token not in refused.value.message
        assert await _objects(kube, "networkpolicies") == []  # the chart's baseline; internal ones per tenant
        listing = {i.id: i for i in await backend.list_instances()}
        assert listing[instance].state is RuntimeState.RUNNING
        assert listing[instance].labels["sandbox.user.sandbox.test"] == "k8s"
        await backend.set_claim(instance, {"id": "sb-term-abc", "tenant": "alice"})
        assert (await backend.claims())[instance] == {"id": "sb-term-abc", "tenant": "alice"}
        assert "[entrypoint]" in await backend.logs(instance, tail=50)
    finally:
        await backend.destroy(instance)
    assert (await backend.inspect(instance)).state is RuntimeState.MISSING
    await backend.destroy(instance)  # idempotent
    assert await _objects(kube, "pods") == [] and await _objects(kube, "secrets") == []
    encoded = base64.b64encode(token.encode()).decode()
    assert token not in caplog.text and encoded not in caplog.text, "the agent's token must never be logged"


async def test_another_replica_reads_the_token_from_the_secret(backend: KubernetesBackend, kube: FakeKube) -> None:
    instance = _id()
    await backend.create(instance, SPEC)
    other = KubernetesBackend(k8s_config(kube))
    try:
        result = await other.agent(instance).exec(["echo", "from another replica"])
        assert result.stdout == "from another replica\n"
        with pytest.raises(PermissionDenied):  # the agent's own rules still hold over TCP
            await other.agent(instance).read_file("/etc/shadow")
    finally:
        await other.close()
        await backend.destroy(instance)


async def test_a_missing_image_fails_at_the_start_deadline_with_the_last_pull_message_and_leaves_nothing(
    backend: KubernetesBackend, kube: FakeKube
) -> None:
    """The kubelet retries a failed pull (ErrImagePull, ImagePullBackOff): the create waits to its deadline."""
    spec = SandboxSpec(kind="terminal", image="sandbox/no-such-image:latest")
    started = asyncio.get_running_loop().time()
    with pytest.raises(NotFound, match="cannot pull its image: still failing 3 s after") as failed:
        await backend.create(_id(), spec, ready_timeout=3)
    assert 3 <= asyncio.get_running_loop().time() - started < 20
    assert 'image "sandbox/no-such-image:latest"' in failed.value.message
    assert await _objects(kube, "pods") == [] and await _objects(kube, "secrets") == []


async def test_an_image_that_arrives_while_the_kubelet_retries_its_pull_starts(
    backend: KubernetesBackend, kube: FakeKube, docker_engine: docker.DockerClient, caplog: pytest.LogCaptureFixture
) -> None:
    """ErrImagePull at first sight is no failure: the image tagged into the engine (the fake kubelet's registry) while
    the create waits is pulled at the next try, and the create succeeds."""
    late = f"sandbox/late-{secrets.token_hex(4)}:latest"
    instance = _id()
    caplog.set_level(logging.INFO, logger="sandbox.backends.kubernetes.backend")
    task = asyncio.create_task(backend.create(instance, SandboxSpec(kind="terminal", image=late), ready_timeout=60))
    try:
        await eventually(lambda: _pull_failed(kube, backend.pod_name(instance)), 20, "the pod failing its pull")
        assert not task.done()
        docker_engine.images.get(IMAGE).tag(late)
        made = await asyncio.wait_for(task, 60)
        assert made.state is RuntimeState.RUNNING
        assert (await backend.agent(instance).exec(["echo", "pulled late"])).stdout == "pulled late\n"
        assert "ErrImagePull" in caplog.text and "(the kubelet retries)" in caplog.text
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await backend.destroy(instance)
        docker_engine.images.remove(late, noprune=True)


async def _pull_failed(kube: FakeKube, pod: str) -> bool:
    for found in await kube.pods():
        if found["metadata"]["name"] == pod:
            waiting = ((found["status"].get("containerStatuses") or [{}])[0].get("state") or {}).get("waiting") or {}
            return waiting.get("reason") in ("ErrImagePull", "ImagePullBackOff")
    return False


@pytest.mark.parametrize("stage", ["_wait_running", "_wait_ready"])
async def test_a_cancelled_create_leaves_nothing(
    backend: KubernetesBackend, kube: FakeKube, stage: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelled while its pod starts, or while its agent comes up (held there by an event, not a sleep)."""
    reached, hold = asyncio.Event(), asyncio.Event()
    original = getattr(backend, stage)

    async def held(*args: Any, **kwargs: Any) -> Any:
        reached.set()
        await hold.wait()
        return await original(*args, **kwargs)

    monkeypatch.setattr(backend, stage, held)
    task = asyncio.create_task(backend.create(_id(), SPEC))
    await asyncio.wait_for(reached.wait(), 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    monkeypatch.undo()
    await eventually(lambda: _nothing_left(kube), 15, f"the clean-up of a create cancelled in {stage}")


async def _nothing_left(kube: FakeKube) -> bool:
    return await _objects(kube, "pods") == [] and await _objects(kube, "secrets") == []


async def test_a_dead_container_shows_and_cannot_be_restarted_in_place(
    backend: KubernetesBackend, kube: FakeKube
) -> None:
    instance = _id()
    await backend.create(instance, SPEC)
    try:
        await kube.kill_container(backend.pod_name(instance))
        await eventually(lambda: _exited(backend, instance), 10, "the pod showing its container dead")
        with pytest.raises(FailedPrecondition, match="cannot be started again in place"):
            await backend.restart(instance)
        # the fake kubelet restarts it from the image: still EXITED, the files went with the old container
        await eventually(lambda: _restarted(kube, backend.pod_name(instance)), 10, "the kubelet's restart")
        assert (await backend.inspect(instance)).state is RuntimeState.EXITED
    finally:
        await backend.destroy(instance)


async def _exited(backend: KubernetesBackend, instance: str) -> bool:
    return (await backend.inspect(instance)).state is RuntimeState.EXITED


async def _restarted(kube: FakeKube, pod: str) -> bool:
    for found in await kube.pods():
        if found["metadata"]["name"] == pod:
            status = found["status"]["containerStatuses"][0]
            return bool(status["restartCount"] == 1 and "running" in status["state"])
    return False


async def test_an_evicted_pod_is_exited_and_says_why(
    backend: KubernetesBackend, kube: FakeKube, caplog: pytest.LogCaptureFixture
) -> None:
    instance = _id()
    await backend.create(instance, SPEC)
    try:
        await kube.evict(backend.pod_name(instance))
        with caplog.at_level(logging.WARNING, logger="sandbox.backends.kubernetes.backend"):
            state = await backend.inspect(instance)
        assert state.state is RuntimeState.EXITED and state.exit_code == 137
        assert "the pod was evicted: The node was low on resource: memory." in caplog.text
    finally:
        await backend.destroy(instance)


async def test_a_snapshot_archive_keeps_the_writable_paths(backend: KubernetesBackend, kube: FakeKube) -> None:
    source, copy = _id(), _id()
    await backend.create(source, SPEC)
    try:
        agent = backend.agent(source)
        setup = "mkdir -p /workspace/d && echo kept > /workspace/d/f.txt && echo home > ~/.note && echo gone > /tmp/t"
        assert (await agent.exec(setup)).exit_code == 0
        await agent.exec("head -c 20000000 /dev/urandom > /workspace/big.bin")  # more than one 16 MiB chunk
        digest = (await agent.exec("sha256sum /workspace/big.bin")).stdout.split()[0]
        ref = await backend.snapshot(source, "alice.task-7", record={"name": "task-7", "tenant": "alice"})
        assert ref == "archive:alice.task-7"
        with open(os.path.join(backend.config.snapshot_dir, "alice.task-7.json")) as f:
            meta = json.load(f)
        assert meta["record"] == {"name": "task-7", "tenant": "alice"} and meta["bytes"] > 20_000_000
        snapshots = await backend.list_snapshots()
        assert [(s.ref, s.record) for s in snapshots] == [(ref, {"name": "task-7", "tenant": "alice"})]
        await backend.destroy(source)

        await backend.create(copy, SPEC.model_copy(update={"image": ref}))
        restored = backend.agent(copy)
        check = "cat /workspace/d/f.txt ~/.note; sha256sum /workspace/big.bin; test -e /tmp/t || echo no-tmp"
        out = (await restored.exec(check)).stdout.split()
        assert out == ["kept", "home", digest, "/workspace/big.bin", "no-tmp"]
        assert await backend.collect_snapshots(keep=set()) == []  # a pod restored from it is still there
        await backend.destroy(copy)
        assert await backend.collect_snapshots(keep=set()) == [ref]
        assert await backend.list_snapshots() == []
        with pytest.raises(NotFound):
            await backend.create(_id(), SPEC.model_copy(update={"image": ref}))
    finally:
        for instance in (source, copy):
            await backend.destroy(instance)


async def test_a_shared_volume_is_a_claim_mounted_into_each_pod(backend: KubernetesBackend, kube: FakeKube) -> None:
    writer, reader = _id(), _id()
    mount = {"name": "shared", "path": "/workspace/shared"}
    rw = SandboxSpec.model_validate({"kind": "terminal", "volumes": [mount]})
    ro = SandboxSpec.model_validate({"kind": "terminal", "volumes": [{**mount, "read_only": True}]})
    try:
        await asyncio.gather(backend.create(writer, rw, tenant="alice"), backend.create(reader, ro, tenant="alice"))
        assert f"sbxvol-{tenant_hash('alice')}-shared" in await _objects(kube, "persistentvolumeclaims")
        assert (await backend.agent(writer).exec("echo hi > /workspace/shared/x")).exit_code == 0
        assert (await backend.agent(reader).exec("cat /workspace/shared/x")).stdout == "hi\n"
        denied = await backend.agent(reader).exec("echo no > /workspace/shared/y")
        assert denied.exit_code != 0 and "Read-only" in denied.stderr
    finally:
        for instance in (writer, reader):
            await backend.destroy(instance)
