"""Task snapshots on real terminals: three sandboxes reset to one new task at once take one snapshot image (the
lock holder's; the two others set up without waiting for it) and all three score; the next reset swaps it in; once
unused past the ttl the leader's collection removes its record, its warm replica and its image."""

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

from sandbox.backends.base import LABEL_OWNER, LABEL_SNAPSHOT
from sandbox.backends.docker.backend import DockerBackend
from sandbox.backends.docker.config import DockerConfig
from sandbox.models import Exec, SandboxSpec
from sandbox.service import Principal, SandboxService
from sandbox.service.records import SNAPSHOTS, SnapshotRecord, pool_key
from sandbox.service.task_config import TaskSettings, task_snapshot_name
from sandbox.service.task_snapshots import IN_USE_S
from sandbox.store import EmbeddedStore
from sandbox.tasks.model import Task
from tests.conftest import OWNER, RUN_ID, TEST_LABEL, owned_by, require_image
from tests.polling import eventually

pytestmark = pytest.mark.docker

LOGGER = logging.getLogger("sandbox.test.task_snapshots")
TS_OWNER = f"{OWNER}-ts"
TS_SOCKET_ROOT = f"/run/sbx-test-{RUN_ID}-ts"
ALICE = Principal("alice")
TASK: dict[str, Any] = {
    "id": "terminal-hello",
    "instruction": "Append 'hello' to notes.txt in the workspace.",
    "sandbox": {"kind": "terminal"},
    "config": [
        {
            "type": "execute",
            "parameters": {"command": "printf 'draft\\n' > notes.txt && echo run >> .setup-runs", "shell": True},
        }
    ],
    "evaluator": {
        "func": "exact_match",
        "result": {"type": "vm_command_line", "command": "cat notes.txt", "shell": True},
        "expected": {"type": "rule", "rules": {"expected": "draft\nhello\n"}},
    },
    "limits": {"max_steps": 5},
}


async def task_snapshots(service: SandboxService) -> dict[str, SnapshotRecord]:
    return {key: SnapshotRecord.model_validate(doc) for key, doc in (await service.store.all(SNAPSHOTS)).items()}


def _snapshot_images(client: docker.DockerClient) -> list[Any]:
    return list(client.images.list(filters={"label": [f"{LABEL_OWNER}={TS_OWNER}", LABEL_SNAPSHOT]}))


@pytest_asyncio.fixture
async def service(docker_client: docker.DockerClient) -> AsyncIterator[SandboxService]:
    require_image(docker_client, "terminal")
    with owned_by(docker_client, TS_OWNER, TS_SOCKET_ROOT):
        backend = DockerBackend(DockerConfig(owner=TS_OWNER, socket_root=TS_SOCKET_ROOT))
        store = await EmbeddedStore.open(None, logger=LOGGER)
        service = SandboxService(backend, store, logger=LOGGER, tasks=TaskSettings(warm_per_task=1))
        await service.start()
        try:
            yield service
        finally:
            for snap in await service.list_snapshots(ALICE):
                await service.delete_snapshot(ALICE, snap.name)
            await service.close()
            await store.close()
    for image in docker_client.images.list(filters={"label": f"{LABEL_OWNER}={TS_OWNER}"}):
        with contextlib.suppress(docker.errors.APIError):
            docker_client.images.remove(image.id, force=True)


async def _solve_and_score(service: SandboxService, sandbox_id: str) -> float:
    await service.step(ALICE, sandbox_id, Exec(cmd="echo hello >> notes.txt"))
    return await service.evaluate(ALICE, sandbox_id)


async def test_three_first_resets_take_one_snapshot_which_is_collected_when_unused(
    service: SandboxService, docker_client: docker.DockerClient
) -> None:
    task = Task.from_dict(TASK)
    name = task_snapshot_name(task.digest())
    spec = SandboxSpec.model_validate({"kind": "terminal", "labels": TEST_LABEL})
    sandboxes = [(await service.create(ALICE, spec)).id for _ in range(3)]
    try:
        started = time.perf_counter()
        observations = await asyncio.gather(*(service.reset(ALICE, sb, task=task) for sb in sandboxes))
        took_s = time.perf_counter() - started
        totals = sorted(obs.timings_ms["total"] for obs in observations)
        LOGGER.warning("3 first resets at once: %.3f s; each (ms): %s", took_s, totals)
        assert all(obs.info["setup_ran"] and obs.info["snapshot"] is None for obs in observations)
        assert service.task_snapshots_taken == 1 and service.setups_run == 3
        images = _snapshot_images(docker_client)
        assert len(images) == 1, [i.tags for i in images]
        snaps = await task_snapshots(service)
        assert [s.name for s in snaps.values()] == [name] and snaps[f"{ALICE.tenant}/{name}"].image in images[0].tags
        scores = await asyncio.gather(*(_solve_and_score(service, sb) for sb in sandboxes))
        assert scores == [1.0, 1.0, 1.0]

        # The next reset to it swaps the snapshot in: the setup does not run again.
        again = await service.reset(ALICE, sandboxes[0], task=task)
        assert (again.info["snapshot"], again.info["setup_steps"]) == (name, 0)
        LOGGER.warning("then a reset starting from the snapshot (no warm replica): %.0f ms", again.timings_ms["total"])
        runs = await service.exec(ALICE, sandboxes[0], Exec(cmd="cat .setup-runs"))
        assert runs.stdout == "run\n"
        assert await _solve_and_score(service, sandboxes[0]) == 1.0
    finally:
        for sb in sandboxes:
            await service.delete(ALICE, sb)
        await service.instances.drain()

    # A warm replica of it, then collection once it is unused past the ttl: record, replica and image go.
    snap = (await task_snapshots(service))[f"{ALICE.tenant}/{name}"]
    queue = pool_key(snap.warm_spec(), snap.image)  # type: ignore[arg-type]
    await service.pools.refill()
    await eventually(lambda: _queued(service, queue), 60, "the warm replica of the task's snapshot")
    ttl = service.task_settings.task_snapshot_ttl_s
    assert ttl is not None
    assert await service.collect_task_snapshots(now=time.time() + ttl + IN_USE_S) == [name]
    assert await task_snapshots(service) == {} and await service.store.items(queue) == []
    assert _snapshot_images(docker_client) == [], "the snapshot's image is removed with its record"
    assert not docker_client.containers.list(all=True, filters={"label": f"{LABEL_OWNER}={TS_OWNER}"})


async def _queued(service: SandboxService, queue: str) -> bool:
    return len(await service.store.items(queue)) >= 1
