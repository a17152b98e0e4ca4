"""The first reset rule, on the fake backend able to snapshot, with two replicas sharing one store (the embedded
store, and Redis): resets to a task that begin together take its snapshot once. The one holding the lock takes
it; the others run the setup without waiting for it and snapshot nothing; a reset that gets the lock after the
snapshot was taken swaps it in; a lock left by a crashed replica lapses; a lock lost during the setup takes
nothing. Every interleaving is forced with events or a fake lock clock, never sleeps."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from sandbox.models import Exec, SandboxSpec
from sandbox.service import Principal, SandboxService
from sandbox.service.task_snapshots import SNAPSHOT_LOCK_TTL_S, snapshot_lock
from sandbox.store import EmbeddedStore, Store
from sandbox.store.redis import RedisStore
from sandbox.tasks.model import Task
from tests.redis_server import RedisServer, redis_server  # noqa: F401  (the session fixture)
from tests.unit.snapshot_fake import (
    LOGGER,
    SnapshottingFake,
    assert_every_record_has_its_image,
    running,
    task_snapshots,
)

ALICE = Principal("alpha")
SPEC = SandboxSpec(kind="terminal", labels={"t": "first-reset"})
SETUP_CMD = "echo ready > setup.txt && echo run >> runs.txt"
TASK = Task.from_dict(
    {
        "id": "write-hello",
        "instruction": "Write 'hello' into hello.txt.",
        "sandbox": {"kind": "terminal"},
        "config": [{"type": "execute", "parameters": {"command": SETUP_CMD, "shell": True}}],
        "evaluator": {
            "func": "exact_match",
            "result": {"type": "vm_command_line", "command": "cat setup.txt hello.txt", "shell": True},
            "expected": {"type": "rule", "rules": {"expected": "ready\nhello\n"}},
        },
    }
)
NAME = f"task-{TASK.digest()[:16]}"
LOCK = snapshot_lock(ALICE.tenant, NAME)


class Clock:
    """The embedded store's lock clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest_asyncio.fixture
async def clock() -> Clock:
    return Clock()


@pytest_asyncio.fixture(params=["embedded", "redis"])
async def stores(request: pytest.FixtureRequest, clock: Clock) -> AsyncIterator[tuple[Store, Store]]:
    """The stores of two replicas: one embedded store both use (its lock clock the test's), or two connections to
    one Redis."""
    if request.param == "embedded":
        store = await EmbeddedStore.open(None, logger=LOGGER, clock=clock)
        yield store, store
        await store.close()
        return
    server: RedisServer = request.getfixturevalue("redis_server")
    namespace = f"first-reset-{os.urandom(4).hex()}"
    one = await RedisStore.open(server.url, namespace=namespace, logger=LOGGER)
    two = await RedisStore.open(server.url, namespace=namespace, logger=LOGGER)
    yield one, two
    await one.close()
    await two.close()


@pytest_asyncio.fixture
async def replicas(
    fake: SnapshottingFake, stores: tuple[Store, Store]
) -> AsyncIterator[tuple[SandboxService, SandboxService]]:
    async with running(fake, stores[0], replica="one") as one, running(fake, stores[1], replica="two") as two:
        yield one, two


async def _solve_and_score(service: SandboxService, sandbox_id: str) -> float:
    await service.step(ALICE, sandbox_id, Exec(cmd="echo hello > hello.txt"))
    return await service.evaluate(ALICE, sandbox_id)


async def _runs(service: SandboxService, sandbox_id: str) -> str:
    return (await service.exec(ALICE, sandbox_id, Exec(cmd="cat runs.txt"))).stdout


