"""The Docker backend's lifecycle: labels, listing, logs, destroy, and failures that leave nothing."""

from __future__ import annotations

import asyncio
import itertools
import os
import secrets
import time

import pytest

from sandbox.backends.base import LABEL_INSTANCE, RuntimeState
from sandbox.backends.docker.backend import DockerBackend
from sandbox.backends.docker.teardown import engine_needs_lane
from sandbox.errors import FailedPrecondition, NotFound
from sandbox.models import SandboxSpec
from tests.conftest import TEST_LABEL

pytestmark = pytest.mark.docker


async def test_create_list_logs_destroy_leaves_nothing(backend: DockerBackend) -> None:
    sandbox_id = f"life-{secrets.token_hex(4)}"
    spec = SandboxSpec.model_validate({"kind": "terminal", "labels": {**TEST_LABEL, "task": "t1"}})
    created = await backend.create(sandbox_id, spec)
    try:
        assert created.state is RuntimeState.RUNNING and created.id == sandbox_id
        listed = {s.id: s for s in await backend.list_instances()}
        assert sandbox_id in listed and listed[sandbox_id].labels["sandbox.user.task"] == "t1"
        assert "agent" in await backend.logs(sandbox_id)
        assert os.path.exists(os.path.join(backend.socket_dir(sandbox_id), "agent.sock"))
    finally:
        await backend.destroy(sandbox_id)
    assert (await backend.inspect(sandbox_id)).state is RuntimeState.MISSING
    assert sandbox_id not in {s.id for s in await backend.list_instances()}
    assert not os.path.exists(backend.socket_dir(sandbox_id))
    await backend.destroy(sandbox_id)  # idempotent


async def test_the_listing_of_instances_not_running_shows_paused_and_stopped_ones_only(backend: DockerBackend) -> None:
    sandbox_id = f"stop-{secrets.token_hex(4)}"
    spec = SandboxSpec.model_validate({"kind": "terminal", "labels": TEST_LABEL})
    await backend.create(sandbox_id, spec)
    ref = backend.container_name(sandbox_id)
    try:
        assert sandbox_id not in {s.id for s in await backend.list_not_running()}, "a running instance is listed"
        await asyncio.to_thread(backend.client.api.pause, ref)
        try:
            paused = {s.id: s for s in await backend.list_not_running()}
            assert paused[sandbox_id].state is RuntimeState.PAUSED
        finally:
            await asyncio.to_thread(backend.client.api.unpause, ref)
        await asyncio.to_thread(backend.client.api.kill, ref)
        stopped = {s.id: s for s in await backend.list_not_running()}
        assert stopped[sandbox_id].state is RuntimeState.EXITED and stopped[sandbox_id].exit_code == 137
        assert set(stopped) <= {s.id for s in await backend.list_instances()}
    finally:
        await backend.destroy(sandbox_id)
    assert sandbox_id not in {s.id for s in await backend.list_not_running()}


async def test_missing_image_fails_clearly_and_leaves_nothing(backend: DockerBackend) -> None:
    sandbox_id = f"noimg-{secrets.token_hex(4)}"
    spec = SandboxSpec.model_validate({"kind": "terminal", "image": "sandbox/does-not-exist:latest"})
    with pytest.raises(NotFound, match="sandbox images build"):
        await backend.create(sandbox_id, spec)
    assert (await backend.inspect(sandbox_id)).state is RuntimeState.MISSING
    assert not os.path.exists(backend.socket_dir(sandbox_id))


async def test_android_without_kvm_is_refused_before_any_container(backend: DockerBackend) -> None:
    """A host without /dev/kvm (this one; a missing path stands in elsewhere): refused, naming what is missing,
    before a container, a socket directory or a claim is made."""
    no_kvm = DockerBackend(backend.config.model_copy(update={"kvm_device": "/nonexistent/kvm"}))
    before = {i.id for i in await backend.list_instances()}
    spec = SandboxSpec.model_validate({"kind": "android", "resources": {"memory_mb": 4096}, "labels": TEST_LABEL})
    try:
        with pytest.raises(FailedPrecondition, match=r"android sandboxes need /dev/kvm on the Docker host \(KVM\)"):
            await no_kvm.create("andr-1", spec)
    finally:
        await no_kvm.close()
    assert {i.id for i in await backend.list_instances()} == before
    assert not os.path.exists(backend.socket_dir("andr-1"))


