"""Lifecycle at scale, on real containers: warm pools, snapshots and fast reset, health with
auto-recovery, leases. The service runs in-process here, under an owner label of its own
(its reconciliation removes containers it does not know of that carry its label)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import docker
import pytest
import pytest_asyncio

from sandbox.backends.base import LABEL_OWNER
from sandbox.backends.docker.backend import DockerBackend
from sandbox.backends.docker.config import DockerConfig
from sandbox.errors import FailedPrecondition
from sandbox.models import Exec, SandboxSpec, SandboxState
from sandbox.service import Principal, SandboxService
from sandbox.service.lifecycle import Lifecycle, LifecycleSettings
from sandbox.service.records import CREATED_COUNTER
from sandbox.store import EmbeddedStore
from tests.conftest import OWNER, RUN_ID, TEST_LABEL, owned_by, require_image
from tests.polling import eventually

pytestmark = pytest.mark.docker

LOGGER = logging.getLogger("sandbox.test.lifecycle")
LC_OWNER = f"{OWNER}-lc"
LC_SOCKET_ROOT = f"/run/sbx-test-{RUN_ID}-lc"
ALICE = Principal("alice")
FAST = LifecycleSettings(tick_s=0.2, health_interval_s=1.0, reconcile_interval_s=2.0, orphan_grace_s=60)


@pytest_asyncio.fixture
async def service(docker_client: docker.DockerClient) -> AsyncIterator[SandboxService]:
    for kind in ("terminal", "desktop"):
        require_image(docker_client, kind)
    with owned_by(docker_client, LC_OWNER, LC_SOCKET_ROOT):
        backend = DockerBackend(DockerConfig(owner=LC_OWNER, socket_root=LC_SOCKET_ROOT))
        store = await EmbeddedStore.open(None, logger=LOGGER)
        service = SandboxService(backend, store, logger=LOGGER)
        yield service
        await service.close()
        await store.close()
    for image in docker_client.images.list(filters={"label": f"{LABEL_OWNER}={LC_OWNER}"}):
        with contextlib.suppress(docker.errors.APIError):
            docker_client.images.remove(image.id, force=True)


@contextlib.asynccontextmanager
async def running(lifecycle: Lifecycle) -> AsyncIterator[Lifecycle]:
    task = asyncio.create_task(lifecycle.run())
    try:
        yield lifecycle
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await lifecycle.stop()


class Passes:
    """The completed calls of one object's async method, each by the wall-clock time it began: the lifecycle counts
    its passes nowhere, and a test that means "after N passes" waits on this count, not on wall time."""

    def __init__(self, owner: object, method: str) -> None:
        self.began: list[float] = []
        wrapped = getattr(owner, method)

        async def counted(*args: Any, **kwargs: Any) -> Any:
            began = time.time()
            result = await wrapped(*args, **kwargs)
            self.began.append(began)
            return result

        setattr(owner, method, counted)  # on this instance only: the class and other instances are untouched

    def since(self, moment: float) -> int:
        """How many of the calls that have ended began at ``moment`` or later."""
        return sum(1 for began in self.began if began >= moment)


def _spec(kind: str = "terminal", **extra: Any) -> SandboxSpec:
    return SandboxSpec.model_validate({"kind": kind, "labels": TEST_LABEL, **extra})


async def _sh(service: SandboxService, sandbox_id: str, cmd: str, **options: Any) -> tuple[int | None, str]:
    result = await service.exec(ALICE, sandbox_id, Exec(cmd=cmd, **options))
    return result.exit_code, result.stdout


async def test_warm_acquire_starts_no_container(service: SandboxService) -> None:
    spec = _spec()
    key = service.pools.add(spec, service.backend.image_for(spec), min=2, max=3)
    lifecycle = Lifecycle(service, FAST, logger=LOGGER)
    async with running(lifecycle):
        await eventually(lambda: _has(service, key, 2), 60, "the pool filling")
    warm = set(await service.store.items(key))
    created = await service.store.counter(CREATED_COUNTER)
    containers = {s.id for s in await service.backend.list_instances()}

    info = await service.create(ALICE, spec)

    assert await service.store.counter(CREATED_COUNTER) == created, "a warm acquire must start no container"
    assert {s.id for s in await service.backend.list_instances()} == containers
    record = await service.store.get("sandboxes", info.id)
    assert record is not None and record["instance"] in warm
    assert (await _sh(service, info.id, "echo warm")) == (0, "warm\n")
    assert len(await service.store.items(key)) == 1, "a warm instance is handed out once"


async def test_a_warm_container_killed_on_the_engine_is_never_handed_out(
    service: SandboxService, docker_client: docker.DockerClient
) -> None:
    """A claim asks no ping of an agent that answered lately on a connection it holds; a killed container's agent
    has closed its connections, which the claim sees at once, so it pings, finds it dead and takes the next one."""
    spec = _spec()
    key = service.pools.add(spec, service.backend.image_for(spec), min=2, max=2)
    lifecycle = Lifecycle(service, FAST, logger=LOGGER)
    async with running(lifecycle):
        await eventually(lambda: _has(service, key, 2), 60, "the pool filling")
    service.pools.remove(key)
    dead, alive = await service.store.items(key)
    assert isinstance(service.backend, DockerBackend)
    container = docker_client.containers.get(service.backend.container_name(dead))
    container.kill()
    await eventually(lambda: _exited(container), 30, "the container to stop")

    info = await service.create(ALICE, spec)

    record = await service.store.get("sandboxes", info.id)
    assert record is not None and record["instance"] == alive, "handed out the killed container"
    assert (await _sh(service, info.id, "echo alive")) == (0, "alive\n")
    await service.delete(ALICE, info.id)


def _exited(container: Any) -> bool:
    container.reload()
    return container.status != "running"


async def _has(service: SandboxService, key: str, count: int) -> bool:
    return len(await service.store.items(key)) >= count


async def test_snapshot_reset_keeps_files_and_apps_and_drops_later_changes(service: SandboxService) -> None:
    info = await service.create(ALICE, _spec("desktop"))
    sid = info.id
    await _sh(service, sid, "echo kept > /workspace/before.txt")
    code, _ = await _sh(
        service,
        sid,
        "xterm -T snapapp -geometry 50x8+40+40 -e sh -c 'sleep 100000' >/dev/null 2>&1 &",
        keep_background=True,
    )
    assert code == 0
    await eventually(lambda: _viewable(service, sid, "snapapp"), 20, "the app window")

    snap = await service.snapshot(ALICE, sid, "before-later", warm=1)
    assert snap.kind.value == "desktop" and snap.source == sid
    await _sh(service, sid, "echo gone > /workspace/after.txt; rm /workspace/before.txt")

    lifecycle = Lifecycle(service, FAST, logger=LOGGER)
    async with running(lifecycle):  # keeps the warm replica of the snapshot ready
        pool = next(iter(await service.pools.sizes()))
        await eventually(lambda: _has(service, pool, 1), 60, "the warm replica of the snapshot")
        warm = set(await service.store.items(pool))
        await service.reset(ALICE, sid, snapshot="before-later")
    record = await service.store.get("sandboxes", sid)
    assert record is not None and record["instance"] in warm, "the fast path swaps in the warm replica"
    assert (await _sh(service, sid, "cat /workspace/before.txt"))[1] == "kept\n"
    assert (await _sh(service, sid, "test -e /workspace/after.txt"))[0] != 0
    await eventually(lambda: _viewable(service, sid, "snapapp"), 20, "the snapshot's app on screen")
    shot = await service.screenshot(ALICE, sid)
    assert shot.width == 1280 and len(shot.data) > 2000, "the screen shows the app, not an empty desktop"

    # Without a warm replica, reset falls back to a cold start of the snapshot.
    await _sh(service, sid, "echo again > /workspace/after.txt")
    await service.reset(ALICE, sid)
    assert (await _sh(service, sid, "test -e /workspace/after.txt"))[0] != 0
    assert [s.name for s in await service.list_snapshots(ALICE)] == ["before-later"]
    await service.delete(ALICE, sid)
    await service.delete_snapshot(ALICE, "before-later")
    assert await service.list_snapshots(ALICE) == []


async def test_warm_replicas_follow_the_stored_snapshots(
    service: SandboxService, docker_client: docker.DockerClient
) -> None:
    source = await service.create(ALICE, _spec())
    await _sh(service, source.id, "echo from-snapshot > /workspace/mark.txt")
    kept = await service.snapshot(ALICE, source.id, "kept-warm", warm=1)
    await service.delete(ALICE, source.id)  # the snapshot keeps the spec its replicas start with

    lifecycle = Lifecycle(service, FAST, logger=LOGGER)
    syncs, refills = Passes(service, "sync_snapshot_pools"), Passes(service.pools, "refill")
    async with running(lifecycle):
        kept_pool = next(iter(await service.pools.sizes()))
        await eventually(lambda: _has(service, kept_pool, 1), 60, "the warm replica of a snapshot whose source is gone")

        other = await service.create(ALICE, _spec())
        doomed = await service.snapshot(ALICE, other.id, "deleted-early", warm=2)
        await service.delete_snapshot(ALICE, "deleted-early")  # while its replicas may be starting
        await service.delete(ALICE, other.id)

        async def replicas_gone() -> bool:
            filters = {"label": f"{LABEL_OWNER}={LC_OWNER}", "ancestor": doomed.image}
            return not await asyncio.to_thread(docker_client.api.containers, all=True, filters=filters)

        await eventually(replicas_gone, 30, "the removal of a deleted snapshot's replicas")
        # Later passes must not start them again: two syncs of the snapshot pools (each health round's) that began
        # after they were gone, then a refill of the pools that began after those.
        gone = time.time()
        await eventually(lambda: syncs.since(gone) >= 2, 30, "two snapshot-pool syncs after the replicas were gone")
        synced = time.time()
        await eventually(lambda: refills.since(synced) >= 1, 30, "a refill of the pools after those syncs")
        assert await replicas_gone(), "replicas of a deleted snapshot were started again"
        assert set(await service.pools.sizes()) == {kept_pool}

        info = await service.create(ALICE, _spec(snapshot="kept-warm"))
    assert (await _sh(service, info.id, "cat /workspace/mark.txt"))[1] == "from-snapshot\n"
    await service.delete(ALICE, info.id)
    await service.delete_snapshot(ALICE, kept.name)


async def _viewable(service: SandboxService, sandbox_id: str, title: str) -> bool:
    return (await _sh(service, sandbox_id, f"xdotool search --onlyvisible --name '^{title}$'"))[0] == 0


@pytest.mark.parametrize("auto_recover", [True, False])
async def test_container_killed_from_outside(service: SandboxService, auto_recover: bool) -> None:
    info = await service.create(ALICE, _spec(auto_recover=auto_recover))
    record = await service.store.get("sandboxes", info.id)
    assert record is not None
    first = record["instance"]
    lifecycle = Lifecycle(service, FAST, logger=LOGGER)
    rounds = Passes(lifecycle, "check_health")
    async with running(lifecycle):
        # Killed once the lifecycle leads and has seen it healthy: a later round is the one that notices.
        await eventually(lambda: rounds.began, 10, "a first health round")
        container = service.backend.client.containers.get(service.backend.container_name(first))  # type: ignore[attr-defined]
        await asyncio.to_thread(container.kill)

        async def noticed() -> bool:
            now = await service.get(ALICE, info.id)
            return now.replacements == 1 if auto_recover else now.state is SandboxState.UNHEALTHY

        took = await eventually(noticed, 5, "noticing the killed container")
        LOGGER.info("noticed in %.2f s", took)
        if auto_recover:
            await eventually(lambda: _alive(service, info.id), 30, "the replacement answering")
            assert (await _sh(service, info.id, "echo back"))[1] == "back\n"
        else:
            with pytest.raises(FailedPrecondition, match="exited"):
                await _sh(service, info.id, "true")


async def _alive(service: SandboxService, sandbox_id: str) -> bool:
    return (await service.get(ALICE, sandbox_id)).state is SandboxState.RUNNING


async def test_ttl_expiry_reclaims_and_renew_extends(service: SandboxService) -> None:
    info = await service.create(ALICE, _spec(ttl_s=3))
    lifecycle = Lifecycle(service, FAST, logger=LOGGER)
    expiries = Passes(lifecycle, "expire_leases")
    async with running(lifecycle):
        # A duration, not a wait for a state: the client renews halfway through its 3 s lease, as one on a timer would.
        await asyncio.sleep(1.5)
        renewed = await service.renew(ALICE, info.id, ttl_s=4)
        assert renewed.expires_at > info.expires_at + 1
        # Past the first ttl: a pass of lease expiry that began after it has left the renewed sandbox alone.
        await eventually(lambda: expiries.since(info.expires_at) >= 1, 10, "a lease-expiry pass past the first ttl")
        assert (await _sh(service, info.id, "echo alive"))[1] == "alive\n"
        record = await service.store.get("sandboxes", info.id)
        assert record is not None
        instance = record["instance"]
        await eventually(lambda: _expired(service, info.id), 8, "expiry")
        await eventually(lambda: _gone(service, instance), 10, "the container's removal")
    with pytest.raises(FailedPrecondition, match="expired because its ttl"):
        await _sh(service, info.id, "true")


async def _expired(service: SandboxService, sandbox_id: str) -> bool:
    doc = await service.store.get("sandboxes", sandbox_id)
    return doc is not None and doc["state"] == "expired"


async def _gone(service: SandboxService, instance: str) -> bool:
    return (await service.backend.inspect(instance)).state.value == "missing"