async def test_resets_beginning_together_take_one_snapshot_and_none_waits_for_it(
    replicas: tuple[SandboxService, SandboxService], fake: SnapshottingFake
) -> None:
    one, two = replicas
    placed = [one, two, one]
    sandboxes = [(await svc.create(ALICE, SPEC)).id for svc in placed]
    try:
        fake.hold_commits = asyncio.Event()
        pairs = list(zip(placed, sandboxes, strict=True))
        resets = [asyncio.ensure_future(svc.reset(ALICE, sb, task=TASK)) for svc, sb in pairs]
        await asyncio.wait_for(fake.committing.wait(), 60)  # the lock holder set up, and commits (held)
        # The two others end while the commit is held: they neither wait for it nor take one.
        finished: set[asyncio.Future[Any]] = set()
        while len(finished) < 2:
            done, _ = await asyncio.wait(
                [r for r in resets if r not in finished], timeout=60, return_when=asyncio.FIRST_COMPLETED
            )
            assert done, "a reset waited for the lock holder's snapshot"
            finished |= done
        assert fake.commits == [] and await task_snapshots(one.store) == {}
        fake.hold_commits.set()
        observations = await asyncio.gather(*resets)

        assert [obs.info["setup_ran"] for obs in observations] == [True] * 3
        assert [obs.info["snapshot"] for obs in observations] == [None] * 3
        assert len(fake.commits) == 1 and one.task_snapshots_taken + two.task_snapshots_taken == 1
        assert one.setups_run + two.setups_run == 3
        snaps = await task_snapshots(one.store)
        assert list(snaps) == [f"{ALICE.tenant}/{NAME}"] and snaps[f"{ALICE.tenant}/{NAME}"].image == fake.commits[0]
        await assert_every_record_has_its_image(one.store, fake)
        assert await one.store.holder(LOCK) is None, "the lock outlived its reset"
        scores = [await _solve_and_score(svc, sb) for svc, sb in pairs]
        assert scores == [1.0, 1.0, 1.0]

        # The next reset to the task, on either replica, swaps the snapshot in: no setup runs, no snapshot is taken.
        fourth = (await two.create(ALICE, SPEC)).id
        sandboxes.append(fourth)
        setups = one.setups_run + two.setups_run
        obs = await two.reset(ALICE, fourth, task=TASK)
        assert (obs.info["snapshot"], obs.info["setup_steps"]) == (NAME, 0)
        assert one.setups_run + two.setups_run == setups and len(fake.commits) == 1
        assert await _runs(two, fourth) == "run\n", "the snapshot's state, its setup not run again"
        assert await _solve_and_score(two, fourth) == 1.0
    finally:
        for sb in sandboxes:
            await one.delete(ALICE, sb)


async def test_a_reset_that_gets_the_lock_after_the_snapshot_was_taken_swaps_it_in(
    replicas: tuple[SandboxService, SandboxService], fake: SnapshottingFake
) -> None:
    one, two = replicas
    late, early = (await one.create(ALICE, SPEC)).id, (await two.create(ALICE, SPEC)).id
    lock = one.task_snapshots.lock

    async def after_another_took_it(*args: Any, **kwargs: Any) -> Any:
        # ``late`` found no snapshot; before it asks for the lock, ``early`` sets up, snapshots and releases.
        first = await two.reset(ALICE, early, task=TASK)
        assert first.info["setup_ran"] is True and len(fake.commits) == 1
        return await lock(*args, **kwargs)

    one.task_snapshots.lock = after_another_took_it  # type: ignore[method-assign]
    try:
        obs = await one.reset(ALICE, late, task=TASK)
        assert (obs.info["snapshot"], obs.info["setup_ran"]) == (NAME, False)
        assert len(fake.commits) == 1 and one.setups_run == 0
        assert await one.store.holder(LOCK) is None
        assert await _solve_and_score(one, late) == 1.0
    finally:
        await one.delete(ALICE, late)
        await one.delete(ALICE, early)


async def test_a_lock_left_by_a_crashed_replica_lapses(fake: SnapshottingFake, clock: Clock) -> None:
    store = await EmbeddedStore.open(None, logger=LOGGER, clock=clock)
    try:
        async with running(fake, store, replica="one") as service:
            assert await store.try_lock(LOCK, "crashed:0000", SNAPSHOT_LOCK_TTL_S)  # its replica died while setting up
            a, b = (await service.create(ALICE, SPEC)).id, (await service.create(ALICE, SPEC)).id
            try:
                obs = await service.reset(ALICE, a, task=TASK)
                assert obs.info["setup_ran"] is True and fake.commits == []  # set up, nothing taken, no wait
                clock.now += SNAPSHOT_LOCK_TTL_S + 1
                obs = await service.reset(ALICE, b, task=TASK)
                assert obs.info["setup_ran"] is True and len(fake.commits) == 1
                assert list(await task_snapshots(store)) == [f"{ALICE.tenant}/{NAME}"]
                assert await store.holder(LOCK) is None
            finally:
                await service.delete(ALICE, a)
                await service.delete(ALICE, b)
    finally:
        await store.close()


async def test_a_lock_lost_during_the_setup_takes_nothing(fake: SnapshottingFake, clock: Clock) -> None:
    store = await EmbeddedStore.open(None, logger=LOGGER, clock=clock)
    try:
        async with running(fake, store, replica="one") as service:
            run_steps = service.episodes._run_steps

            async def slow_setup(*args: Any, **kwargs: Any) -> None:
                await run_steps(*args, **kwargs)
                clock.now += SNAPSHOT_LOCK_TTL_S + 1  # the lease lapsed (a stalled replica) ...
                assert await store.try_lock(LOCK, "another:0000", SNAPSHOT_LOCK_TTL_S)  # ... and another reset took it

            service.episodes._run_steps = slow_setup  # type: ignore[method-assign]
            sb = (await service.create(ALICE, SPEC)).id
            try:
                obs = await service.reset(ALICE, sb, task=TASK)
                assert obs.info["setup_ran"] is True and fake.commits == []
                assert await task_snapshots(store) == {} and await store.holder(LOCK) == "another:0000"
                assert await _solve_and_score(service, sb) == 1.0
            finally:
                await service.delete(ALICE, sb)
    finally:
        await store.close()
