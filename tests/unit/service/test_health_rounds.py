"""Races between background work (health rounds, activity updates) and the calls around them, on the fake backend."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from types import SimpleNamespace
from typing import cast

import pytest

from sandbox.backends.base import Backend, BackendInstance, RuntimeState
from sandbox.models import Exec, Health, HealthCheck, SandboxSpec, SandboxState
from sandbox.service import SandboxService
from sandbox.service import lifecycle as lifecycle_module
from sandbox.service.auth import Principal
from sandbox.service.lifecycle import Lifecycle, LifecycleSettings
from sandbox.service.records import SANDBOXES, SandboxRecord
from tests.polling import eventually
from tests.unit.conftest import LOGGER

ALICE = Principal("alpha")


async def test_a_sandbox_created_during_a_round_is_not_taken_for_dead(
    service: SandboxService, monkeypatch: pytest.MonkeyPatch
) -> None:
    created: list[str] = []
    listing = service.backend.list_instances

    async def create_while_listing() -> list[BackendInstance]:
        snapshot = await listing()  # the engine's view, taken before the create below finishes
        created.append((await service.create(ALICE, SandboxSpec(kind="terminal", labels={"t": "race"}))).id)
        return snapshot

    monkeypatch.setattr(service.backend, "list_instances", create_while_listing)
    await Lifecycle(service, LifecycleSettings(), logger=LOGGER).check_health()
    monkeypatch.undo()
    try:
        info = await service.get(ALICE, created[0])
        assert info.state is SandboxState.RUNNING, f"a new sandbox was marked {info.state}: {info.error}"
    finally:
        await service.delete(ALICE, created[0])


async def test_an_activity_update_does_not_undo_a_reset(service: SandboxService) -> None:
    info = await service.create(ALICE, SandboxSpec(kind="terminal", labels={"t": "touch"}))
    try:
        doc = await service.store.get(SANDBOXES, info.id)
        assert doc is not None
        read_before_the_reset = SandboxRecord.model_validate(doc)  # as a step in flight holds it
        await service.reset(ALICE, info.id)
        service.activity.touched.clear()  # the step's activity update is due
        await service.acting.touch(read_before_the_reset)
        after = await service.store.get(SANDBOXES, info.id)
        assert after is not None and after["instance"] != read_before_the_reset.instance, "the reset was undone"
        result = await service.exec(ALICE, info.id, Exec(cmd="echo alive"))
        assert result.stdout == "alive\n"
    finally:
        await service.delete(ALICE, info.id)


async def test_a_spread_round_starts_its_probes_evenly_over_the_spread(
    service: SandboxService, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = [await service.create(ALICE, SandboxSpec(kind="terminal", labels={"t": "spread"})) for _ in range(6)]
    instances = {(await _record(service, info.id)).instance for info in made}
    loop = asyncio.get_running_loop()
    started: dict[str, float] = {}

    async def timed_probe(backend: Backend, instance: str, *, known: BackendInstance | None = None) -> Health:
        started[instance] = loop.time()
        return Health(ok=True, checks={})

    monkeypatch.setattr(lifecycle_module, "probe_agent", timed_probe)
    try:
        before, spread, batch = loop.time(), 0.6, 2
        settings = LifecycleSettings(probe_concurrency=batch)
        await Lifecycle(service, settings, logger=LOGGER).check_health(spread_s=spread)
        ours = sorted(t for instance, t in started.items() if instance in instances)
        assert len(ours) == len(instances), "every running sandbox is probed once per round"
        everyone = sorted(started.values())
        gap = spread / -(-len(everyone) // batch)  # one batch of probes after another, evenly
        for i, at in enumerate(everyone):  # a timer never fires early (1 ms for the clock's resolution)
            due = (i // batch) * gap
            assert at - before >= due - 0.001, f"probe {i} started {at - before:.3f} s in, before {due:.3f} s"
    finally:
        monkeypatch.undo()
        for info in made:
            await service.delete(ALICE, info.id)


async def test_a_sandbox_deleted_during_a_round_is_not_reported_failed(
    service: SandboxService, monkeypatch: pytest.MonkeyPatch
) -> None:
    deleted = await service.create(ALICE, SandboxSpec(kind="terminal", labels={"t": "deleted-mid-round"}))
    failing = await service.create(ALICE, SandboxSpec(kind="terminal", labels={"t": "fails-mid-round"}))
    deleted_instance = (await _record(service, deleted.id)).instance
    failing_instance = (await _record(service, failing.id)).instance
    reported: list[str] = []
    gone: list[str] = []

    async def failed_probe(backend: Backend, instance: str, *, known: BackendInstance | None = None) -> Health:
        if instance == deleted_instance and not gone:  # its sandbox goes while the probe is in flight
            gone.append(deleted.id)
            await service.delete(ALICE, deleted.id)
        if instance not in (deleted_instance, failing_instance):
            return Health(ok=True, checks={})
        return Health(ok=False, checks={"agent": HealthCheck(ok=False, detail="does not answer")})

    async def mark_failed(record: SandboxRecord, why: str, *, cause: str) -> None:
        reported.append(record.id)

    monkeypatch.setattr(lifecycle_module, "probe_agent", failed_probe)
    monkeypatch.setattr(service, "mark_failed", mark_failed)
    try:
        await Lifecycle(service, LifecycleSettings(), logger=LOGGER).check_health(spread_s=0.2)
    finally:
        monkeypatch.undo()
        await service.delete(ALICE, failing.id)
    assert deleted.id not in reported, "a sandbox deleted during the round was reported failed"
    assert reported.count(failing.id) == 1, "a sandbox that still runs and fails its probe is reported"


async def test_a_sandbox_paused_during_its_probe_is_judged_next_round(
    service: SandboxService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`docker commit` pauses a container while a snapshot is taken: its agent stops answering for that long."""
    info = await service.create(ALICE, SandboxSpec(kind="terminal", labels={"t": "paused-mid-probe"}))
    instance = (await _record(service, info.id)).instance
    inspect, reported, probed = service.backend.inspect, [], []

    async def frozen(backend: Backend, instance_id: str, *, known: BackendInstance | None = None) -> Health:
        if instance_id != instance:
            return Health(ok=True, checks={})
        probed.append(instance_id)
        return Health(ok=False, checks={"agent": HealthCheck(ok=False, detail="no answer within 10 s")})

    async def paused(instance_id: str) -> BackendInstance:  # paused after the round's listing, during the probe
        engine = await inspect(instance_id)
        return replace(engine, state=RuntimeState.PAUSED) if instance_id in probed else engine

    async def mark_failed(record: SandboxRecord, why: str, *, cause: str) -> None:
        reported.append(record.id)

    monkeypatch.setattr(lifecycle_module, "probe_agent", frozen)
    monkeypatch.setattr(service.backend, "inspect", paused)
    monkeypatch.setattr(service, "mark_failed", mark_failed)
    try:
        await Lifecycle(service, LifecycleSettings(), logger=LOGGER).check_health()
        assert probed and reported == [], "a paused sandbox was reported failed"
        monkeypatch.setattr(service.backend, "inspect", inspect)  # unpaused, and its agent still does not answer
        await Lifecycle(service, LifecycleSettings(), logger=LOGGER).check_health()
        assert reported == [info.id], "a running sandbox whose agent does not answer is reported"
    finally:
        monkeypatch.undo()
        await service.delete(ALICE, info.id)


