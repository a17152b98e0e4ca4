"""Collection of task snapshots, on the fake backend able to snapshot: a snapshot unused for the ttl goes (its
record, its warm instances, its image), the least recently used beyond the bound go, one a sandbox's spec names or
used lately stays, a reset that marks it used between the collector's read and its delete keeps it, every reset that
swaps it in marks it used, and the leader's reconciliation runs the collection."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from sandbox.models import Exec, SandboxSpec
from sandbox.service import Principal, SandboxService
from sandbox.service.lifecycle import Lifecycle, LifecycleSettings
from sandbox.service.records import SNAPSHOTS, pool_key
from sandbox.service.task_config import TaskSettings
from sandbox.service.task_snapshots import IN_USE_S, TOUCH_EVERY_S
from sandbox.store import EmbeddedStore
from sandbox.tasks.model import Task
from tests.polling import eventually
from tests.unit.snapshot_fake import (
    LOGGER,
    SnapshottingFake,
    assert_every_record_has_its_image,
    running,
    task_snapshots,
)

ALICE = Principal("alpha")
SPEC = SandboxSpec(kind="terminal", labels={"t": "task-gc"})
DAY = 24 * 3600.0


def task(n: int) -> Task:
    return Task.from_dict(
        {
            "id": f"task-{n}",
            "instruction": "Nothing to do.",
            "sandbox": {"kind": "terminal"},
            "config": [{"type": "execute", "parameters": {"command": f"echo {n} > setup.txt", "shell": True}}],
            "evaluator": {
                "func": "exact_match",
                "result": {"type": "vm_command_line", "command": "cat setup.txt", "shell": True},
                "expected": {"type": "rule", "rules": {"expected": f"{n}\n"}},
            },
        }
    )


def key_of(t: Task) -> str:
    return f"{ALICE.tenant}/task-{t.digest()[:16]}"


def settings(**changes: Any) -> TaskSettings:
    return TaskSettings(**{"warm_per_task": 0, **changes})


@pytest_asyncio.fixture
async def store() -> AsyncIterator[EmbeddedStore]:
    store = await EmbeddedStore.open(None, logger=LOGGER)
    yield store
    await store.close()


async def _age(service: SandboxService, t: Task, seconds: float) -> None:
    """Make the task's snapshot look taken and last used ``seconds`` ago."""
    found = await service.store.get_versioned(SNAPSHOTS, key_of(t))
    assert found is not None
    then = time.time() - seconds
    await service.store.put(SNAPSHOTS, key_of(t), {**found.doc, "created_at": then, "last_used_at": then})


async def _first_reset(service: SandboxService, t: Task) -> str:
    """A sandbox that set the task up (and so took its snapshot), deleted at once."""
    sb = (await service.create(ALICE, SPEC)).id
    try:
        obs = await service.reset(ALICE, sb, task=t)
        assert obs.info["setup_ran"] is True and key_of(t) in await task_snapshots(service.store)
    finally:
        await service.delete(ALICE, sb)
    return key_of(t)


async def test_an_unused_snapshot_goes_with_its_warm_instances_and_image_but_not_while_a_sandbox_runs_it(
    fake: SnapshottingFake, store: EmbeddedStore
) -> None:
    async with running(fake, store, replica="one", tasks=settings(warm_per_task=1)) as service:
        t = task(1)
        key = await _first_reset(service, t)
        snap = (await task_snapshots(store))[key]
        queue = pool_key(snap.warm_spec(), snap.image)  # type: ignore[arg-type]
        await service.pools.refill()
        await eventually(lambda: _queued(service, queue), 30, "the warm replica of the task's snapshot")
        warm = (await store.items(queue))[0]

        user = (await service.create(ALICE, SPEC)).id
        try:
            obs = await service.reset(ALICE, user, task=t)
            assert obs.info["snapshot"] == snap.name and obs.info["setup_ran"] is False
            later = time.time() + DAY + IN_USE_S + 1
            assert await service.collect_task_snapshots(now=later) == [], "a sandbox's spec names it"
            assert key in await task_snapshots(store)
        finally:
            await service.delete(ALICE, user)
        await service.instances.drain()
        await service.pools.refill()
        await eventually(lambda: _queued(service, queue), 30, "the warm replica again")
        warm = (await store.items(queue))[0]

        used = (await task_snapshots(store))[key].last_used()  # the ttl runs from here, however long the test took
        assert await service.collect_task_snapshots(now=used + DAY - 1) == [], "used within the ttl"
        assert await service.collect_task_snapshots(now=used + DAY + IN_USE_S + 1) == [snap.name]
        assert key not in await task_snapshots(store)
        kept_pools = service.pools.keys()
        assert await store.items(queue) == [] and queue not in kept_pools
        assert warm not in {i.id for i in await fake.list_instances()}, "its warm instance is removed"
        assert snap.image not in fake.images, "its image is removed"

        # The next reset to the task sets it up and snapshots it again.
        await _first_reset(service, t)
        await assert_every_record_has_its_image(store, fake)


