"""Races between background work (health rounds, activity updates) and the calls around them, on the fake backend."""

from __future__ import annotations

import pytest

from sandbox.backends.base import BackendInstance
from sandbox.models import Exec, SandboxSpec, SandboxState
from sandbox.service import SandboxService
from sandbox.service.auth import Principal
from sandbox.service.lifecycle import Lifecycle, LifecycleSettings
from sandbox.service.records import SANDBOXES, SandboxRecord
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
        service._touched.clear()  # the step's activity update is due
        await service._touch(read_before_the_reset)
        after = await service.store.get(SANDBOXES, info.id)
        assert after is not None and after["instance"] != read_before_the_reset.instance, "the reset was undone"
        result = await service.exec(ALICE, info.id, Exec(cmd="echo alive"))
        assert result.stdout == "alive\n"
    finally:
        await service.delete(ALICE, info.id)