async def test_a_missing_android_image_says_how_to_build_it(backend: DockerBackend) -> None:
    """With a device (/dev/null stands in for /dev/kvm: the engine checks only that the path is a device) and no
    android image, the missing-image error says the image is built from an SDK; nothing is left."""
    image = "sandbox/android-not-built-here:latest"
    spec = SandboxSpec.model_validate(
        {"kind": "android", "image": image, "resources": {"memory_mb": 4096}, "labels": TEST_LABEL}
    )
    with_device = DockerBackend(backend.config.model_copy(update={"kvm_device": "/dev/null"}))
    sandbox_id = f"andr-{secrets.token_hex(4)}"
    try:
        with pytest.raises(NotFound, match=r"image not found.*SANDBOX_ANDROID_SDK=.*docs/android.md"):
            await with_device.create(sandbox_id, spec)
    finally:
        await with_device.close()
    assert (await backend.inspect(sandbox_id)).state is RuntimeState.MISSING
    assert not os.path.exists(backend.socket_dir(sandbox_id))


async def test_parallel_creates_do_not_block_each_other(backend: DockerBackend) -> None:
    ids = [f"par-{secrets.token_hex(3)}" for _ in range(4)]
    spec = SandboxSpec.model_validate({"kind": "terminal", "labels": TEST_LABEL})
    try:
        created = await asyncio.gather(*(backend.create(i, spec) for i in ids))
        assert {c.id for c in created} == set(ids)
        answers = await asyncio.gather(*(backend.agent(i).exec(["echo", i]) for i in ids))
        assert [a.stdout.strip() for a in answers] == ids
    finally:
        await asyncio.gather(*(backend.destroy(i) for i in ids))
    assert not ({s.labels.get(LABEL_INSTANCE) for s in await backend.list_instances()} & set(ids))


async def test_destroys_at_once_tear_down_one_at_a_time_on_an_engine_that_needs_it(backend: DockerBackend) -> None:
    """On Docker before 23 two teardowns that overlap can deadlock the engine (teardown.py): each container's
    network teardown, from its ``kill`` to its network's ``disconnect`` event, ends before the next one's begins."""
    version = str(backend.client.version().get("Version"))
    if not engine_needs_lane(version):
        pytest.skip(f"Docker {version} tears down without the lane")
    ids = [f"td-{secrets.token_hex(3)}" for _ in range(6)]
    spec = SandboxSpec.model_validate({"kind": "terminal", "labels": TEST_LABEL})
    try:
        await asyncio.gather(*(backend.create(i, spec) for i in ids))
        containers = {backend.client.containers.get(backend.container_name(i)).id for i in ids}
        since = time.time() - 1
        await asyncio.gather(*(backend.destroy(i) for i in ids))
    finally:
        await asyncio.gather(*(backend.destroy(i) for i in ids))
    events = backend.client.api.events(
        since=since, until=time.time() + 1, filters={"event": ["kill", "disconnect"]}, decode=True
    )
    spans: dict[str, dict[str, int]] = {}
    for event in events:
        container = event["id"] if event["Type"] == "container" else event["Actor"]["Attributes"].get("container")
        if container in containers:
            spans.setdefault(container, {})[event["Action"]] = event["timeNano"]
    assert len(spans) == 6 and all(len(s) == 2 for s in spans.values()), spans
    ordered = sorted((s["kill"], s["disconnect"]) for s in spans.values())
    overlaps = [(a, b) for a, b in itertools.pairwise(ordered) if b[0] < a[1]]
    assert not overlaps, f"teardowns overlapped: {overlaps}"