@pytest.mark.parametrize("engine_learns", [True, False], ids=["dead-container", "hung-agent"])
async def test_a_silent_agent_waits_a_while_for_the_engines_word(
    service: SandboxService, monkeypatch: pytest.MonkeyPatch, engine_learns: bool
) -> None:
    """On an engine slow to learn of a container's death (a kubelet, within a second or two), a container that died
    is reported with the engine's word on it; a hung agent in a running container, after the wait, with the
    agent's."""
    info = await service.create(ALICE, SandboxSpec(kind="terminal", labels={"t": "engine-word"}))
    instance = (await _record(service, info.id)).instance
    inspect, reported, inspected = service.backend.inspect, [], []

    async def silent(backend: Backend, instance_id: str, *, known: BackendInstance | None = None) -> Health:
        if instance_id != instance:
            return Health(ok=True, checks={})
        return Health(ok=False, checks={"agent": HealthCheck(ok=False, detail="does not answer: ConnectionRefused")})

    async def slow_engine(instance_id: str) -> BackendInstance:  # says running for its first five looks
        engine = await inspect(instance_id)
        if instance_id != instance:
            return engine
        inspected.append(instance_id)
        if engine_learns and len(inspected) > 5:
            return replace(engine, state=RuntimeState.EXITED, exit_code=137, detail="OOMKilled")
        return engine

    async def mark_failed(record: SandboxRecord, why: str, *, cause: str) -> None:
        reported.append((record.id, why, cause))

    monkeypatch.setattr(lifecycle_module, "probe_agent", silent)
    monkeypatch.setattr(service.backend, "status_lag_s", 3.0)
    monkeypatch.setattr(lifecycle_module, "ENGINE_WORD_POLL_S", 0.05)
    monkeypatch.setattr(service.backend, "inspect", slow_engine)
    monkeypatch.setattr(service, "mark_failed", mark_failed)
    try:
        await Lifecycle(service, LifecycleSettings(), logger=LOGGER).check_health()
    finally:
        monkeypatch.undo()
        await service.delete(ALICE, info.id)
    if engine_learns:
        assert reported == [(info.id, "its container is exited (exit code 137): OOMKilled", "container_exited")]
        assert len(inspected) == 6, "the round stopped looking once the engine had its word"
    else:
        assert reported == [(info.id, "agent: does not answer: ConnectionRefused", "probe_failed")]
        assert len(inspected) > 6, "the round waited for the engine's word before reporting the agent's"


