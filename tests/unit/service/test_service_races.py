"""Races in the core, each forced into its bad interleaving with events (never sleeps), on the fake backend:
stale writes after an agent call, a claim against a removal, a stop during a warm-pool start, a wiped store."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from sandbox.backends.agent_client import AgentClient
from sandbox.errors import FailedPrecondition, Unavailable
from sandbox.models import Exec, SandboxSpec, SandboxState
from sandbox.service import SandboxService
from sandbox.service.auth import Principal
from sandbox.service.lifecycle import Lifecycle, LifecycleSettings
from sandbox.service.records import (
    INSTANCES,
    SANDBOXES,
    InstanceRecord,
    InstanceState,
    SandboxRecord,
    pool_key,
    replica_lock,
)
from sandbox.store import EmbeddedStore
from sandbox.testing.fake_backend import FakeBackend, FakeConfig
from tests.polling import eventually

ALICE = Principal("alpha")
LOGGER = logging.getLogger("sandbox.test.races")
SPEC = SandboxSpec(kind="terminal", labels={"t": "races"})


async def _record(service: SandboxService, sandbox_id: str) -> SandboxRecord:
    doc = await service.store.get(SANDBOXES, sandbox_id)
    assert doc is not None
    return SandboxRecord.model_validate(doc)


def _pause_agent_call(service: SandboxService, instance: str, method: str) -> tuple[asyncio.Event, asyncio.Event]:
    """Make ``method`` of the instance's agent wait until released, then fail as a dead agent would."""
    entered, release = asyncio.Event(), asyncio.Event()
    agent = service.backend.agent(instance)

    async def paused(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        await release.wait()
        raise Unavailable("lost the connection to the agent (forced by the test)")

    setattr(agent, method, paused)
    return entered, release


def _failures_reported(service: SandboxService, sandbox_id: str) -> list[dict[str, Any]]:
    return [e for e in service.events if e["event"] == "sandbox_failed" and e["sandbox_id"] == sandbox_id]


async def _in_flight(call: Awaitable[Any]) -> asyncio.Task[Any]:
    return asyncio.ensure_future(call)


async def test_a_step_failing_during_a_reset_does_not_undo_the_reset(service: SandboxService) -> None:
    info = await service.create(ALICE, SPEC)
    try:
        before = (await _record(service, info.id)).instance
        entered, release = _pause_agent_call(service, before, "exec")
        step = await _in_flight(service.step(ALICE, info.id, Exec(cmd="true")))
        await entered.wait()  # the step read the record and called the agent of the old instance
        await service.reset(ALICE, info.id)
        await service.backend.destroy(before)  # the old instance is gone, as after the reset's clean-up
        release.set()
        with pytest.raises((Unavailable, FailedPrecondition)):
            await step
        after = await _record(service, info.id)
        assert after.instance != before and after.state is SandboxState.RUNNING, after
        assert not _failures_reported(service, info.id), "the old instance's failure was reported as the sandbox's"
        assert (await service.exec(ALICE, info.id, Exec(cmd="echo alive"))).stdout == "alive\n"
    finally:
        await service.delete(ALICE, info.id)


async def test_a_step_failing_during_a_delete_does_not_bring_the_sandbox_back(service: SandboxService) -> None:
    info = await service.create(ALICE, SPEC)
    instance = (await _record(service, info.id)).instance
    entered, release = _pause_agent_call(service, instance, "exec")
    step = await _in_flight(service.step(ALICE, info.id, Exec(cmd="true")))
    await entered.wait()
    await service.delete(ALICE, info.id)
    await service.instances.drain()  # the instance is removed, as the step's failure path will find
    release.set()
    with pytest.raises((Unavailable, FailedPrecondition)):
        await step
    assert await service.store.get(SANDBOXES, info.id) is None, "a deleted sandbox came back"
    assert not _failures_reported(service, info.id), "a deleted sandbox was reported failed"


async def test_a_health_report_read_before_a_reset_does_not_mark_the_new_instance(service: SandboxService) -> None:
    info = await service.create(ALICE, SPEC)
    try:
        stale = await _record(service, info.id)  # as health() or a health round holds it across its probe
        await service.reset(ALICE, info.id)
        await service.mark_failed(stale, "agent: does not answer", cause="probe_failed")
        after = await _record(service, info.id)
        assert after.state is SandboxState.RUNNING and after.instance != stale.instance, after
        assert not _failures_reported(service, info.id), "a report on the instance before the reset was counted"
        await service.mark_failed(after, "agent: does not answer", cause="probe_failed")
        assert len(_failures_reported(service, info.id)) == 1, "a failure of the current instance is reported"
    finally:
        await service.delete(ALICE, info.id)


async def test_one_failure_seen_by_many_calls_recovers_once(service: SandboxService) -> None:
    info = await service.create(ALICE, SPEC.model_copy(update={"auto_recover": True}))
    try:
        failed = await _record(service, info.id)
        await service.backend.destroy(failed.instance)
        # Several calls in flight all saw the same dead instance; each reports it.
        await asyncio.gather(
            *(service.mark_failed(failed, "its container is gone", cause="container_gone") for _ in range(4))
        )
        after = await _record(service, info.id)
        assert after.replacements == 1, f"replaced {after.replacements} times for one failure"
        assert after.state is SandboxState.RUNNING and after.instance != failed.instance
    finally:
        await service.delete(ALICE, info.id)


async def _warm_one(service: SandboxService) -> str:
    key = service.pools.add(SPEC, service.backend.image_for(SPEC), min=1, max=1)
    await service.pools.refill()
    await eventually(lambda: service.store.items(key), 30, "the pool filling")
    service.pools.remove(key)
    return (await service.store.items(key))[0]


async def test_a_claim_that_wins_makes_a_stale_removal_fail(service: SandboxService) -> None:
    instance = await _warm_one(service)
    seen_by_reconcile = await service.instances.read(instance)  # an orphan candidate, read before the claim
    assert seen_by_reconcile is not None and seen_by_reconcile.state is InstanceState.WARM
    claimed = await service.instances.claim_warm(
        pool_key(SPEC, service.backend.image_for(SPEC)), "sb-test-1", tenant="default", spec=SPEC
    )
    assert claimed == instance
    assert not await service.instances.retire(instance, expected=seen_by_reconcile), "removed a claimed instance"
    await service.backend.agent(instance).ping()  # still there, still answering
    await service.instances.retire(instance)


async def test_a_removal_that_wins_makes_the_claim_take_nothing(service: SandboxService) -> None:
    instance = await _warm_one(service)
    key = pool_key(SPEC, service.backend.image_for(SPEC))
    seen = await service.instances.read(instance)
    assert seen is not None
    assert await service.instances.retire(instance, expected=seen)
    assert await service.store.items(key) == [instance], "the queue still names it, as after a real race"
    assert await service.instances.claim_warm(key, "sb-test-2", tenant="default", spec=SPEC) is None, (
        "handed out an instance being removed"
    )
    assert await service.store.get(INSTANCES, instance) is None


async def test_a_claim_asks_the_agent_not_the_engine(service: SandboxService) -> None:
    instance = await _warm_one(service)
    key = pool_key(SPEC, service.backend.image_for(SPEC))
    backend = service.backend
    assert isinstance(backend, FakeBackend)

    async def no_engine(instance_id: str) -> Any:
        raise AssertionError("a claim made an engine round trip")

    backend.inspect = no_engine  # type: ignore[method-assign]
    try:
        assert await service.instances.claim_warm(key, "sb-test-4", tenant="default", spec=SPEC) == instance
    finally:
        del backend.inspect  # the class's own again
    record = await service.instances.read(instance)
    assert record is not None and record.state is InstanceState.SERVING and record.sandbox == "sb-test-4"
    await service.instances.retire(instance)


async def test_a_warm_instance_whose_agent_died_is_never_handed_out(service: SandboxService) -> None:
    backend = service.backend
    assert isinstance(backend, FakeBackend)
    instance = await _warm_one(service)
    key = pool_key(SPEC, service.backend.image_for(SPEC))
    process = backend._procs[instance].process
    process.kill()  # dies while it waits in the queue: no health round watches warm instances
    await process.wait()
    assert await service.instances.claim_warm(key, "sb-test-5", tenant="default", spec=SPEC) is None, (
        "handed out a dead instance"
    )
    await service.instances.drain()  # dropped: removed from the engine and the store
    assert await service.store.get(INSTANCES, instance) is None
    assert (await backend.inspect(instance)).state.value == "missing"


def _counted_pings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The addresses of the agents pinged from now on, in order (the pings still go out)."""
    pings: list[str] = []
    real_ping = AgentClient.ping

    async def counted(agent: AgentClient, *, deadline: float = 2.0) -> dict[str, Any]:
        pings.append(agent.address)
        return await real_ping(agent, deadline=deadline)

    monkeypatch.setattr(AgentClient, "ping", counted)
    return pings


async def test_a_claim_of_an_agent_that_answered_lately_sends_no_ping(
    service: SandboxService, monkeypatch: pytest.MonkeyPatch
) -> None:
    instance = await _warm_one(service)  # its agent answered when it started, on a connection it holds open
    key = pool_key(SPEC, service.backend.image_for(SPEC))
    pings = _counted_pings(monkeypatch)
    assert await service.instances.claim_warm(key, "sb-test-6", tenant="default", spec=SPEC) == instance
    assert pings == [], "pinged an agent that had just answered"
    await service.instances.retire(instance)


async def test_a_claim_pings_an_agent_whose_answer_is_old(
    service: SandboxService, monkeypatch: pytest.MonkeyPatch
) -> None:
    instance = await _warm_one(service)
    key = pool_key(SPEC, service.backend.image_for(SPEC))
    monkeypatch.setattr("sandbox.service.instances.CLAIM_FRESH_S", 0.0)  # every answer is old
    pings = _counted_pings(monkeypatch)
    assert await service.instances.claim_warm(key, "sb-test-7", tenant="default", spec=SPEC) == instance
    assert pings == [service.backend.agent(instance).address]
    await service.instances.retire(instance)


async def test_the_pools_ping_queued_agents_whose_answer_got_old_and_remove_the_dead(
    service: SandboxService, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = service.backend
    assert isinstance(backend, FakeBackend)
    key = service.pools.add(SPEC, backend.image_for(SPEC), min=2, max=2)
    await service.pools.refill()
    await eventually(lambda: _holds(service, key, 2), 30, "the pool filling")
    alive, dead = await service.store.items(key)
    process = backend._procs[dead].process
    process.kill()
    await process.wait()
    monkeypatch.setattr("sandbox.service.pools.FRESHEN_AFTER_S", 0.0)  # every answer is old: ping them all
    service.pools.add(SPEC, backend.image_for(SPEC), min=0, max=2)  # starts nothing more: the pings are tested
    before = time.monotonic()
    await service.pools.refill()

    async def only_the_live_one_left() -> bool:
        return await service.store.items(key) == [alive] and await service.store.get(INSTANCES, dead) is None

    await eventually(only_the_live_one_left, 30, "the dead one removed")
    assert service.backend.agent(alive).answered_lately(time.monotonic() - before), "the live one was not pinged"
    service.pools.remove(key)
    await service.store.remove(key, alive)
    await service.instances.retire(alive)


async def _holds(service: SandboxService, key: str, count: int) -> bool:
    return len(await service.store.items(key)) == count


async def test_a_claims_store_writes_reach_the_file_with_the_sandbox_record(tmp_path: Any, socket_root: str) -> None:
    """The pop and the move to SERVING are not flushed on their own; the create's durable record write carries
    them, so a create that returned is on disk whole (queue, instance, sandbox)."""
    path = tmp_path / "state.json"
    store = await EmbeddedStore.open(str(path), flush_interval=3600, logger=LOGGER)
    backend = FakeBackend(FakeConfig(socket_root=socket_root))
    service = SandboxService(backend, store, logger=LOGGER)
    try:
        key = service.pools.add(SPEC, backend.image_for(SPEC), min=1, max=1)
        await service.pools.refill()
        await eventually(lambda: store.items(key), 30, "the pool filling")
        service.pools.remove(key)
        instance = (await store.items(key))[0]
        info = await service.create(ALICE, SPEC)
        on_disk = json.loads(path.read_bytes())
        assert on_disk["queues"].get(key, []) == [], "the pop is not on disk"
        assert on_disk["documents"]["instances"][instance]["state"] == InstanceState.SERVING.value
        assert on_disk["documents"]["instances"][instance]["sandbox"] == info.id
        assert on_disk["documents"]["sandboxes"][info.id]["instance"] == instance
        await service.delete(ALICE, info.id)
    finally:
        await service.close()
        await backend.close()
        await store.close()


async def test_reconciliation_leaves_a_claim_in_progress_alone(service: SandboxService) -> None:
    instance = await _warm_one(service)
    key = pool_key(SPEC, service.backend.image_for(SPEC))
    # Claimed (popped and moved to SERVING) but the sandbox's record is not written yet.
    assert await service.instances.claim_warm(key, "sb-test-3", tenant="default", spec=SPEC) == instance
    settings = LifecycleSettings(orphan_grace_s=60)
    lifecycle = Lifecycle(service, settings, logger=LOGGER)
    try:
        await lifecycle.tick()  # adopts nothing, marks the epoch
        for _ in range(3):
            await lifecycle.reconcile()
        assert (await service.backend.inspect(instance)).state.value == "running"
    finally:
        await lifecycle.stop()  # and the health round the tick started
        await service.instances.retire(instance)


async def test_a_stop_during_a_warm_start_leaves_no_instance(service: SandboxService) -> None:
    backend = service.backend
    assert isinstance(backend, FakeBackend)
    started, release = asyncio.Event(), asyncio.Event()
    create: Callable[..., Awaitable[Any]] = backend.create

    async def slow_create(*args: Any, **kwargs: Any) -> Any:
        made = await create(*args, **kwargs)
        started.set()
        await release.wait()  # the instance exists; its start has not returned yet
        return made

    store = await EmbeddedStore.open(None, logger=LOGGER)
    fresh = SandboxService(backend, store, logger=LOGGER)
    backend.create = slow_create  # type: ignore[method-assign]
    try:
        fresh.pools.add(SPEC, backend.image_for(SPEC), min=1, max=1)
        before = {i.id for i in await backend.list_instances()}
        await fresh.pools.refill()
        await started.wait()
        await fresh.pools.close()  # the server stops now
        await fresh.instances.drain()
        await fresh.pools.refill()  # a closed pool set starts nothing
        assert {i.id for i in await backend.list_instances()} == before, "an instance outlived the stop"
        assert await store.all(INSTANCES) == {}
    finally:
        backend.create = create  # type: ignore[method-assign]
        release.set()
        await store.close()


async def test_a_wiped_store_adopts_held_sandboxes_instead_of_reaping_them(service: SandboxService) -> None:
    info = await service.create(ALICE, SPEC.model_copy(update={"ttl_s": 3600}))
    await service.exec(ALICE, info.id, Exec(cmd="echo yes > kept"))
    instance = (await _record(service, info.id)).instance
    await service.start()
    # The store restarts empty (a Redis without persistence): a new, empty store, the same engine.
    wiped = await EmbeddedStore.open(None, logger=LOGGER)
    replica = SandboxService(service.backend, wiped, logger=LOGGER)
    replica.epoch = service.epoch  # it had seen the old store
    try:
        with pytest.raises(Unavailable, match="lost its records"):
            await replica.get(ALICE, info.id)
        lifecycle = Lifecycle(replica, LifecycleSettings(orphan_grace_s=0), logger=LOGGER)
        try:
            await lifecycle.tick()
            for _ in range(3):
                await lifecycle.reconcile()
        finally:
            await lifecycle.stop()  # and the health round the tick started
        adopted = await replica.get(ALICE, info.id)
        assert adopted.state is SandboxState.RUNNING and adopted.tenant == ALICE.tenant
        assert abs(adopted.expires_at - info.expires_at) < 1
        assert (await replica.exec(ALICE, info.id, Exec(cmd="cat kept"))).stdout == "yes\n"
        assert (await service.backend.inspect(instance)).state.value == "running"
    finally:
        await replica.delete(ALICE, info.id)
        await replica.instances.drain()
        await service.store.delete(SANDBOXES, info.id)
        await wiped.close()


@pytest.mark.parametrize("starter_alive", [True, False])
async def test_a_slow_start_is_reaped_only_when_its_replica_is_dead(
    service: SandboxService, starter_alive: bool
) -> None:
    instance = f"in-term-slow{int(starter_alive)}"
    await service.backend.create(instance, SPEC)
    long_ago = time.time() - 120  # far past the orphan grace: the engine is slow, or the starter died
    record = InstanceRecord(id=instance, created_at=long_ago, since=long_ago, owner="replica-elsewhere")
    await service.store.put(INSTANCES, instance, record.model_dump(mode="json"))
    if starter_alive:
        assert await service.store.try_lock(replica_lock("replica-elsewhere"), "replica-elsewhere", 60)
    lifecycle = Lifecycle(service, LifecycleSettings(orphan_grace_s=10), logger=LOGGER)
    try:
        await lifecycle.tick()
        await lifecycle.reconcile()
        await lifecycle.reconcile()  # two passes make an orphan
        running = (await service.backend.inspect(instance)).state.value == "running"
        assert running is starter_alive, f"alive={starter_alive}: the slow start was {'kept' if running else 'reaped'}"
    finally:
        await lifecycle.stop()  # and the health round the tick started
        await service.store.unlock(replica_lock("replica-elsewhere"), "replica-elsewhere")
        await service.instances.retire(instance)


async def test_the_last_replica_to_stop_removes_warm_instances_but_not_held_ones(service: SandboxService) -> None:
    backend = service.backend
    assert isinstance(backend, FakeBackend)
    store = await EmbeddedStore.open(None, logger=LOGGER)
    planes = [SandboxService(backend, store, logger=LOGGER) for _ in range(2)]
    loops = [Lifecycle(plane, LifecycleSettings(), logger=LOGGER) for plane in planes]
    first, second = planes
    try:
        before = {i.id for i in await backend.list_instances()}
        for plane in planes:
            plane.pools.add(SPEC, backend.image_for(SPEC), min=2, max=2)
        held = await second.create(ALICE, SPEC)  # takes one warm instance; the leader refills
        for loop in loops:
            await loop.tick()
        key = pool_key(SPEC, backend.image_for(SPEC))
        await eventually(lambda: _queued(store, key, 2), 30, "two warm instances queued")
        await first.pools.close()  # wait for refills under way, so the queue is all there is
        await second.pools.close()
        held_instance = (await _record(second, held.id)).instance

        await loops[0].leave()  # the other replica lives: the warm instances are its to hand out
        assert len(await store.items(key)) == 2
        await loops[1].leave()  # the last one leaves: nobody would hand them out
        assert await store.items(key) == []
        left = {i.id for i in await backend.list_instances()} - before
        assert left == {held_instance}, "only the held sandbox's instance may outlive the last stop"
        assert (await second.exec(ALICE, held.id, Exec(cmd="echo held"))).stdout == "held\n"
    finally:
        await second.delete(ALICE, held.id)
        for plane in planes:
            await plane.instances.drain()
        await store.close()


async def _queued(store: EmbeddedStore, key: str, count: int) -> bool:
    return len(await store.items(key)) == count


async def test_a_long_tick_does_not_let_the_replicas_liveness_lapse(service: SandboxService) -> None:
    """Other replicas judge this one's starts in progress by its liveness lock: a tick that lasts longer than the
    lock (lease expiry of many sandboxes, a slow store) must not let it lapse."""
    store = await EmbeddedStore.open(None, logger=LOGGER)
    plane = SandboxService(service.backend, store, logger=LOGGER)
    lifecycle = Lifecycle(plane, LifecycleSettings(leader_ttl_s=0.2, tick_s=0.05), logger=LOGGER)
    entered, release = asyncio.Event(), asyncio.Event()

    async def slow_expiry() -> None:
        entered.set()
        await release.wait()

    lifecycle.expire_leases = slow_expiry  # type: ignore[method-assign]
    loop = asyncio.create_task(lifecycle.run())
    try:
        await asyncio.wait_for(entered.wait(), 10)
        for _ in range(10):  # 2 s stuck in one tick: over three times the lock's 0.6 s
            assert await store.holder(replica_lock(plane.replica)) == plane.replica, "the liveness lock lapsed"
            await asyncio.sleep(0.2)
    finally:
        release.set()
        loop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loop
        await lifecycle.stop()
        await store.close()