async def _queued(service: SandboxService, queue: str) -> bool:
    return len(await service.store.items(queue)) >= 1


async def test_the_least_recently_used_beyond_the_bound_go(fake: SnapshottingFake, store: EmbeddedStore) -> None:
    async with running(fake, store, replica="one", tasks=settings(max_task_snapshots=2)) as service:
        tasks = [task(n) for n in range(4)]
        for t in tasks:
            await _first_reset(service, t)
        # Last used: task 2 longest ago, then 0, then 3; task 1 just now (so not collectable, however old the rest).
        for t, ago in ((tasks[2], 3 * IN_USE_S), (tasks[0], 2 * IN_USE_S), (tasks[3], IN_USE_S + 1)):
            await _age(service, t, ago)
        removed = await service.collect_task_snapshots()
        assert sorted(removed) == sorted(key_of(t).split("/")[1] for t in (tasks[2], tasks[0]))
        assert set(await task_snapshots(store)) == {key_of(tasks[1]), key_of(tasks[3])}
        assert await service.collect_task_snapshots() == []  # within the bound now
        await assert_every_record_has_its_image(store, fake)
        assert len(fake.images) == 2

        # One used lately is kept even beyond the bound: a reset may be swapping it in.
        many = TaskSettings(warm_per_task=0, max_task_snapshots=1)
        service.task_snapshots.settings = many
        assert await service.collect_task_snapshots() == [key_of(tasks[3]).split("/")[1]]
        assert set(await task_snapshots(store)) == {key_of(tasks[1])}


async def test_a_reset_marking_it_used_between_the_read_and_the_delete_keeps_it(
    fake: SnapshottingFake, store: EmbeddedStore
) -> None:
    async with running(fake, store, replica="one", tasks=settings()) as service:
        t = task(1)
        key = await _first_reset(service, t)
        await _age(service, t, DAY + IN_USE_S)
        delete_if_version = store.delete_if_version

        async def a_reset_meanwhile(collection: str, k: str, *, version: int) -> bool:
            # marks it used: a new version
            assert await service.task_snapshots.mark_used(ALICE.tenant, key.split("/")[1])
            return await delete_if_version(collection, k, version=version)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(store, "delete_if_version", a_reset_meanwhile)
            assert await service.collect_task_snapshots() == []
        assert key in await task_snapshots(store)
        await assert_every_record_has_its_image(store, fake)
        assert await service.collect_task_snapshots() == [], "used just now"


async def test_every_reset_that_swaps_it_in_marks_it_used(fake: SnapshottingFake, store: EmbeddedStore) -> None:
    async with running(fake, store, replica="one", tasks=settings()) as service:
        t = task(1)
        key = await _first_reset(service, t)
        await _age(service, t, TOUCH_EVERY_S + 1)
        before = (await task_snapshots(store))[key].last_used()
        sb = (await service.create(ALICE, SPEC)).id
        try:
            obs = await service.reset(ALICE, sb, task=t)
            assert obs.info["snapshot"] is not None
            used = (await task_snapshots(store))[key].last_used()
            assert used > before and time.time() - used < TOUCH_EVERY_S
            version = (await store.get_versioned(SNAPSHOTS, key)).version  # type: ignore[union-attr]
            await service.reset(ALICE, sb, task=t)  # marked a moment ago: no write
            assert (await store.get_versioned(SNAPSHOTS, key)).version == version  # type: ignore[union-attr]
            assert (await service.exec(ALICE, sb, Exec(cmd="cat setup.txt"))).stdout == "1\n"
        finally:
            await service.delete(ALICE, sb)


async def test_the_leaders_reconciliation_collects_them(fake: SnapshottingFake, store: EmbeddedStore) -> None:
    async with running(fake, store, replica="one", tasks=settings(task_snapshot_ttl_s=3600)) as service:
        t = task(1)
        key = await _first_reset(service, t)
        image = (await task_snapshots(store))[key].image
        lifecycle = Lifecycle(service, LifecycleSettings(orphan_grace_s=0), logger=LOGGER)
        await lifecycle.reconcile()
        assert key in await task_snapshots(store), "used a moment ago"
        await _age(service, t, 3600 + IN_USE_S)
        await lifecycle.reconcile()
        assert key not in await task_snapshots(store) and image not in fake.images