async def _record(service: SandboxService, sandbox_id: str) -> SandboxRecord:
    doc = await service.store.get(SANDBOXES, sandbox_id)
    assert doc is not None
    return SandboxRecord.model_validate(doc)


async def test_a_terminal_whose_agent_lives_is_deep_probed_every_terminal_deep_probe_s(
    service: SandboxService, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = await service.create(ALICE, SandboxSpec(kind="terminal", labels={"t": "proven"}))
    instance = (await _record(service, info.id)).instance
    probed: list[str] = []
    probe = lifecycle_module.probe_agent

    async def counting(backend: Backend, instance_id: str) -> Health:
        probed.append(instance_id)
        return await probe(backend, instance_id)

    monkeypatch.setattr(lifecycle_module, "probe_agent", counting)
    lifecycle = Lifecycle(service, LifecycleSettings(terminal_deep_probe_s=10), logger=LOGGER)
    try:
        await lifecycle.check_health()
        assert probed.count(instance) == 1, "a sandbox never probed is probed"
        await lifecycle.check_health()
        assert probed.count(instance) == 1, "its agent's connection is open and its last probe passed just now"
        lifecycle._probed_ok[instance] -= 10  # that probe is as old as the setting: due again
        await lifecycle.check_health()
        assert probed.count(instance) == 2
        every_round = Lifecycle(service, LifecycleSettings(terminal_deep_probe_s=0), logger=LOGGER)
        await every_round.check_health()
        await every_round.check_health()
        assert probed.count(instance) == 4, "0: every sandbox every round"
    finally:
        monkeypatch.undo()
        await service.delete(ALICE, info.id)


async def test_a_terminal_whose_agent_died_is_probed_first_in_the_next_round(
    service: SandboxService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its agent's pooled connection closes with the process, so the round after probes it at once (before any
    other, even when the round's probes are capped) and reports it, within its terminal_deep_probe_s. The engine
    does not notice here: in a container, the agent is not the main process, which stays up."""
    made = [await service.create(ALICE, SandboxSpec(kind="terminal", labels={"t": "died"})) for _ in range(2)]
    victim, other = [(await _record(service, info.id)).instance for info in made]
    reported: list[tuple[str, str]] = []
    inspect = service.backend.inspect

    async def mark_failed(record: SandboxRecord, why: str, *, cause: str) -> None:
        reported.append((record.instance, cause))

    async def nothing_stopped() -> list[BackendInstance]:
        return []

    async def still_running(instance_id: str) -> BackendInstance:
        return replace(await inspect(instance_id), state=RuntimeState.RUNNING)

    lifecycle = Lifecycle(service, LifecycleSettings(terminal_deep_probe_s=60, probes_per_round=1), logger=LOGGER)
    try:
        for _ in range(3):  # in turn, one a round, until both were probed (and anything else the module left)
            await lifecycle.check_health()
        assert {victim, other} <= set(lifecycle._probed_ok)
        agent = service.backend.agent(victim)
        assert agent.connected()
        service.backend._procs[victim].process.kill()  # type: ignore[attr-defined]
        await eventually(lambda: not agent.connected(), 10, "the dead agent's connection closing")
        monkeypatch.setattr(service, "mark_failed", mark_failed)
        monkeypatch.setattr(service.backend, "list_not_running", nothing_stopped)
        monkeypatch.setattr(service.backend, "inspect", still_running)
        monkeypatch.setattr(service.backend, "status_lag_s", 0.0)
        lifecycle._probed_ok[other] -= 60  # due in its turn too: the cap of one probe goes to the dead agent
        await lifecycle.check_health()
        assert reported == [(victim, "probe_failed")]
    finally:
        monkeypatch.undo()
        for info in made:
            await service.delete(ALICE, info.id)


def test_deep_probes_in_turn_reach_every_sandbox_while_which_are_due_changes(service: SandboxService) -> None:
    """A fleet larger than a round's share, where a sandbox probed lately is not due for a few rounds (as a terminal
    with an open agent connection is not for ``terminal_deep_probe_s``): each round's share starts after the id the
    last one ended with, so every sandbox's probe comes within a lap. (A turn kept as a position into the list of
    due sandboxes, which shrinks and grows, skipped some ids for many rounds: a lost node's agents went unprobed.)"""
    lifecycle = Lifecycle(service, LifecycleSettings(probes_per_round=3), logger=LOGGER)
    fleet = [SimpleNamespace(id=f"sb-{i:02d}") for i in range(20)]  # a share is chosen by id alone
    probed_in: dict[str, int] = {}
    for round_ in range(40):
        due = [r for r in fleet if round_ - probed_in.get(r.id, -99) > 4]  # probed within 4 rounds: not due
        for record in lifecycle._in_turn(cast(list[SandboxRecord], due)):
            probed_in[record.id] = round_
        waits = [round_ - probed_in.get(r.id, -1) for r in fleet]
        assert max(waits) <= 20 // 3 + 5, (round_, sorted(zip(waits, (r.id for r in fleet), strict=True))[-3:])


async def test_a_running_instance_the_engine_doubts_is_probed_first(
    service: SandboxService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pod whose node stopped reporting stays Running as last reported, its Ready condition False: the engine's
    listing says so (``serving`` False), and the round probes it before any other, even with the round's probes
    capped and its last probe passed just now. The probe decides: here the agent answers, so nothing is reported."""
    made = [await service.create(ALICE, SandboxSpec(kind="terminal", labels={"t": "doubted"})) for _ in range(2)]
    doubted, other = [(await _record(service, info.id)).instance for info in made]
    probed: list[str] = []
    probe = lifecycle_module.probe_agent
    inspect = service.backend.inspect

    async def counting(backend: Backend, instance_id: str) -> Health:
        probed.append(instance_id)
        return await probe(backend, instance_id)

    async def not_ready() -> list[BackendInstance]:
        return [replace(await inspect(doubted), state=RuntimeState.RUNNING, serving=False)]

    lifecycle = Lifecycle(service, LifecycleSettings(terminal_deep_probe_s=60, probes_per_round=1), logger=LOGGER)
    try:
        monkeypatch.setattr(lifecycle_module, "probe_agent", counting)
        for _ in range(3):  # in turn, one a round, until both passed (and anything else the module left)
            await lifecycle.check_health()
        assert {doubted, other} <= set(lifecycle._probed_ok)
        probed.clear()
        monkeypatch.setattr(service.backend, "list_not_running", not_ready)
        lifecycle._probed_ok[other] -= 60  # due in its turn: the cap of one probe would go to it
        await lifecycle.check_health()
        assert probed[0] == doubted, probed
        assert (await _record(service, made[0].id)).state is SandboxState.RUNNING, "its agent answered"
    finally:
        monkeypatch.undo()
        for info in made:
            await service.delete(ALICE, info.id)
